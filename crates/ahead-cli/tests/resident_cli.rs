//! `ahead stat`, `ahead evict` and `ahead warm` as a user runs them, checked
//! against the kernel's own counters and util-linux fincore.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ahead, as_nobody, gen, ok_json as json, s, scratch};

const PAGE: u64 = 4096;

fn cached(path: &Path) -> u64 {
    let v = json(&ahead(&["stat", "--json", s(path)]));
    v["files"][0]["cached"].as_u64().expect("known residency")
}

#[test]
fn evict_warm_and_stat_tell_the_same_story() {
    let dir = scratch();
    let f = gen(dir.path(), "f", 1024 * PAGE + 10);
    let v = json(&ahead(&["evict", "--json", s(&f)]));
    assert_eq!(v["files"][0]["cached_after"], 0, "{v}");
    assert_eq!(v["files"][0]["pages"], 1025);

    // Warm 64 pages in the middle; only they are read and cached.
    let v = json(&ahead(&["warm", "--json", "--range", "256k-512k", s(&f)]));
    let row = &v["files"][0];
    assert_eq!(row["bytes_read"], 64 * PAGE, "{v}");
    assert_eq!(row["cached_before"], 0);
    assert_eq!(row["cached_after"], 64);
    assert_eq!(cached(&f), 64);

    // The map shows exactly that run.
    let v = json(&ahead(&["stat", "--json", "--map", s(&f)]));
    assert_eq!(v["files"][0]["cached_runs"], serde_json::json!([[64, 64]]));
    let text = ahead(&["stat", "--map", s(&f)]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains('O') && out.contains('.'), "{out}");

    // Warming the whole file reads only the rest.
    let v = json(&ahead(&["warm", "--json", s(&f)]));
    assert_eq!(v["files"][0]["bytes_read"], 1024 * PAGE + 10 - 64 * PAGE);
    assert_eq!(cached(&f), 1025);
    let v = json(&ahead(&["warm", "--json", s(&f)]));
    assert_eq!(v["files"][0]["bytes_read"], 0);

    let v = json(&ahead(&["evict", "--json", s(&f)]));
    // The kernel's proactive reclaim may have taken some of the pages
    // since the warm (untouched ones go after about 3 s: docs/measuring.md),
    // which a loaded test machine can reach between two commands.
    let before = v["files"][0]["cached_before"].as_u64().unwrap();
    assert!((1..=1025).contains(&before), "{v}");
    assert_eq!(v["files"][0]["cached_after"], 0);
}

#[test]
fn stat_agrees_with_fincore() {
    if Command::new("fincore").arg("--version").output().is_err() {
        eprintln!("SKIP stat_agrees_with_fincore: util-linux fincore is not installed");
        return;
    }
    let dir = scratch();
    let files: Vec<PathBuf> = (0..3)
        .map(|i| gen(dir.path(), &format!("f{i}"), (300 + 100 * i) * PAGE + 1))
        .collect();
    for (i, f) in files.iter().enumerate() {
        json(&ahead(&["evict", "--json", s(f)]));
        let range = format!("{}k-{}k", 16 * i, 16 * i + 400);
        json(&ahead(&["warm", "--json", "--range", &range, s(f)]));
    }
    for f in &files {
        let o = Command::new("fincore")
            .args(["--raw", "--noheadings", "--output", "PAGES", s(f)])
            .output()
            .unwrap();
        assert!(o.status.success());
        let theirs: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        assert_eq!(cached(f), theirs, "{}", f.display());
        assert!(theirs > 0);
    }
    // -R on the directory totals the same pages.
    let v = json(&ahead(&["stat", "--json", "-R", s(dir.path())]));
    let sum: u64 = files.iter().map(|f| cached(f)).sum();
    assert_eq!(v["total"]["cached"], sum);
    assert_eq!(v["total"]["files"], 3);
}

#[test]
fn residency_the_kernel_hides_is_unknown_not_invented() {
    let dir = scratch();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = gen(dir.path(), "f", 64 * PAGE);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let Some(o) = as_nobody(
        "residency_the_kernel_hides_is_unknown_not_invented",
        &["stat", "--json", s(&f)],
    ) else {
        return;
    };
    let v = json(&o);
    let row = &v["files"][0];
    assert!(row["cached"].is_null(), "{v}");
    assert!(
        row["unknown"].as_str().unwrap().contains("permission"),
        "{v}"
    );
    assert_eq!(row["pages"], 64);
    assert_eq!(v["total"]["unknown_files"], 1);
}

#[test]
fn bad_paths_get_one_clear_line_each_and_a_failing_exit() {
    let dir = scratch();
    let good = gen(dir.path(), "good", 3 * PAGE);
    let missing = dir.path().join("missing");
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    for cmd in ["stat", "evict", "warm"] {
        let o = ahead(&[cmd, s(&missing), s(dir.path()), s(&fifo), s(&good)]);
        assert_eq!(o.status.code(), Some(1), "{cmd}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("No such file"), "{cmd}: {err}");
        assert!(err.contains("is a directory (use -R)"), "{cmd}: {err}");
        assert!(err.contains("not a regular file"), "{cmd}: {err}");
        // The good file is still handled.
        assert!(String::from_utf8_lossy(&o.stdout).contains("good"), "{cmd}");
    }
    let o = ahead(&["warm", "--range", "1m-", s(&good)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("past the end"));
    let o = ahead(&["stat", "--map", s(&good), s(&good)]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("exactly one file"));
}

/// A 15 TiB sparse file's map, under a 2 GiB address-space limit: only the
/// ranges that hold cached pages are looked at page by page, so the map
/// finds exactly the two pages read, at both ends.
#[test]
fn a_huge_sparse_file_is_mapped_within_an_address_space_limit() {
    let dir = scratch();
    let path = dir.path().join("sparse");
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let size = 15u64 << 40;
    if let Err(e) = f.set_len(size) {
        eprintln!("SKIP: this file system will not hold a 15 TiB sparse file: {e}");
        return;
    }
    let probe = ahead(&["stat", "--json", s(&path)]);
    if json(&probe)["files"][0]["source"] != "cachestat" {
        eprintln!("SKIP: no cachestat here: mincore would look at every page");
        return;
    }
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("SKIP: no prlimit (util-linux)");
        return;
    }
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 1];
    let last = size / PAGE - 1;
    f.read_at(&mut b, 5 * PAGE).unwrap();
    f.read_at(&mut b, last * PAGE).unwrap();
    let o = Command::new("prlimit")
        .arg(format!("--as={}", 2u64 << 30))
        .arg(env!("CARGO_BIN_EXE_ahead"))
        .args(["stat", "--json", "--map", s(&path)])
        .output()
        .unwrap();
    let v = json(&o);
    let runs = v["files"][0]["cached_runs"].as_array().unwrap().clone();
    // The kernel may read around a page it was asked for; the two pages
    // must be in the runs, and nothing far from them.
    let within = |p: u64| {
        runs.iter().any(|r| {
            let (first, n) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
            (first..first + n).contains(&p)
        })
    };
    assert!(within(5) && within(last), "{runs:?}");
    for r in &runs {
        let first = r[0].as_u64().unwrap();
        assert!(first < 1024 || first > last - 1024, "{runs:?}");
    }
}

/// A reader that stops early (`| head`) ends `ahead stat` quietly with
/// status 0, not with a panic about a broken pipe.
#[test]
fn a_closed_output_pipe_ends_a_listing_quietly() {
    let dir = scratch();
    for i in 0..2000 {
        std::fs::write(dir.path().join(format!("f{i:05}")), b"x").unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(["stat", "-R", s(dir.path())])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The listing is over 100 KB: the pipe (64 KiB) fills, and every write
    // after the reader has gone fails with EPIPE.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
}
