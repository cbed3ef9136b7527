"""An fsspec filesystem whose reads go through ahead: ``ahead://``.

Registered with fsspec under the protocol ``ahead`` when this module is
imported (``import ahead.fsspec``; fsspec also finds it by name). Paths:

* ``ahead:///abs/path`` (or ``ahead::file:///abs/path``): a local file.
* ``ahead::s3://bucket/key``: an object in an S3-compatible store, in
  fsspec's chaining syntax; options for the store go in ``s3={...}`` as
  they would for s3fs (``endpoint_url``, ``key``, ``secret``, ``token``,
  ``client_kwargs={"region_name": …}``, ``anon``).
* ``ahead::https://host/path``: an object served over HTTP.

Reads (``open(..., "rb")``, ``cat_file``, ``cat_ranges``, ``get``) go
through :func:`ahead.open`, so they share its cache, readahead and memory
budget. Everything else (listing, ``info``, writes, copies, removals) is
done by the target filesystem (fsspec's local one, s3fs, fsspec's HTTP
one), as fsspec's caching filesystems do: ahead is a read path, not a
store. Without the target's package (s3fs for ``s3``), files can still be
opened and read, and ``info`` of a file comes from ahead's own open.

    import fsspec, pyarrow.parquet as pq
    with fsspec.open("ahead::s3://bucket/data.parquet",
                     s3={"endpoint_url": "http://127.0.0.1:9000"}) as f:
        table = pq.read_table(f, columns=["a", "b"])
"""

import fsspec as _fsspec
from fsspec.spec import AbstractFileSystem as _Abstract

try:  # fsspec 2025.5 and later: a marker for filesystems layered on another
    from fsspec.implementations.chained import ChainedFileSystem as _Base
except ImportError:  # pragma: no cover - older fsspec
    _Base = _Abstract

import ahead as _ahead

__all__ = ["AheadFileSystem"]

_LOCAL = ("file", "local")
_S3 = ("s3", "s3a")
_HTTP = ("http", "https")


def _object_options(target_options):
    """object_store's options for an S3 store from s3fs-style ones."""
    t = dict(target_options or {})
    ck = dict(t.get("client_kwargs") or {})
    out = {}
    endpoint = t.get("endpoint_url") or ck.get("endpoint_url")
    if endpoint:
        out["endpoint"] = endpoint
        if endpoint.startswith("http://"):
            out["allow_http"] = "true"
    if t.get("key"):
        out["access_key_id"] = t["key"]
    if t.get("secret"):
        out["secret_access_key"] = t["secret"]
    if t.get("token"):
        out["token"] = t["token"]
    region = ck.get("region_name") or t.get("region")
    if region:
        out["region"] = region
    if t.get("anon"):
        out["skip_signature"] = "true"
    return out


class AheadFileSystem(_Base):
    """Reads a target filesystem's files through ahead's cache and
    readahead (see the module's docstring).

    ``target_protocol``: ``file`` (the default), ``s3`` or ``http(s)``;
    ``target_options``: the target filesystem's options (s3fs's for
    ``s3``), from which the object store's endpoint and credentials are
    taken too; ``options``: object_store options given directly
    (``{"endpoint": …, "allow_http": "true"}``), over those. ``io``,
    ``cache``, ``policy`` and ``engine`` are :func:`ahead.open`'s: without
    ``engine``, ``cache`` or ``policy`` the files share the process-wide
    default engine.
    """

    protocol = "ahead"
    root_marker = "/"

    def __init__(
        self,
        target_protocol=None,
        target_options=None,
        fs=None,
        *,
        io=None,
        cache=None,
        policy=None,
        engine=None,
        options=None,
        fo=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        proto = target_protocol or (fs.protocol if fs is not None else "file")
        if isinstance(proto, (tuple, list)):
            proto = proto[0]
        if proto not in _LOCAL + _S3 + _HTTP:
            raise ValueError(
                f"target_protocol={proto!r}: ahead reads local files, s3:// and http(s)://"
            )
        self.target_protocol = "file" if proto in _LOCAL else proto
        self.target_options = dict(target_options or {})
        self._target = fs
        if engine is None and (cache is not None or policy is not None):
            engine = _ahead.Engine(cache, policy)
        self._engine = engine
        self._io = io
        opts = _object_options(self.target_options) if proto in _S3 else {}
        opts.update({k: str(v) for k, v in (options or {}).items()})
        self._options = opts
        # The root for local paths is "/"; objects' paths start at a bucket
        # or host.
        self.root_marker = "/" if self.target_protocol == "file" else ""

    # Paths.
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for p in ("ahead::", "ahead://"):
            if path.startswith(p):
                path = path[len(p) :]
        for p in ("file://", "local://", "s3://", "s3a://"):
            if path.startswith(p):
                path = path[len(p) :]
                break
        if len(path) > 1:
            path = path.rstrip("/")
        return path

    def unstrip_protocol(self, name):
        return f"ahead::{self._url(name)}" if self.target_protocol != "file" else f"ahead://{name}"

    def _url(self, path):
        """What :func:`ahead.open` takes for ``path``."""
        path = self._strip_protocol(path)
        if self.target_protocol == "file":
            return path
        if self.target_protocol in _S3:
            return f"s3://{path}"
        if "://" in path:
            return path
        return f"{self.target_protocol}://{path}"

    @property
    def target(self):
        """The target filesystem, made on first use (for what ahead does
        not do: listing, writing)."""
        if self._target is None:
            self._target = _fsspec.filesystem(self.target_protocol, **self.target_options)
        return self._target

    def _target_path(self, path):
        path = self._strip_protocol(path)
        if self.target_protocol in _HTTP and "://" not in path:
            return f"{self.target_protocol}://{path}"
        return path

    # Reads: ahead's.
    def _ahead_open(self, path):
        options = self._options if self.target_protocol != "file" else None
        return _ahead.open(self._url(path), io=self._io, engine=self._engine, options=options)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if mode == "rb":
            return self._ahead_open(path)
        return self.target.open(
            self._target_path(path),
            mode,
            block_size=block_size,
            autocommit=autocommit,
            cache_options=cache_options,
            **kwargs,
        )

    def cat_file(self, path, start=None, end=None, **kwargs):
        with self._ahead_open(path) as f:
            lo, hi = _bounds(f.size, start, end)
            return f.pread(hi - lo, lo) if hi > lo else b""

    def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
        """The ranges, each file opened once and all its ranges asked for
        at once (ahead's ``prefetch``) before they are read."""
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        n = len(paths)
        starts = starts if isinstance(starts, list) else [starts] * n
        ends = ends if isinstance(ends, list) else [ends] * n
        if len(starts) != n or len(ends) != n:
            raise ValueError("paths, starts and ends differ in length")
        by_path = {}
        for i, p in enumerate(paths):
            by_path.setdefault(p, []).append(i)
        out = [None] * n
        for p, idx in by_path.items():
            try:
                f = self._ahead_open(p)
            except Exception as e:
                if on_error != "return":
                    raise
                for i in idx:
                    out[i] = e
                continue
            with f:
                spans = {i: _bounds(f.size, starts[i], ends[i]) for i in idx}
                f.prefetch([(lo, hi - lo) for lo, hi in spans.values() if hi > lo])
                for i, (lo, hi) in spans.items():
                    try:
                        out[i] = f.pread(hi - lo, lo) if hi > lo else b""
                    except Exception as e:
                        if on_error != "return":
                            raise
                        out[i] = e
        return out

    # Metadata and writes: the target's.
    def ls(self, path, detail=True, **kwargs):
        return self.target.ls(self._target_path(path), detail=detail, **kwargs)

    def info(self, path, **kwargs):
        try:
            target = self.target
        except ImportError:
            # No package for the target (s3fs): a file's size from ahead.
            with self._ahead_open(path) as f:
                return {"name": self._strip_protocol(path), "size": f.size, "type": "file"}
        return target.info(self._target_path(path), **kwargs)

    def created(self, path):
        return self.target.created(self._target_path(path))

    def modified(self, path):
        return self.target.modified(self._target_path(path))

    def mkdir(self, path, create_parents=True, **kwargs):
        return self.target.mkdir(self._target_path(path), create_parents=create_parents, **kwargs)

    def makedirs(self, path, exist_ok=False):
        return self.target.makedirs(self._target_path(path), exist_ok=exist_ok)

    def rmdir(self, path):
        return self.target.rmdir(self._target_path(path))

    def rm_file(self, path):
        return self.target.rm_file(self._target_path(path))

    def rm(self, path, recursive=False, maxdepth=None):
        if isinstance(path, list):
            path = [self._target_path(p) for p in path]
        else:
            path = self._target_path(path)
        return self.target.rm(path, recursive=recursive, maxdepth=maxdepth)

    def touch(self, path, truncate=True, **kwargs):
        return self.target.touch(self._target_path(path), truncate=truncate, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        return self.target.cp_file(self._target_path(path1), self._target_path(path2), **kwargs)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        return self.target.mv(
            self._target_path(path1),
            self._target_path(path2),
            recursive=recursive,
            maxdepth=maxdepth,
            **kwargs,
        )

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        return self.target.pipe_file(self._target_path(path), value, mode=mode, **kwargs)

    def put_file(self, lpath, rpath, callback=None, mode="overwrite", **kwargs):
        if callback is not None:
            kwargs["callback"] = callback
        return self.target.put_file(lpath, self._target_path(rpath), mode=mode, **kwargs)


def _bounds(size, start, end):
    """``[start, end)`` of a file of ``size`` bytes as fsspec means them:
    None for its ends, negative from the end, clipped to the file."""
    lo = 0 if start is None else (start if start >= 0 else max(0, size + start))
    hi = size if end is None else (end if end >= 0 else size + end)
    lo = min(lo, size)
    hi = max(lo, min(hi, size))
    return lo, hi


_fsspec.register_implementation("ahead", AheadFileSystem, clobber=True)
