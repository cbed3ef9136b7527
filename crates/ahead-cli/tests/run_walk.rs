//! `ahead run` and the kernel's readahead on a sparse forward walk
//! (`ahead::ra::hints::trial`, crates/ahead-preload/src/walk.rs): turned
//! off where the kernel reads such a walk through, the stream it had
//! started ended, the program's bytes and file positions unchanged, and a
//! program's own advice left alone.

mod common;

use common::{gen, s, scratch, stderr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A Python walk over `sys.argv[1]`: four pages in a row (the kernel's
/// readahead starts a stream), then 4 KiB reads 2 to 6 pages apart (a
/// fixed draw) to the end, at the file position (`lseek`, `read`). It
/// prints a digest of every byte read and how many times the position was
/// not where the reads left it. With `advise`, the program first advises
/// the file random itself.
const WALK: &str = r#"
import hashlib, os, random, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
if len(sys.argv) > 2:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
size = os.fstat(fd).st_size
h, wrong, reads = hashlib.sha256(), 0, 0
page, rng = 0, random.Random(7)
while page * 4096 < size:
    os.lseek(fd, page * 4096, os.SEEK_SET)
    b = os.read(fd, 4096)
    h.update(b)
    reads += 1
    if os.lseek(fd, 0, os.SEEK_CUR) != page * 4096 + len(b):
        wrong += 1
    page += 1 if page < 4 else rng.randint(2, 6)
print(h.hexdigest(), reads, "wrong positions:", wrong)
"#;

fn python() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&path)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!("SKIP: no python3");
    }
    found
}

fn evict(file: &Path) {
    let f = std::fs::File::open(file).unwrap();
    ahead::residency::evict(&f, 0, 0).unwrap();
}

/// The share of `file`'s pages cached.
fn cached_share(file: &Path) -> f64 {
    let f = std::fs::File::open(file).unwrap();
    let size = f.metadata().unwrap().len();
    let pages = ahead::residency::cached_pages(&f, 0, size).expect("cachestat");
    pages as f64 * 4096.0 / size as f64
}

/// Runs the walk cold: plainly (`how` None) or under `ahead run` with
/// `--kernel-readahead how` and `--stats`; its output, the file's stats
/// line (under `ahead run`) and the share of the file cached after.
fn walk(
    py: &Path,
    dir: &Path,
    file: &Path,
    how: Option<&str>,
    advise: bool,
) -> (Output, Option<serde_json::Value>, f64) {
    evict(file);
    let stats = dir.join("stats.json");
    let mut c = match how {
        None => Command::new(py),
        Some(how) => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ahead"));
            c.args(["run", "--kernel-readahead", how, "--stats", s(&stats), "--"])
                .arg(py);
            c
        }
    };
    c.args(["-c", WALK, s(file)]);
    if advise {
        c.arg("advise");
    }
    let o = c.output().expect("run");
    assert!(o.status.success(), "{}", stderr(&o));
    let share = cached_share(file);
    let line = how.map(|_| {
        let canonical = std::fs::canonicalize(file).unwrap();
        std::fs::read_to_string(&stats)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|l| l["file"] == s(&canonical))
            .expect("the file's stats")
    });
    (o, line, share)
}

/// Python, and a generated file of `size` bytes to walk in a scratch
/// directory; None (the test skipped, said why) without python3 or
/// cachestat.
fn walk_file(size: u64) -> Option<(PathBuf, tempfile::TempDir, PathBuf)> {
    let py = python()?;
    let dir = scratch();
    let file = gen(dir.path(), "walk.bin", size);
    supported(&file).then_some((py, dir, file))
}

fn supported(file: &Path) -> bool {
    let f = std::fs::File::open(file).unwrap();
    let ok = ahead::residency::cachestat_supported(&f);
    if !ok {
        eprintln!("SKIP: no cachestat(2) (Linux 6.5) here");
    }
    ok
}

/// Told to (`--kernel-readahead off`), `ahead run` turns the kernel's
/// readahead off on a walk the kernel reads through, and the stream the
/// kernel had started ends: far fewer of the file's pages are read than
/// plainly. The program's bytes and positions are what they were.
#[test]
fn a_walk_the_kernel_reads_through_ends_its_stream_when_told() {
    let Some((py, dir, file)) = walk_file(128 << 20) else {
        return;
    };
    let (plain, _, plain_share) = walk(&py, dir.path(), &file, None, false);
    let text = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(text.ends_with("wrong positions: 0\n"), "{text}");
    if plain_share < 0.8 {
        eprintln!(
            "SKIP: the kernel read {:.0}% of the walked file, not through: nothing to end",
            plain_share * 100.0
        );
        return;
    }
    let (o, stats, share) = walk(&py, dir.path(), &file, Some("off"), false);
    assert_eq!(o.stdout, plain.stdout, "the bytes or positions differ");
    let stats = stats.unwrap();
    let ra = &stats["kernel_readahead"];
    assert_eq!(ra["off"], true, "{stats}");
    assert!(ra["on_us"].as_f64().unwrap() > 0.0 && ra["off_us"].as_f64().unwrap() > 0.0);
    // Plainly the kernel read the whole file; with its stream ended, the
    // pages read are the walk's (one in four) and what came before.
    assert!(
        share < 0.6,
        "{:.0}% of the file cached after, {:.0}% plainly: the stream went on",
        share * 100.0,
        plain_share * 100.0
    );
}

/// `keep` never touches the kernel's readahead; a program that advised
/// the file itself keeps its advice (no trial, even told `off`); and the
/// default's trial, whatever it decides on this device, changes no byte.
#[test]
fn keep_and_the_programs_advice_are_left_alone_and_try_changes_no_byte() {
    let Some((py, dir, file)) = walk_file(64 << 20) else {
        return;
    };
    let (plain, _, _) = walk(&py, dir.path(), &file, None, false);
    for how in ["keep", "try"] {
        let (o, stats, _) = walk(&py, dir.path(), &file, Some(how), false);
        assert_eq!(
            o.stdout, plain.stdout,
            "{how}: the bytes or positions differ"
        );
        if how == "keep" {
            assert!(stats.unwrap()["kernel_readahead"].is_null());
        }
    }
    let (advised, _, _) = walk(&py, dir.path(), &file, None, true);
    let (o, stats, _) = walk(&py, dir.path(), &file, Some("off"), true);
    assert_eq!(o.stdout, advised.stdout);
    let stats = stats.unwrap();
    assert!(stats["kernel_readahead"].is_null(), "{stats}");
}
