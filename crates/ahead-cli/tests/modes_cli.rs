//! The modes through the binary: `read`/`cat --mode`, `doctor`, and bad
//! input in the kernel modes.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{ahead, as_nobody, gen, mkfifo, ok_json, s, scratch, stderr};

#[test]
fn cat_prints_the_same_bytes_in_every_mode() {
    let dir = scratch();
    let f = gen(dir.path(), "f", (3 << 20) + 123);
    let want = std::fs::read(&f).unwrap();
    for mode in ["direct", "buffered", "uncached"] {
        let o = ahead(&["cat", "--mode", mode, s(&f)]);
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        assert!(o.stdout == want, "{mode}: cat printed other bytes");
    }
    let o = ahead(&["cat", "--mode", "psychic", s(&f)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("direct, buffered or uncached"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn read_json_carries_the_buffered_counters() {
    let dir = scratch();
    let f = gen(dir.path(), "f", 8 << 20);
    let v = ok_json(&ahead(&[
        "read",
        "--mode",
        "buffered",
        "--pattern",
        "reverse",
        "--json",
        s(&f),
    ]));
    assert_eq!(v["engine"], "ahead-buffered");
    for k in [
        "nowait_probes",
        "nowait_hits",
        "inline_bytes",
        "plain_reads",
        "backend_reads",
        "hints",
    ] {
        assert!(v[k].is_u64(), "{k} missing: {v}");
    }
    assert_eq!(v["requests"], 2048);
    assert_eq!(v["bytes"], 8 << 20);
    let v = ok_json(&ahead(&["read", "--mode", "uncached", "--json", s(&f)]));
    assert_eq!(v["engine"], "ahead-uncached");
    assert_eq!(v["bytes"], 8 << 20);
}

#[test]
fn kernel_modes_refuse_a_fifo_and_report_no_permission() {
    let dir = scratch();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    for mode in ["buffered", "uncached"] {
        let o = ahead(&["read", "--mode", mode, s(&fifo)]);
        assert_eq!(o.status.code(), Some(1), "{mode}");
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    }
    let f = gen(dir.path(), "secret", 1 << 20);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for mode in ["buffered", "uncached"] {
        let Some(o) = as_nobody(
            "kernel_modes_refuse_a_fifo_and_report_no_permission",
            &["cat", "--mode", mode, s(&f)],
        ) else {
            return;
        };
        assert_eq!(o.status.code(), Some(1), "{mode}");
        assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn doctor_names_every_feature_and_what_tmpfs_lacks() {
    let dir = scratch();
    let v = ok_json(&ahead(&["doctor", "--json", s(dir.path())]));
    for k in [
        "kernel",
        "io_uring",
        "rwf_nowait",
        "rwf_nowait_here",
        "rwf_dontcache",
        "o_direct",
        "cachestat",
        "filesystem",
        "device",
        "cgroup_io_limits",
        "transparent_huge_pages",
        "free_page_reporting_order",
    ] {
        assert!(v.get(k).is_some(), "{k} missing: {v}");
    }
    // The setting the kernel shows, as sysfs has it.
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|s| {
            let w = s.split_whitespace().find(|w| w.starts_with('['))?;
            Some(w.trim_matches(|c| c == '[' || c == ']').to_owned())
        });
    assert_eq!(v["transparent_huge_pages"].as_str(), thp.as_deref(), "{v}");
    assert!(v["rwf_dontcache"]["available"].is_boolean());
    // Nothing is left behind in the directory probed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let text = ahead(&["doctor", s(dir.path())]);
    assert!(text.status.success());
    let out = String::from_utf8_lossy(&text.stdout);
    for line in [
        "io_uring",
        "RWF_NOWAIT",
        "RWF_DONTCACHE",
        "O_DIRECT",
        "cachestat",
        "huge pages",
    ] {
        assert!(out.contains(line), "{out}");
    }
    match tempfile::tempdir_in("/dev/shm") {
        Ok(shm) => {
            let v = ok_json(&ahead(&["doctor", "--json", s(shm.path())]));
            assert_eq!(v["filesystem"], "tmpfs");
            assert_eq!(v["rwf_dontcache"]["available"], false, "{v}");
            assert_eq!(v["rwf_nowait_here"]["available"], false, "{v}");
            assert!(v["device"].is_null());
        }
        Err(e) => eprintln!("SKIP the tmpfs half: {e}"),
    }
    let o = ahead(&["doctor", "/nonexistent"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn bench_mix_writes_every_engine_and_class_with_latency_percentiles() {
    let dir = scratch();
    let json = dir.path().join("mix.json");
    let plot = dir.path().join("mix.svg");
    let o = ahead(&[
        "bench",
        "mix",
        "--seconds",
        "0.3",
        "--reps",
        "1",
        "--f1-size",
        "8m",
        "--big-size",
        "32m",
        "--dir",
        s(dir.path()),
        "--json",
        s(&json),
        "--plot",
        s(&plot),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for e in ["ahead-buffered", "pool-only", "io_uring", "pread"] {
        for p in ["mix-f1", "mix-f2", "mix-f3", "mix-f1-alone"] {
            let r = rows
                .iter()
                .find(|r| r["engine"] == e && r["pattern"] == p)
                .unwrap_or_else(|| panic!("no row {e} {p}"));
            for k in ["p50_us", "p90_us", "p99_us", "p999_us", "mb_s"] {
                assert!(r[k].as_f64().unwrap() > 0.0, "{e} {p} {k}: {r}");
            }
            assert!(r["p50_us"].as_f64() <= r["p999_us"].as_f64());
        }
    }
    let a = rows
        .iter()
        .find(|r| r["engine"] == "ahead-buffered" && r["pattern"] == "mix-f1")
        .unwrap();
    assert!(a["inline_share"].as_f64().unwrap() > 0.5, "{a}");
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    // Nothing but what was asked for is left in the directory.
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["mix.json", "mix.svg"]);
}

#[test]
fn doctor_tunes_the_window_on_a_file_and_says_why_not_on_a_directory() {
    let dir = scratch();
    let v = ok_json(&ahead(&["doctor", "--json", s(dir.path())]));
    let why = v["readahead_window"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("64 MiB"), "{v}");
    let small = gen(dir.path(), "small", 1 << 20);
    let v = ok_json(&ahead(&["doctor", "--json", s(&small)]));
    assert!(v["readahead_window"]["why"].is_string(), "{v}");
    // 160 MiB: room for the two samples of the start window (8 MiB let
    // pass, then 32 MiB each), and one doubling if readers waited. A
    // sample is begun again after the reader leaves the device idle for
    // 20 ms, which a busy test machine can do to it: at least one sample
    // is asked for here, the count is the tuner's unit tests' to check.
    let big = gen(dir.path(), "big", 160 << 20);
    let v = ok_json(&ahead(&["doctor", "--json", s(&big)]));
    let w = &v["readahead_window"];
    assert_eq!(w["bytes_read"], 160u64 << 20, "{v}");
    let (start, window, ceiling) = (
        w["start"].as_u64().unwrap(),
        w["window"].as_u64().unwrap(),
        w["ceiling"].as_u64().unwrap(),
    );
    assert_eq!(start, 4 << 20, "{v}");
    assert!(
        window >= start && window <= ceiling && window.is_power_of_two(),
        "{v}"
    );
    let steps = w["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "{v}");
    assert!(
        steps.iter().all(|s| s["mb_s"].as_f64().unwrap() > 0.0),
        "{v}"
    );
    let text = ahead(&["doctor", s(&big)]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("readahead        read 160 MiB"));
}
