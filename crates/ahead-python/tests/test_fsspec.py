"""The ahead:// fsspec filesystem: fsspec's own abstract tests (local
target), reads through fsspec.open, cat_file and cat_ranges, and objects
in the embedded S3 server through the chained spelling."""

import fsspec
import pytest
from fsspec.tests import abstract

import ahead
import ahead.fsspec
from ahead.fsspec import AheadFileSystem
from conftest import expected


class AheadFixtures(abstract.AbstractFixtures):
    # As fsspec's own tests make the local filesystem: directories made
    # for files written into them.
    @pytest.fixture(scope="class")
    @classmethod
    def fs(cls):
        return AheadFileSystem(target_options={"auto_mkdir": True})

    @pytest.fixture
    def fs_path(self, tmpdir):
        return str(tmpdir)


# fsspec's abstract tests: every one that applies to a filesystem that
# reads (copies, gets, opens, pipes, puts: the reads are ahead's, the
# writes the target's).
class TestAheadCopy(abstract.AbstractCopyTests, AheadFixtures):
    pass


class TestAheadGet(abstract.AbstractGetTests, AheadFixtures):
    pass


class TestAheadPut(abstract.AbstractPutTests, AheadFixtures):
    pass


class TestAheadOpen(abstract.AbstractOpenTests, AheadFixtures):
    pass


class TestAheadPipe(abstract.AbstractPipeTests, AheadFixtures):
    pass


SIZE = (3 << 20) + 999


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    p = tmp_path_factory.mktemp("fsspec") / "gen.bin"
    p.write_bytes(expected(0, SIZE))
    return str(p)


def test_fsspec_open_reads_through_an_ahead_file(data):
    with fsspec.open(f"ahead://{data}", "rb") as f:
        assert isinstance(f, ahead.File)
        f.seek(-4096, 2)
        assert f.read() == expected(SIZE - 4096, 4096)
    with fsspec.open(f"ahead://{data}", "rt", encoding="latin-1") as t:
        assert t.read(100) == expected(0, 100).decode("latin-1")
    fs, path = fsspec.core.url_to_fs(f"ahead://{data}")
    assert isinstance(fs, AheadFileSystem) and path == data
    assert fs.info(data)["size"] == SIZE and fs.size(data) == SIZE
    assert fs.isfile(data) and not fs.isdir(data)


def test_cat_file_and_cat_ranges(data):
    fs = AheadFileSystem()
    assert fs.cat_file(data) == expected(0, SIZE)
    assert fs.cat_file(data, 100, 5000) == expected(100, 4900)
    assert fs.cat_file(data, -10) == expected(SIZE - 10, 10)
    assert fs.cat_file(data, SIZE + 5) == b""
    starts = [0, 1 << 20, SIZE - 100, 500, 7]
    ends = [10, (1 << 20) + 65536, SIZE + 100, 400, -1]
    got = fs.cat_ranges([data] * 5, starts, ends)
    assert got[0] == expected(0, 10)
    assert got[1] == expected(1 << 20, 65536)
    assert got[2] == expected(SIZE - 100, 100)
    assert got[3] == b""
    assert got[4] == expected(7, SIZE - 8)
    missing = fs.cat_ranges([data + ".missing", data], [0, 0], [1, 1])
    assert isinstance(missing[0], FileNotFoundError) and missing[1] == expected(0, 1)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges([data + ".missing"], [0], [1], on_error="raise")


def test_options_reach_the_engine(data):
    fs = AheadFileSystem(io="buffered", cache="64m")
    with fs.open(data) as f:
        assert f.read(10) == expected(0, 10)
    with pytest.raises(ValueError):
        AheadFileSystem(target_protocol="gcs")


def test_objects_through_fsspec(s3):
    url = s3.put("fsspec/gen.bin", expected(0, SIZE))
    key = url.removeprefix("s3://")
    # Without s3fs: the filesystem made directly, reads and info by ahead.
    fs = AheadFileSystem(target_protocol="s3", target_options=s3.s3fs_options())
    assert fs.cat_file(key, 1000, 9000) == expected(1000, 8000)
    got = fs.cat_ranges([key] * 3, [0, 1 << 20, SIZE - 5], [4096, 2 << 20, SIZE])
    assert got == [expected(0, 4096), expected(1 << 20, 1 << 20), expected(SIZE - 5, 5)]
    with fs.open(key) as f:
        f.seek(SIZE // 2)
        assert f.read(65536) == expected(SIZE // 2, 65536)
    # The chained spelling, as fsspec users write it; s3fs parses s3:// paths.
    pytest.importorskip("s3fs", reason="s3fs is not installed: ahead::s3:// through fsspec.open skipped")
    with fsspec.open(f"ahead::{url}", "rb", s3=s3.s3fs_options()) as f:
        assert isinstance(f, ahead.File)
        assert f.read(5000) == expected(0, 5000)
    fs2, path = fsspec.core.url_to_fs(f"ahead::{url}", s3=s3.s3fs_options())
    assert path == key and fs2.size(path) == SIZE
    assert path in fs2.ls(f"{s3.bucket}/fsspec", detail=False)
