//! Memory that must not grow with a file's size. Alone in its test binary:
//! getrusage(RUSAGE_CHILDREN) reports the largest resident set of any
//! child this process waited for, so only these commands may run here.

use std::fs;

mod common;

use common::{ahead, ok_json, s, scratch};

/// The largest resident set of the children waited for so far, in KiB.
fn children_peak_kib() -> i64 {
    // SAFETY: getrusage writes one rusage, which lives on this stack.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a pointer to a live rusage.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert_eq!(r, 0);
    ru.ru_maxrss
}

#[test]
fn page_maps_of_a_huge_sparse_file_take_bounded_memory() {
    let dir = scratch();
    let path = dir.path().join("sparse");
    // 128 GiB of hole: 32 Mi pages, a 32 MiB map held whole.
    let f = fs::File::create(&path).unwrap();
    if let Err(e) = f.set_len(128 << 30) {
        eprintln!("SKIP: this file system will not hold a 128 GiB sparse file: {e}");
        return;
    }
    let before = children_peak_kib();
    let v = ok_json(&ahead(&["stat", "--map", "--json", s(&path)]));
    assert_eq!(v["files"][0]["pages"], 32 << 20);
    assert_eq!(v["files"][0]["cached_runs"], serde_json::json!([]));
    let o = ahead(&["stat", "--map", s(&path)]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let rows = text.lines().filter(|l| *l == ".".repeat(64)).count();
    assert_eq!(rows, 32, "{text}");
    let peak = children_peak_kib();
    eprintln!("peak resident set of stat --map: {peak} KiB (before: {before})");
    assert!(peak < 16 << 10, "{peak} KiB for a page map");
}
