"""``python -m ahead.bench_tier``: epochs of a training-style job over
objects, with and without ahead's disk tier, beside the same bytes read as
local files.

Each epoch is 8 forked workers, each with its own engine (as DataLoader
workers have), reading every one of 64 objects of 16 MiB (2 MiB with
``--quick``) whole, in 1 MiB reads, the objects in a random order drawn per
epoch and dealt out to the workers. Rows:

* ``store``: ahead without a tier, epoch after epoch from the S3 server
  (``ahead bench serve``, the ``s3`` profile by default);
* ``tier epoch 1``: ahead with ``cache_dir`` empty (fetching and keeping);
* ``tier epoch 2``, ``tier epoch 3``: new processes, their memory caches
  cold, the tier warm;
* ``local files``: the same bytes as 64 files on the tier's disk, read by
  ``ahead.open`` (Direct mode), their pages dropped first;
* ``fsspec filecache`` and ``fsspec blockcache`` (where s3fs imports):
  fsspec's disk caches over s3fs, whole files and blocks of files (sparse
  files on disk, fetched block by block as read), epochs 1 and 2;
* ``parquet run 1``, ``parquet run 2``: pyarrow reading 3 of 5 columns of
  a Parquet object (256 MiB; 32 MiB with ``--quick``) through
  ``ahead.open`` with the tier, each run a new process (MB/s of the
  columns' bytes);
* ``scan``: a working set of 512 MiB read whole every epoch by one
  process while another reads a one-off 2 GiB scan beside it, through a
  tier of 1 GiB (with ``--quick``, an eighth of each): the working set's
  hit ratio in the tier (bytes from the tier ÷ bytes read) over the epochs
  from the scan's start on, and the tier's bytes on disk after.

Every byte is checked, outside the clock; the clock runs from the first
worker's first read to the last worker's last. For the tier on a steady
disk, run it under ``steady`` (a cgroup capping reads), as
docs/remote.md does. ``--json`` writes the rows.
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

from ahead.bench import _words, ahead_options

MIB = 1 << 20
WORKERS = 8
N_OBJECTS = 64


def _reader(engine, spec, cache_dir):
    """Opens object ``i`` as ``engine`` reads it."""
    import ahead

    h = spec["hello"]
    if engine == "local":
        return lambda i: ahead.open(os.path.join(spec["local_dir"], f"{i:03}"))
    opts = ahead_options(h)
    if engine in ("filecache", "blockcache"):
        import fsspec

        fs = fsspec.filesystem(
            engine,
            target_protocol="s3",
            target_options={
                "key": h["access_key"],
                "secret": h["secret_key"],
                "endpoint_url": h["endpoint"],
                "client_kwargs": {"region_name": h["region"]},
                "skip_instance_cache": True,
            },
            cache_storage=cache_dir,
        )
        return lambda i: fs.open(f"{h['bucket']}/many/{i:03}", "rb")
    eng = ahead.Engine(
        objects=True,
        cache_dir=cache_dir if engine == "tier" else None,
        cache_dir_size=spec["tier_size"] if engine == "tier" else None,
    )
    return lambda i: eng.open(f"s3://{h['bucket']}/many/{i:03}", options=opts)


def _worker(args):
    spec, engine, cache_dir, share = args
    open_one = _reader(engine, spec, cache_dir)
    size = spec["object_size"]
    buf = bytearray(MIB)
    got, bad, spans = 0, 0, []
    checks = []
    began = time.time()
    for i in share:
        f = open_one(i)
        at = 0
        while at < size:
            n = f.readinto(memoryview(buf)[: min(MIB, size - at)])
            if n <= 0:
                break
            if at % (4 * MIB) == 0:
                checks.append((i, at, bytes(buf[:n])))
            at += n
        got += at
        bad += at != size
        f.close()
    spans.append((began, time.time()))
    # Checked outside the clock: one MiB in four, every object.
    for i, at, data in checks:
        bad += data != _words(i * size + at, len(data))
    return got, bad, spans


def _epoch(spec, engine, cache_dir, seed):
    import multiprocessing as mp

    order = list(range(N_OBJECTS))
    random.Random(seed).shuffle(order)
    shares = [order[w::WORKERS] for w in range(WORKERS)]
    ctx = mp.get_context("fork")
    with ctx.Pool(WORKERS) as pool:
        parts = pool.map(_worker, [(spec, engine, cache_dir, s) for s in shares])
    began = min(s[0] for p in parts for s in p[2])
    ended = max(s[1] for p in parts for s in p[2])
    return sum(p[0] for p in parts), sum(p[1] for p in parts), ended - began


def _parquet_run(args):
    spec, cache_dir = args
    import ahead
    import pyarrow.parquet as pq

    h = spec["hello"]
    opts = ahead_options(h)
    eng = ahead.Engine(objects=True, cache_dir=cache_dir, cache_dir_size=spec["tier_size"])
    t0 = time.perf_counter()
    with eng.open(f"s3://{h['bucket']}/t.parquet", options=opts) as f:
        table = pq.read_table(f, columns=["id", "y", "name"])
    secs = time.perf_counter() - t0
    ok = table.num_rows == spec["rows"] and table.column("id")[-1].as_py() == spec["rows"] - 1
    return secs, ok


def _read_objects(args):
    """Reads objects ``keys`` whole through an engine with the tier;
    (bytes read, bytes from the tier)."""
    spec, cache_dir, keys = args
    import ahead

    h = spec["hello"]
    opts = ahead_options(h)
    eng = ahead.Engine(objects=True, cache_dir=cache_dir, cache_dir_size=spec["tier_size"])
    got = tier = 0
    buf = bytearray(MIB)
    for k in keys:
        with eng.open(f"s3://{h['bucket']}/{k}", options=opts) as f:
            while (n := f.readinto(buf)) > 0:
                got += n
            tier += f.stats()["tier_bytes"]
    return got, tier


def _scan_row(server, work, quick, rows):
    import multiprocessing as mp

    from ahead.bench import _write_generated

    scale = 8 if quick else 1
    obj = 16 * MIB // scale
    ws = [f"ws/{i:03}" for i in range(32)]
    scan = [f"scan/{i:03}" for i in range(128)]
    tmp = os.path.join(work, "obj.tmp")
    for i, k in enumerate(ws + scan):
        _write_generated(tmp, obj, i * obj)
        server.put_file(k, tmp)
    os.unlink(tmp)
    spec = {"hello": server.hello, "tier_size": 64 * obj}
    cache_dir = os.path.join(work, "tier-scan")
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        # Two epochs of the working set: its objects opened again.
        for _ in range(2):
            pool.apply(_read_objects, ((spec, cache_dir, ws),))
        scanning = pool.apply_async(_read_objects, ((spec, cache_dir, scan),))
        got = tier = 0
        epochs = 0
        while not scanning.ready() or epochs < 2:
            g, t = pool.apply(_read_objects, ((spec, cache_dir, ws),))
            got, tier, epochs = got + g, tier + t, epochs + 1
        scanning.get()
        g, t = pool.apply(_read_objects, ((spec, cache_dir, ws),))
        got, tier, epochs = got + g, tier + t, epochs + 1
    r = {
        "row": "scan: working set's hit ratio",
        "hit_ratio": tier / got,
        "epochs": epochs,
        "dir_bytes": _tier_bytes(cache_dir),
        "tier_size": spec["tier_size"],
    }
    rows.append(r)
    print(f"{r['row']:<24} {r['hit_ratio']:.3f} over {epochs} epochs; tier {r['dir_bytes'] / MIB:.0f} MiB "
          f"of {r['tier_size'] / MIB:.0f}", file=sys.stderr)


def _drop(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def _tier_bytes(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def main(argv=None):
    from ahead.bench import _write_generated
    from ahead._serve import S3Server, ahead_binary

    ap = argparse.ArgumentParser(prog="python -m ahead.bench_tier", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="s3", help="s3, lan, or LATENCY_MS,PER_CONN_MBPS,TOTAL_MBPS")
    ap.add_argument("--quick", action="store_true", help="objects of 2 MiB, one repetition")
    ap.add_argument("--reps", type=int, help="repetitions (medians; default 3, 1 with --quick)")
    ap.add_argument("--dir", help="where the tier, the local files and the server's objects go")
    ap.add_argument("--rows", help="comma-separated: store, tier, local, filecache, blockcache, parquet, scan (default: all)")
    ap.add_argument("--json", help="write the rows as JSON here")
    a = ap.parse_args(argv)
    reps = a.reps or (1 if a.quick else 3)
    size = (2 if a.quick else 16) * MIB
    wanted = (a.rows or "store,tier,local,filecache,blockcache,parquet,scan").split(",")
    if "filecache" in wanted or "blockcache" in wanted:
        try:
            import fsspec  # noqa: F401
            import s3fs  # noqa: F401
        except ImportError as e:
            print(f"filecache and blockcache skipped: {e}", file=sys.stderr)
            wanted = [w for w in wanted if w not in ("filecache", "blockcache")]
    binary = ahead_binary()
    if binary is None:
        sys.exit("no `ahead` binary: build it (cargo build --release -p ahead-cli) or set AHEAD_BIN")
    work = tempfile.mkdtemp(prefix="ahead-tierbench-", dir=a.dir)
    server = S3Server(binary, os.path.join(work, "s3"), profile=a.profile)
    rows = []
    try:
        local_dir = os.path.join(work, "local")
        os.makedirs(local_dir)
        paths = []
        for i in range(N_OBJECTS):
            p = os.path.join(local_dir, f"{i:03}")
            _write_generated(p, size, i * size)
            server.put_file(f"many/{i:03}", p)
            paths.append(p)
        total = N_OBJECTS * size
        # A bound that holds the epoch: the default (half the space free
        # when an engine starts) depends on the disk of the day.
        spec = {"hello": server.hello, "object_size": size, "local_dir": local_dir, "tier_size": 2 * total}

        def row(name, engine, epochs, cache_dir=None, fresh=True):
            out = [[] for _ in range(epochs)]
            fetched = [[] for _ in range(epochs)]
            for rep in range(reps):
                if cache_dir and fresh:
                    shutil.rmtree(cache_dir, ignore_errors=True)
                for e in range(epochs):
                    if engine == "local":
                        _drop(paths)
                    before = server.bytes_down()
                    got, bad, secs = _epoch(spec, engine, cache_dir, 100 * rep + e)
                    if got != total or bad:
                        sys.exit(f"{name}: {got} of {total} bytes, {bad} wrong")
                    out[e].append(got / secs / 1e6)
                    fetched[e].append((server.bytes_down() - before) / total)
            for e in range(epochs):
                mbs = sorted(out[e])
                r = {
                    "row": name if epochs == 1 else f"{name} epoch {e + 1}",
                    "mb_s": mbs[len(mbs) // 2],
                    "mb_s_all": mbs,
                    "fetched": sorted(fetched[e])[len(fetched[e]) // 2],
                }
                if cache_dir:
                    r["dir_bytes"] = _tier_bytes(cache_dir)
                rows.append(r)
                print(f"{r['row']:<24} {r['mb_s']:8.1f} MB/s  fetched {r['fetched']:.2f}x  "
                      f"(runs {', '.join(f'{x:.1f}' for x in mbs)})", file=sys.stderr)

        if "store" in wanted:
            row("store", "store", 1)
        if "tier" in wanted:
            row("tier", "tier", 3, os.path.join(work, "tier"))
        if "local" in wanted:
            row("local files", "local", 1)
        for cache in ("filecache", "blockcache"):
            if cache in wanted:
                row(f"fsspec {cache}", cache, 2, os.path.join(work, cache))
        if "parquet" in wanted:
            import multiprocessing as mp

            from ahead.bench import _parquet

            pqp = os.path.join(work, "t.parquet")
            nrows, asked, _ = _parquet(pqp, (32 if a.quick else 256) * MIB)
            server.put_file("t.parquet", pqp)
            spec["rows"] = nrows
            cache_dir = os.path.join(work, "tier-parquet")
            runs = [[], []]
            for rep in range(reps):
                shutil.rmtree(cache_dir, ignore_errors=True)
                for k in range(2):
                    with mp.get_context("fork").Pool(1) as pool:
                        secs, ok = pool.apply(_parquet_run, ((spec, cache_dir),))
                    if not ok:
                        sys.exit("parquet: the table read back is not the one written")
                    runs[k].append(asked / secs / 1e6)
            for k in range(2):
                mbs = sorted(runs[k])
                r = {"row": f"parquet run {k + 1}", "mb_s": mbs[len(mbs) // 2], "mb_s_all": mbs, "fetched": None}
                rows.append(r)
                print(f"{r['row']:<24} {r['mb_s']:8.1f} MB/s  (runs {', '.join(f'{x:.1f}' for x in mbs)})",
                      file=sys.stderr)
        if "scan" in wanted:
            _scan_row(server, work, a.quick, rows)
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"| row | MB/s | fetched ÷ bytes |\n|---|---|---|")
    for r in rows:
        if "hit_ratio" in r:
            print(f"| {r['row']} | {r['hit_ratio']:.3f} over {r['epochs']} epochs | |")
            continue
        fetched = "" if r["fetched"] is None else f"{r['fetched']:.2f}"
        print(f"| {r['row']} | {r['mb_s']:.1f} | {fetched} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
