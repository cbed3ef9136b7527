#!/usr/bin/env bash
# Makes the data of the corpus traces added for "never worse than the
# kernel" (seeded, so every run makes the same bytes) in DIR, and records
# the traces with `ahead trace` into this folder, gzip-compressed.
#
#   record.sh DIR        (AHEAD=path/to/ahead if it is not on PATH)
#
# Needs sqlite3, python3 with pyarrow, h5py and numpy, tail. About 700 MB
# in DIR; a minute.
set -euo pipefail
dir=${1:?usage: record.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
ahead=${AHEAD:-ahead}
mkdir -p "$dir"
cd "$dir"

python3 - <<'PY'
import os, random, sqlite3, zipfile
import numpy as np

# A 188 MB table of 400,000 rows of 400-byte blobs, indexed on a random key.
if not os.path.exists("in.db"):
    random.seed(21)
    db = sqlite3.connect("in.db")
    db.execute("create table t(id integer primary key, k integer, b blob)")
    db.execute("begin")
    for i in range(1, 400001):
        db.execute("insert into t values (?,?,?)", (i, random.randrange(1 << 30), random.randbytes(400)))
    db.execute("commit")
    db.execute("create index tk on t(k)")
    db.close()
# Every 200th row by rowid: sqlite walks up the table in gaps of 20 or 21 pages.
ids = range(137, 400001, 200)
open("inlist.sql", "w").write(
    "select count(*), sum(length(b)) from t where id in (%s);\n" % ",".join(map(str, ids)))
# 1.5% of the rows by the random key: rows fetched in key order, scattered.
open("range.sql", "w").write(
    "select count(*), sum(length(b)) from t where k between 100000000 and 116000000;\n")

# 248 MB of numbered lines, for tail.
if not os.path.exists("lines.txt"):
    with open("lines.txt", "w") as f:
        for i in range(1, 8000001):
            f.write("%09d line of text for tac\n" % i)

# 400 stored members of 16-400 KB; a script reads 80 of them in random order.
if not os.path.exists("z.zip"):
    rng = random.Random(5)
    with zipfile.ZipFile("z.zip", "w", zipfile.ZIP_STORED) as z:
        for i in range(400):
            z.writestr("m%04d.bin" % i, rng.randbytes(rng.randrange(16 << 10, 400 << 10)))
open("zipread.py", "w").write("""
import random, zipfile
z = zipfile.ZipFile("z.zip")
names = z.namelist()
random.Random(9).shuffle(names)
print(sum(len(z.read(n)) for n in names[:80]))
""")

# A Parquet file of 64 row groups and 12 columns; a script reads 3 columns.
if not os.path.exists("table.parquet"):
    import pyarrow as pa, pyarrow.parquet as pq
    rng = np.random.default_rng(7)
    n = 4_000_000
    cols = {"c%02d" % i: rng.integers(0, 1 << 40, n) for i in range(12)}
    pq.write_table(pa.table(cols), "table.parquet", row_group_size=n // 64, compression="none")
open("pq.py", "w").write("""
import pyarrow.parquet as pq
t = pq.read_table("table.parquet", columns=["c01", "c05", "c09"])
print(t.num_rows, sum(t.column(0).to_numpy()[:10]))
""")

# An HDF5 dataset in 64x64 chunks; a script reads a column of chunks.
if not os.path.exists("array.h5"):
    import h5py
    rng = np.random.default_rng(3)
    with h5py.File("array.h5", "w") as f:
        f.create_dataset("a", data=rng.random((4096, 4096)), chunks=(64, 64))
open("h5.py", "w").write("""
import h5py
with h5py.File("array.h5", "r") as f:
    a = f["a"]
    print(float(a[:, 1000:1064].sum()), float(a[2000:2064, :].sum()))
""")

# 128 MiB read by eight readers on one descriptor, 64 KiB from each of its
# eight parts in turn (mountpoint-s3 #1886's job, the interleaved-8 job of
# scripts/bench-mount).
if not os.path.exists("parts.bin"):
    with open("parts.bin", "wb") as f:
        f.write(random.Random(11).randbytes(128 << 20))
open("interleaved.py", "w").write("""
import os
fd = os.open("parts.bin", os.O_RDONLY)
part = os.fstat(fd).st_size // 8 // 65536 * 65536
print(sum(len(os.pread(fd, 65536, s * part + k * 65536))
          for k in range(part // 65536) for s in range(8)))
""")
PY

record() {
    local name=$1
    shift
    "$ahead" trace -o "$name.trace" -- "$@" >/dev/null
    gzip -9 -f "$name.trace"
    mv "$name.trace.gz" "$here/"
}
record sqlite-in-list sqlite3 in.db ".read inlist.sql"
record sqlite-index-order-fetch sqlite3 in.db ".read range.sql"
record tail-n tail -n 200000 lines.txt
record python-zipfile-random python3 zipread.py
record pyarrow-columns python3 pq.py
record h5py-chunks python3 h5.py
record python-interleaved-8 python3 interleaved.py
