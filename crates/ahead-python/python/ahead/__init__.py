"""ahead: local files and objects in stores (``s3://``, ``http(s)://``) as
Python file objects, read through ahead's cache and readahead.

    import ahead
    with ahead.open("data.bin") as f:          # a local file, Direct mode
        header = f.read(4096)
        f.seek(-65536, 2)
        tail = f.read()
    with ahead.open("s3://bucket/key") as f:   # AWS_* from the environment
        buf = bytearray(1 << 20)
        f.readinto(buf)

* ``ahead.open`` returns an :class:`File`, an ``io.BufferedIOBase``: ``read``,
  ``read1``, ``readinto``, ``readinto1``, ``readline``, iteration, ``seek``,
  ``tell``, ``close`` and ``with`` work as for ``open(path, "rb")``.
* Reads release the GIL while they wait and copy; threads may share a file.
* Safe across ``fork``: a child makes its own engine and reopens its files,
  at the positions they had, on its first use of them.
* One :class:`Engine` is one memory budget for every file opened through
  it; ``ahead.open`` without one uses a process-wide default engine (one
  for local files, one for objects, whose windows and requests are sized
  for a store).
"""

import io as _io
import os as _os

from . import _ahead

__all__ = ["open", "Engine", "File"]

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(v, what):
    """A byte count from an int or a string such as '512m' or '1g'."""
    if v is None or isinstance(v, int):
        if isinstance(v, int) and v <= 0:
            raise ValueError(f"{what} must be positive, not {v}")
        return v
    if isinstance(v, str):
        s = v.strip().lower().removesuffix("ib").removesuffix("b")
        num, unit = s, ""
        if s and s[-1] in _SIZE_UNITS:
            num, unit = s[:-1], s[-1]
        try:
            n = int(float(num) * _SIZE_UNITS[unit])
        except ValueError:
            raise ValueError(f"{what}={v!r}: a size such as 4096, '512m' or '1g'") from None
        if n <= 0:
            raise ValueError(f"{what} must be positive, not {v!r}")
        return n
    raise ValueError(f"{what}={v!r}: a size such as 4096, '512m' or '1g'")


class Engine:
    """One cache budget and readahead configuration shared by the files
    opened through it.

    ``cache``: the budget, bytes or a size string ('1g'); ``policy``:
    'ahead' (the default), 'ondemand' or 'legacy'; ``max_readahead``: the
    largest window; ``objects``: windows and requests sized for objects
    in a store (64 MiB windows of 4 MiB GETs) rather than a local disk;
    ``max_io``: the largest single read or GET (a disk's default is 256
    KiB; on a volume capped by IOPS, larger reads go further).
    ``cache_dir``: a directory (yours alone) for a disk tier of objects'
    chunks, shared by every process that names it, forked workers
    included, so that an object read twice is fetched once;
    ``cache_dir_size``: its bound (default: half the space free under it).
    """

    def __init__(
        self,
        cache=None,
        policy=None,
        max_readahead=None,
        *,
        objects=False,
        max_io=None,
        cache_dir=None,
        cache_dir_size=None,
        _native=None,
    ):
        self._native = _native or _ahead.Engine(
            _size(cache, "cache"),
            policy,
            _size(max_readahead, "max_readahead"),
            bool(objects),
            _size(max_io, "max_io"),
            None if cache_dir is None else _os.fspath(cache_dir),
            _size(cache_dir_size, "cache_dir_size"),
        )

    def open(self, path, mode="rb", *, io=None, options=None):
        """Opens ``path`` (a path or an ``s3://``/``http(s)://`` URL) for
        reading through this engine; see :func:`ahead.open`."""
        return open(path, mode, io=io, engine=self, options=options)

    def stats(self):
        """The engine's counters, as a dict."""
        return self._native.stats()

    def evict(self, path):
        """Drops the pages this engine keeps of the closed local file
        ``path`` (a file closed and opened again reads them while it is
        unchanged), so that its next open reads the device; the number of
        pages dropped."""
        return self._native.evict(_os.fspath(path))


_defaults = {}


def _default_engine(objects):
    if objects not in _defaults:
        _defaults[objects] = Engine(_native=_ahead.default(objects))
    return _defaults[objects]



class File(_io.BufferedIOBase):
    """A file or object opened for reading by :func:`ahead.open`."""

    def __init__(self, raw, io=None, options=None):
        super().__init__()
        self._raw = raw
        self._io = io
        self._options = options

    def __reduce__(self):
        # Pickled (a spawn-started DataLoader worker receives its dataset
        # so): opened again by name in the receiving process, through its
        # default engine, at the same position.
        self._check()
        return (_reopen, (self.name, self._io, self._options, self.tell()))

    # What it is.
    @property
    def name(self):
        return self._raw.name

    @property
    def mode(self):
        return "rb"

    @property
    def size(self):
        """The size in bytes when it was opened."""
        return self._raw.size

    def readable(self):
        self._check()
        return True

    def seekable(self):
        self._check()
        return True

    def writable(self):
        self._check()
        return False

    def _check(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    # Reading. The native file checks for a closed file itself (the same
    # ValueError), so the calls on every read's path do not check twice.
    def read(self, size=-1):
        if size is None:
            size = -1
        return self._raw.read(int(size))

    def read1(self, size=-1):
        return self.read(size)

    def readinto(self, b):
        if not isinstance(b, bytearray):
            # A buffer of other items (a numpy array of uint64, an
            # array.array) as the bytes it holds: a view, not a copy.
            m = memoryview(b)
            if m.format != "B" or m.ndim != 1:
                b = m.cast("B")
        return self._raw.readinto(b)

    def readinto1(self, b):
        return self.readinto(b)

    def readline(self, size=-1):
        self._check()
        if size is None:
            size = -1
        start = self._raw.tell()
        out = bytearray()
        # Short first (most lines are), doubling for long ones.
        chunk = 256
        while size < 0 or len(out) < size:
            want = chunk if size < 0 else min(chunk, size - len(out))
            piece = self._raw.read(want)
            if not piece:
                break
            nl = piece.find(b"\n")
            if nl >= 0:
                out += piece[: nl + 1]
                break
            out += piece
            chunk = min(chunk * 2, 1 << 16)
        self._raw.seek(start + len(out))
        return bytes(out)

    def pread(self, size, offset):
        """``size`` bytes at ``offset`` without moving the position."""
        return self._raw.pread(size, offset)

    # Position.
    def seek(self, offset, whence=_os.SEEK_SET):
        return self._raw.seek(offset, whence)

    def tell(self):
        return self._raw.tell()

    # What ahead adds.
    def stats(self):
        """The file's counters, as a dict (objects add ``remote_*``)."""
        self._check()
        return self._raw.stats()

    def advise(self, advice, offset=0, length=0):
        """How ``[offset, offset + length)`` will be read (``length`` 0: to
        the end): 'normal', 'sequential', 'reverse', 'random' or
        'willneed'."""
        self._check()
        self._raw.advise(advice, offset, length)

    def prefetch(self, ranges):
        """Starts reading the ``(offset, length)`` ranges now."""
        self._check()
        self._raw.prefetch([(int(o), int(n)) for o, n in ranges])

    def close(self):
        if not self.closed:
            self._raw.close()
        super().close()

    def detach(self):
        raise _io.UnsupportedOperation("detach")

    def __repr__(self):
        return f"<ahead.File name={self.name!r} size={self.size}>"


def open(path, mode="rb", *, io=None, cache=None, policy=None, engine=None, options=None):
    """Opens ``path`` for reading through ahead: a local path (``str`` or
    ``os.PathLike``), or an ``s3://bucket/key`` (credentials, region and
    endpoint from the standard ``AWS_*`` environment) or ``http(s)://``
    URL. Returns a :class:`File`.

    ``mode``: 'rb' only. ``io``: 'direct' (the default: ahead's own cache),
    'buffered' (the kernel's cache) or 'uncached' (the kernel's cache left
    as it was), for local files. ``cache`` and ``policy`` make an engine of
    their own for this file; ``engine`` shares one (the default: the
    process-wide engine for local files, or the one for objects).
    ``options``: for a URL, object_store's
    configuration over the environment, such as ``{"endpoint":
    "http://127.0.0.1:9000", "access_key_id": …, "secret_access_key": …,
    "region": …, "allow_http": "true"}``.
    """
    if mode not in ("rb", "br"):
        raise ValueError(f"mode={mode!r}: ahead files are read-only and binary ('rb')")
    if engine is not None and (cache is not None or policy is not None):
        raise ValueError("give either engine, or cache and policy")
    path = _os.fspath(path)
    if isinstance(path, bytes):
        path = _os.fsdecode(path)
    if not isinstance(path, str):
        raise ValueError(f"path={path!r}: a path or a URL")
    if engine is None:
        objects = _ahead.is_url(path)
        if cache is not None or policy is not None:
            engine = Engine(cache, policy, objects=objects)
        else:
            engine = _default_engine(objects)
    if options is not None:
        if not isinstance(options, dict):
            raise ValueError(f"options={options!r}: a dict of object store options")
        options = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    native_options = list(options.items()) if options is not None else None
    return File(engine._native.open(path, io, native_options), io, options)


def _reopen(name, io, options, pos):
    f = open(name, io=io, options=options)
    f.seek(pos)
    return f
