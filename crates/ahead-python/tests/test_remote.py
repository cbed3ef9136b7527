"""Objects in an S3 store (the embedded server, run by `ahead bench serve`)
read through ahead.open: the bytes, the io API, errors, a store that fails
some requests, an object overwritten mid-read, forked workers."""

import errno
import multiprocessing as mp
import os
import signal
import time

import pytest

import ahead
from conftest import expected

SIZE = (6 << 20) + 4321


@pytest.fixture(scope="module")
def obj(s3):
    return s3.put("py/gen.bin", expected(0, SIZE))


def test_an_object_reads_as_its_bytes(s3, obj):
    with ahead.open(obj, options=s3.options()) as f:
        assert f.size == SIZE and f.name == obj
        assert f.read(1000) == expected(0, 1000)
        f.seek(-65536, 2)
        assert f.read() == expected(SIZE - 65536, 65536)
        # Backward 64 KiB reads, then random ones, then readinto.
        for at in range(SIZE - (64 << 10), 0, -(1 << 20)):
            f.seek(at)
            assert f.read(64 << 10) == expected(at, 64 << 10)
        for at in (5, 4097, SIZE // 3, SIZE - 10):
            assert f.pread(4096, at) == expected(at, min(4096, SIZE - at))
        b = bytearray(300_001)
        f.seek(17)
        assert f.readinto(b) == len(b) and bytes(b) == expected(17, len(b))
        st = f.stats()
        assert st["remote_requests"] > 0 and st["remote_bytes_fetched"] >= 1000


def test_the_aws_environment_is_read_when_no_options_are_given(s3, obj, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    with ahead.open(obj) as f:
        assert f.read(5000) == expected(0, 5000)


def test_errors(s3, obj):
    with pytest.raises(FileNotFoundError):
        ahead.open(s3.url("py/no-such-object"), options=s3.options())
    with pytest.raises(ValueError):
        ahead.open(obj, options={**s3.options(), "no_such_option": "1"})
    with pytest.raises(ValueError):
        ahead.open(obj, io="buffered", options=s3.options())
    with pytest.raises(ValueError):
        ahead.open("/tmp", options=s3.options())
    with pytest.raises(PermissionError):
        ahead.open(obj, options={**s3.options(), "secret_access_key": "wrong"})
    # An endpoint without its scheme, or a key with a line break: object_store
    # panicked on its first request with either.
    for bad in ({"endpoint": "localhost:9000"}, {"access_key_id": "key\n"}):
        with pytest.raises(ValueError, match="endpoint|access key"):
            ahead.open(obj, options={**s3.options(), **bad})
    f = ahead.open(obj, options=s3.options())
    f.close()
    with pytest.raises(ValueError):
        f.read(1)


def test_failed_requests_are_retried_and_the_bytes_stay_right(s3, obj):
    s3.fail(0.3)
    try:
        with ahead.open(obj, options=s3.options(), cache="64m") as f:
            f.seek(SIZE // 2)
            assert f.read(2 << 20) == expected(SIZE // 2, 2 << 20)
    finally:
        s3.fail(0)


def test_an_object_overwritten_mid_read_is_an_error_not_other_bytes(s3):
    url = s3.put("py/changing.bin", expected(0, 4 << 20))
    with ahead.open(url, options=s3.options(), cache="16m") as f:
        assert f.read(4096) == expected(0, 4096)
        s3.put("py/changing.bin", b"\xff" * (4 << 20))
        f.seek(3 << 20)
        with pytest.raises(OSError) as e:
            f.read(4096)
        assert e.value.errno == errno.ESTALE


N_OBJECTS = 64
OBJ_SIZE = 256 << 10


@pytest.fixture(scope="module")
def many(s3):
    return [s3.put(f"py/many/{i:03}", expected(i * OBJ_SIZE, OBJ_SIZE)) for i in range(N_OBJECTS)]


_FILES = []


def _sample(args):
    i, at = args
    f = _FILES[i]
    f.seek(at)
    return f.read(4096) == expected(i * OBJ_SIZE + at, 4096), os.getpid()


@pytest.mark.parametrize("run", range(10))
def test_8_forked_workers_over_64_objects_read_right(s3, many, run):
    # Opened in the parent, as a DataLoader's dataset is, and inherited by
    # 8 forked workers, each with its own engine and positions.
    _FILES[:] = [ahead.open(u, options=s3.options()) for u in many]
    try:
        assert _FILES[0].read(10) == expected(0, 10)
        work = [((k * 7 + run) % N_OBJECTS, (k * 4099) % (OBJ_SIZE - 4096)) for k in range(256)]
        with mp.get_context("fork").Pool(8) as pool:
            got = pool.map_async(_sample, work, chunksize=4).get(timeout=120)
        assert all(ok for ok, _ in got)
        assert len({pid for _, pid in got}) > 1
        # The parent's files are as they were.
        assert _FILES[0].read(10) == expected(10, 10)
    finally:
        for f in _FILES:
            f.close()
        _FILES.clear()


def _read_passed(f):
    return f.tell(), f.read(4096)


def test_files_pickle_to_spawned_workers_at_their_positions(s3, many):
    files = [ahead.open(u, options=s3.options()) for u in many[:8]]
    for i, f in enumerate(files):
        f.seek(i * 1000)
    with mp.get_context("spawn").Pool(2) as pool:
        got = pool.map(_read_passed, files)
    for i, (pos, data) in enumerate(got):
        assert pos == i * 1000 and data == expected(i * OBJ_SIZE + i * 1000, 4096)
    for f in files:
        f.close()


def test_objects_get_an_engine_sized_for_a_store(s3):
    # The default engine for objects asks for 1 MB in one GET (a local
    # file's engine would split it into 256 KiB reads); a small budget
    # given for an object shrinks its windows to fit rather than failing.
    # An object of its own: one another test read is kept in the default
    # engine, and its reads fetch nothing.
    obj = s3.put("py/sized.bin", expected(0, SIZE))
    with ahead.open(obj, options=s3.options()) as f:
        before = f.stats()["remote_requests"]
        assert f.pread(1_000_000, 2 << 20) == expected(2 << 20, 1_000_000)
        assert f.stats()["remote_requests"] - before == 1
    with ahead.open(obj, options=s3.options(), cache="8m") as f:
        assert f.pread(1_000_000, 3 << 20) == expected(3 << 20, 1_000_000)


def test_an_object_opened_again_reads_what_it_left_until_it_changes(s3):
    # As the kernel serves a file opened again: the engine keeps an
    # object's pages past its close, held to its size and ETag.
    obj = s3.put("py/again.bin", expected(0, SIZE))
    with ahead.open(obj, options=s3.options()) as f:
        assert f.pread(1 << 20, 1 << 20) == expected(1 << 20, 1 << 20)
        assert f.stats()["remote_bytes_fetched"] >= 1 << 20
    with ahead.open(obj, options=s3.options()) as f:
        assert f.pread(1 << 20, 1 << 20) == expected(1 << 20, 1 << 20)
        assert f.stats()["remote_bytes_fetched"] == 0
    s3.put("py/again.bin", expected(7, SIZE))
    with ahead.open(obj, options=s3.options()) as f:
        assert f.pread(1 << 20, 1 << 20) == expected((1 << 20) + 7, 1 << 20)
        assert f.stats()["remote_bytes_fetched"] >= 1 << 20


def _epoch(args):
    """One forked worker's share of an epoch: whole objects through an
    engine with a disk tier; (bytes right, bytes fetched, tier bytes)."""
    urls, cache_dir, options = args
    eng = ahead.Engine(objects=True, cache_dir=cache_dir)
    ok, fetched, tier = True, 0, 0
    for i, u in urls:
        with eng.open(u, options=options) as f:
            data = f.read()
            ok &= data == expected(i * OBJ_SIZE, OBJ_SIZE)
            s = f.stats()
            fetched += s["remote_bytes_fetched"]
            tier += s["tier_bytes"]
    return ok, fetched, tier


def test_a_second_epoch_of_forked_workers_reads_from_the_disk_tier(s3, many, tmp_path):
    # Each epoch its own pool of 8 forked workers, each with its own
    # engine (as DataLoader workers would be), all naming one directory.
    work = [[(i, u) for i, u in enumerate(many) if i % 8 == w] for w in range(8)]
    args = [(share, str(tmp_path / "tier"), s3.options()) for share in work]
    totals = []
    for _ in range(2):
        with mp.get_context("fork").Pool(8) as pool:
            got = pool.map(_epoch, args)
        assert all(ok for ok, _, _ in got)
        totals.append((sum(f for _, f, _ in got), sum(t for _, _, t in got)))
    (first_fetched, first_tier), (second_fetched, second_tier) = totals
    assert first_fetched >= len(many) * OBJ_SIZE and first_tier == 0
    assert second_fetched == 0 and second_tier >= len(many) * OBJ_SIZE


def test_a_cache_dir_others_may_write_is_refused(s3, obj, tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    eng = ahead.Engine(objects=True, cache_dir=str(d))
    with pytest.raises(PermissionError, match="writable by no one else"):
        eng.open(obj, options=s3.options())


KILL_SIZE = 48 << 20


def _tier_data_bytes(d):
    """Bytes the tier's data files hold on disk (they are sparse)."""
    total = 0
    for root, _, files in os.walk(d):
        total += sum(os.stat(os.path.join(root, n)).st_blocks * 512 for n in files if n.endswith(".dat"))
    return total


def test_workers_killed_while_filling_the_tier_leave_nothing_wrong_in_it(s3, tmp_path):
    # Three workers in turn, each reading the object through the tier and
    # killed (SIGKILL: no handler, no flush) once the tier holds another
    # quarter of it, that is while it is fetching and writing chunks.
    url = s3.put("py/kill.bin", expected(7, KILL_SIZE))
    d = str(tmp_path / "tier")
    for k in range(1, 4):
        pid = os.fork()
        if pid == 0:
            try:
                eng = ahead.Engine(objects=True, cache_dir=d)
                while True:
                    with eng.open(url, options=s3.options()) as f:
                        f.read()
            finally:
                os._exit(0)
        deadline = time.monotonic() + 60
        while _tier_data_bytes(d) < k * KILL_SIZE // 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert time.monotonic() < deadline, f"worker {k}: the tier did not grow"
    # What they left is read back or fetched again, never served wrong; and
    # kept: a last reader fetches nothing.
    eng = ahead.Engine(objects=True, cache_dir=d)
    with eng.open(url, options=s3.options()) as f:
        assert f.read() == expected(7, KILL_SIZE)
        s = f.stats()
    assert s["tier_bytes"] > 0 and s["tier_bytes"] + s["remote_bytes_fetched"] >= KILL_SIZE, s
    eng = ahead.Engine(objects=True, cache_dir=d)
    with eng.open(url, options=s3.options()) as f:
        assert f.read() == expected(7, KILL_SIZE)
        assert f.stats()["remote_bytes_fetched"] == 0


TWO_SIZE = 16 << 20


def _read_at_once(url, d, options, start, out):
    eng = ahead.Engine(objects=True, cache_dir=d)
    start.wait()
    with eng.open(url, options=options) as f:
        ok = f.read() == expected(11, TWO_SIZE)
        out.put((ok, f.stats()["remote_bytes_fetched"]))


def test_two_processes_reading_one_object_at_once_through_one_tier(s3, tmp_path):
    # Both fetch the chunks neither has kept yet, and write the same bytes:
    # each reads the object right, and a third process fetches nothing.
    url = s3.put("py/two.bin", expected(11, TWO_SIZE))
    d = str(tmp_path / "tier")
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_read_at_once, args=(url, d, s3.options(), start, out)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    assert all(ok for ok, _ in got), got
    assert sum(f for _, f in got) >= TWO_SIZE, got
    start, out = ctx.Barrier(1), ctx.Queue()
    p = ctx.Process(target=_read_at_once, args=(url, d, s3.options(), start, out))
    p.start()
    ok, fetched = out.get(timeout=120)
    p.join()
    assert ok and fetched == 0


class _WebObject:
    """One object served over plain HTTP by a thread of the test: HEAD, GET
    of a `Range: bytes=A-B`, an ETag per version, If-Match held to it (412),
    as a web server serves a file. `replace` makes a new version."""

    def __init__(self, data):
        import http.server
        import re
        import threading

        web = self
        self.data, self.version = data, 1

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(False)

            def do_GET(self):
                self.answer(True)

            def answer(self, body):
                data, etag = web.data, f'"v{web.version}"'
                if self.path != "/d/obj.bin":
                    return self.empty(404)
                match = self.headers.get("If-Match")
                if match and match not in (etag, "*"):
                    return self.empty(412)
                a, b, status = 0, len(data), 200
                r = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range") or "")
                if r:
                    a = int(r.group(1))
                    b = min(len(data), int(r.group(2)) + 1) if r.group(2) else len(data)
                    if a >= len(data):
                        return self.empty(416)
                    status = 206
                self.send_response(status)
                self.send_header("ETag", etag)
                self.send_header("Last-Modified", "Wed, 21 Oct 2026 07:28:00 GMT")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {a}-{b - 1}/{len(data)}")
                self.send_header("Content-Length", str(b - a))
                self.end_headers()
                if body:
                    self.wfile.write(data[a:b])

            def empty(self, status):
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/d/obj.bin"

    def replace(self, data):
        self.data, self.version = data, self.version + 1

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_an_object_of_a_web_server_reads_by_http_and_a_replacement_is_an_error():
    web = _WebObject(expected(0, SIZE))
    try:
        with ahead.open(web.url) as f:
            assert f.size == SIZE
            f.seek(-65536, 2)
            assert f.read() == expected(SIZE - 65536, 65536)
            for at in range(SIZE - (64 << 10), 0, -(1 << 20)):
                assert f.pread(64 << 10, at) == expected(at, 64 << 10)
        with ahead.open(web.url, cache="16m") as f:
            assert f.read(4096) == expected(0, 4096)
            web.replace(b"\xff" * SIZE)
            f.seek(5 << 20)
            with pytest.raises(OSError) as e:
                f.read(4096)
            assert e.value.errno == errno.ESTALE
        with pytest.raises(FileNotFoundError):
            ahead.open(web.url.replace("obj.bin", "none.bin"))
    finally:
        web.close()
