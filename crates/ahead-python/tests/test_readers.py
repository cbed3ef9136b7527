"""Real readers over ahead's files, each through ahead.open and through
fsspec's ahead://, their results compared with the same reader over the
built-in open: pyarrow's Parquet, h5py, zarr, numpy, tarfile. A reader
that is not installed is skipped with a message."""

import io
import tarfile

import fsspec
import pytest

import ahead
import ahead.fsspec  # noqa: F401  (registers ahead://)
from conftest import expected


def _need(name):
    return pytest.importorskip(name, reason=f"{name} is not installed: its reader test skipped")


# pyarrow: a few columns of a Parquet file with many row groups.
@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    pa = _need("pyarrow")
    pq = _need("pyarrow.parquet")
    np = _need("numpy")
    n = 400_000
    rng = np.random.default_rng(7)
    table = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "x": rng.random(n),
            "y": rng.integers(0, 1 << 30, n),
            "name": pa.array([f"row-{i % 977}" for i in range(n)]),
            "z": rng.random(n).astype(np.float32),
        }
    )
    p = tmp_path_factory.mktemp("parquet") / "t.parquet"
    pq.write_table(table, p, row_group_size=10_000)
    assert pq.ParquetFile(p).num_row_groups == 40
    return str(p)


COLUMNS = ["id", "y", "name"]


def test_pyarrow_reads_columns_as_from_the_builtin_open(parquet):
    pq = _need("pyarrow.parquet")
    with open(parquet, "rb") as g:
        want = pq.read_table(g, columns=COLUMNS)
    with ahead.open(parquet) as f:
        assert pq.read_table(f, columns=COLUMNS).equals(want)
    with ahead.open(parquet) as f:
        pf = pq.ParquetFile(f)
        assert pf.read_row_groups([3, 17, 39], columns=COLUMNS).equals(
            pq.ParquetFile(parquet).read_row_groups([3, 17, 39], columns=COLUMNS)
        )
    with fsspec.open(f"ahead://{parquet}", "rb") as f:
        assert pq.read_table(f, columns=COLUMNS).equals(want)
    # pyarrow's datasets over an fsspec filesystem (its FSSpecHandler).
    fs = ahead.fsspec.AheadFileSystem()
    assert pq.read_table(parquet, columns=COLUMNS, filesystem=fs).equals(want)


def test_pyarrow_reads_an_object_through_ahead_and_fsspec(parquet, s3):
    pq = _need("pyarrow.parquet")
    url = s3.put_file("readers/t.parquet", parquet)
    want = pq.read_table(parquet, columns=COLUMNS)
    with ahead.open(url, options=s3.options()) as f:
        assert pq.read_table(f, columns=COLUMNS).equals(want)
    fs = ahead.fsspec.AheadFileSystem(target_protocol="s3", target_options=s3.s3fs_options())
    assert pq.read_table(url.removeprefix("s3://"), columns=COLUMNS, filesystem=fs).equals(want)


# h5py: slices of a chunked dataset through a Python file object.
def test_h5py_slices_of_a_chunked_dataset(tmp_path):
    h5py = _need("h5py")
    np = _need("numpy")
    p = str(tmp_path / "d.h5")
    data = np.arange(2000 * 300, dtype=np.float64).reshape(2000, 300)
    with h5py.File(p, "w") as h:
        h.create_dataset("d", data=data, chunks=(100, 50), compression="gzip")
    cuts = [np.s_[0:10, :], np.s_[1500:1700, 20:250], np.s_[::97, 299], np.s_[1999, :]]
    with h5py.File(p, "r") as h:
        want = [h["d"][c] for c in cuts]
    for opener in (lambda: ahead.open(p), lambda: fsspec.open(f"ahead://{p}", "rb").open()):
        with opener() as f, h5py.File(f, "r") as h:
            for c, w in zip(cuts, want):
                assert np.array_equal(h["d"][c], w)


# zarr: an array through fsspec.
def test_zarr_through_fsspec(tmp_path):
    zarr = _need("zarr")
    np = _need("numpy")
    p = str(tmp_path / "a.zarr")
    a = np.arange(512 * 512, dtype=np.int32).reshape(512, 512)
    z = zarr.create_array(store=p, shape=a.shape, chunks=(64, 64), dtype=a.dtype)
    z[:] = a
    want = zarr.open_array(p, mode="r")[100:300, 7:500]
    got = zarr.open_array(f"ahead://{p}", mode="r")[100:300, 7:500]
    assert np.array_equal(got, want) and np.array_equal(got, a[100:300, 7:500])


# numpy: readinto an array.
def test_numpy_readinto_an_array(tmp_path):
    np = _need("numpy")
    p = tmp_path / "a.bin"
    p.write_bytes(expected(0, 1 << 20))
    a = np.empty(1 << 17, dtype=np.uint64)
    with ahead.open(str(p)) as f:
        assert f.readinto(a) == 1 << 20
    assert np.array_equal(a, np.arange(0, 1 << 20, 8, dtype=np.uint64))
    b = np.empty(1 << 17, dtype=np.uint64)
    with fsspec.open(f"ahead://{p}", "rb") as f:
        f.readinto(b)
    assert np.array_equal(a, b)


# tarfile: streaming a WebDataset-style shard (samples of a few members).
@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    p = tmp_path_factory.mktemp("tar") / "shard-000000.tar"
    with tarfile.open(p, "w") as t:
        for i in range(300):
            for ext, size in (("jpg", 20_000 + 97 * i), ("cls", 3), ("json", 40)):
                body = expected(i * 1_000_003, size)
                info = tarfile.TarInfo(f"sample{i:06}.{ext}")
                info.size = size
                t.addfile(info, io.BytesIO(body))
    return str(p)


def _members(fileobj):
    with tarfile.open(fileobj=fileobj, mode="r|") as t:
        return [(m.name, t.extractfile(m).read()) for m in t]


def test_tarfile_streams_a_shard(shard, s3):
    with open(shard, "rb") as g:
        want = _members(g)
    assert len(want) == 900
    with ahead.open(shard) as f:
        assert _members(f) == want
    with fsspec.open(f"ahead://{shard}", "rb") as f:
        assert _members(f) == want
    url = s3.put_file("readers/shard-000000.tar", shard)
    with ahead.open(url, options=s3.options()) as f:
        assert _members(f) == want
