//! `ahead read`, `ahead cat` and `ahead bench` as a user runs them: the real
//! binary on generated files.

mod common;

use std::path::{Path, PathBuf};

use common::{ahead, as_nobody, gen, s, scratch, stderr};

#[test]
fn cat_prints_the_exact_bytes_of_odd_sized_files() {
    let dir = scratch();
    let sizes = [0u64, 1, 4095, 4097, 1_000_001];
    let paths: Vec<PathBuf> = sizes
        .iter()
        .map(|&n| gen(dir.path(), &format!("f{n}"), n))
        .collect();
    let mut args = vec!["cat"];
    args.extend(paths.iter().map(|p| s(p)));
    let o = ahead(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut want = Vec::new();
    for p in &paths {
        want.extend(std::fs::read(p).unwrap());
    }
    assert_eq!(o.stdout.len(), want.len());
    assert!(o.stdout == want, "cat output differs from the files");
}

#[test]
fn cat_reports_a_bad_file_and_still_prints_the_others() {
    let dir = scratch();
    let good = gen(dir.path(), "good", 10_000);
    let missing = dir.path().join("missing");
    let o = ahead(&["cat", s(&missing), s(&good), s(dir.path())]);
    assert!(!o.status.success());
    assert_eq!(o.stdout, std::fs::read(&good).unwrap());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("missing") && err.contains("No such file"),
        "{err}"
    );
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn read_json_has_the_documented_fields() {
    let dir = scratch();
    let f = gen(dir.path(), "f", 4 << 20);
    for mode in ["direct", "kernel", "kernel-direct"] {
        let o = ahead(&[
            "read",
            s(&f),
            "--mode",
            mode,
            "--pattern",
            "stride:12k",
            "--cold",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["bytes"], 1 << 20, "{mode}: a quarter of the file: {v}");
        assert!(v["seconds"].as_f64().unwrap() > 0.0 && v["mb_s"].as_f64().unwrap() > 0.0);
        if mode == "direct" {
            assert!(v["device_bytes"].as_u64().unwrap() >= 1 << 20, "{v}");
            assert!(v["hits"].is_u64() && v["readahead_pages"].is_u64(), "{v}");
        }
    }
}

#[test]
fn max_io_bounds_each_device_read() {
    let dir = scratch();
    let f = gen(dir.path(), "f", 8 << 20);
    let avg = |extra: &[&str]| {
        let mut args = vec!["read", s(&f), "--bs", "1m", "--cold", "--json"];
        args.extend(extra);
        let o = ahead(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["device_bytes"], 8 << 20, "{v}");
        v["avg_io_bytes"].as_u64().unwrap()
    };
    assert!(avg(&[]) > 64 << 10);
    assert!(avg(&["--max-io", "64k"]) <= 64 << 10);
    assert!(avg(&["--max-io", "64k", "--io-depth", "2"]) <= 64 << 10);
}

#[test]
fn read_rejects_bad_input_with_one_line() {
    let dir = scratch();
    let f = gen(dir.path(), "f", 8192);
    for args in [
        vec!["read", s(&f), "--pattern", "zigzag"],
        vec!["read", s(&f), "--bs", "0"],
        vec!["read", s(&f), "--mode", "psychic"],
        vec!["read", s(&f), "--cache", "64k"],
        vec!["read", s(&f), "--max-io", "lots"],
        vec!["read", s(&f), "--io-depth", "0"],
        vec!["read", "/nonexistent/file"],
        vec!["read", s(dir.path())],
        vec!["read", "/dev/zero"],
        vec!["read", s(&f), "--cache", "1"],
        vec!["cat", s(&f), "--cache", "1"],
    ] {
        let o = ahead(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ahead: "), "{err}");
    }
    // Once: "/dev/zero: file is smaller than one request".
    let err = stderr(&ahead(&["read", "/dev/zero"]));
    assert!(err.contains("/dev/zero: not a regular file"), "{err}");
}

#[test]
fn cat_keeps_reading_the_file_it_opened_when_the_path_is_replaced() {
    use std::io::Read as _;
    let dir = scratch();
    let f = gen(dir.path(), "f", 32 << 20);
    let expected = std::fs::read(&f).unwrap();
    let other = dir.path().join("other");
    std::fs::write(&other, vec![0xeeu8; 32 << 20]).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(["cat", s(&f)])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut got = vec![0u8; 1 << 20];
    out.read_exact(&mut got).unwrap();
    // cat is blocked on the full pipe; another file takes the path.
    std::fs::rename(&other, &f).unwrap();
    out.read_to_end(&mut got).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "cat mixed the replacing file into its output"
    );
}

#[test]
fn bench_writes_rows_for_every_pattern_and_engine() {
    let dir = scratch();
    let f = gen(dir.path(), "f", 16 << 20);
    let json = dir.path().join("b.json");
    let plot = dir.path().join("b.svg");
    let o = ahead(&[
        "bench",
        "--file",
        s(&f),
        "--quick",
        "--device",
        "none",
        "--json",
        s(&json),
        "--plot",
        s(&plot),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let has = |p: &str, e: &str| {
        rows.iter()
            .any(|r| r["pattern"] == p && r["engine"] == e && r["mb_s"].as_f64().unwrap() > 0.0)
    };
    for p in [
        "seq",
        "reverse",
        "stride",
        "interleaved-8",
        "random-64k-qd64",
        "random-4k",
        "cached-16k",
    ] {
        assert!(has(p, "kernel") && has(p, "ahead"), "{p}");
    }
    assert!(has("seq", "device-limit") && has("random-64k-qd64", "device-limit"));
    assert!(rows
        .iter()
        .any(|r| r["pattern"] == "random-4k" && r["p50_us"].as_f64().is_some()));
    let rss = rows
        .iter()
        .find(|r| r["pattern"] == "peak-rss")
        .expect("a peak-rss row");
    assert!(rss["peak_rss_bytes"].as_u64().unwrap() > 0, "{rss}");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("peak RSS"), "{table}");
    assert!(
        table.contains("÷ kernel") && table.contains("cached-16k"),
        "{table}"
    );
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
}

#[test]
fn no_permission_and_tmpfs_are_reported_not_hidden() {
    let dir = scratch();
    // tmpfs refuses O_DIRECT: cat still prints the bytes, and says so.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && !ahead::testdata::supports_direct(shm) {
        let t = tempfile::tempdir_in(shm).unwrap();
        let f = gen(t.path(), "f", 10_001);
        let o = ahead(&["cat", s(&f)]);
        assert!(o.status.success());
        assert_eq!(o.stdout, std::fs::read(&f).unwrap());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("warning") && err.contains("O_DIRECT"), "{err}");
    } else {
        eprintln!("SKIP the tmpfs half: no /dev/shm without O_DIRECT here");
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = gen(dir.path(), "secret", 8192);
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    for args in [vec!["cat", s(&secret)], vec!["read", s(&secret)]] {
        let Some(o) = as_nobody("no_permission (read, cat)", &args) else {
            return;
        };
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(o.stdout.is_empty());
        assert!(
            err.contains("Permission denied") && err.contains("secret"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn cat_streams_a_fifo_a_character_device_and_standard_input() {
    use std::io::Write;
    let dir = scratch();
    let fifo = dir.path().join("fifo");
    common::mkfifo(&fifo);
    let want: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let writer = {
        let (fifo, want) = (fifo.clone(), want.clone());
        std::thread::spawn(move || std::fs::write(&fifo, &want).unwrap())
    };
    let o = ahead(&["cat", s(&fifo), "/dev/null"]);
    writer.join().unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert!(o.stdout == want, "the FIFO's bytes differ");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(["cat", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Written from another thread: the child's output fills its pipe
    // while its input is still being written.
    let mut stdin = child.stdin.take().unwrap();
    let input = want.clone();
    let feeder = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(o.status.success());
    assert!(o.stdout == want, "standard input's bytes differ");
}

#[test]
fn bench_fast_reports_the_kernel_a_fresh_engine_and_a_kept_one() {
    // `ahead bench fast`: the kernel's loop, ahead with a fresh engine per
    // run and ahead with one engine kept, each run cold (the kept engine's
    // runs are checked cold inside the bench: the device reads the file
    // whole every time, or the bench fails).
    let dir = scratch();
    let f = gen(dir.path(), "f", 64 << 20);
    let json = dir.path().join("fast.json");
    let o = ahead(&[
        "bench",
        "fast",
        "--file",
        s(&f),
        "--reps",
        "2",
        "--bs",
        "128k",
        "--json",
        s(&json),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("fresh") && out.contains("kept"), "{out}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r["bs"], 128 << 10);
    let cycles_counted = !r["kernel"]["runs"][0]["cycles"].is_null();
    for side in ["kernel", "ahead", "ahead_kept"] {
        let runs = r[side]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{side}: {r}");
        for run in runs {
            assert!(run["mb_s"].as_f64().unwrap() > 0.0, "{side}: {r}");
            assert!(run["cpu_s"].as_f64().unwrap() > 0.0, "{side}: {r}");
            // Cycles where the CPU counts them (not every virtual machine
            // has the counter): then every run has them.
            if cycles_counted {
                assert!(run["cycles"].as_u64().unwrap() > 0, "{side}: {r}");
            }
        }
    }
    assert!(r["kept_cpu_ratio"].as_f64().unwrap() > 0.0, "{r}");
    if cycles_counted {
        assert!(r["kept_cycles_ratio"].as_f64().unwrap() > 0.0, "{r}");
    } else {
        eprintln!("SKIP (cycles): no CPU cycle counter on this machine");
    }
}

#[test]
fn bench_on_a_capped_device_reports_the_profile_the_oracle_and_cpu() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP bench --device: needs root");
        return;
    }
    let dir = scratch();
    let f = gen(dir.path(), "f", 16 << 20);
    let json = dir.path().join("b.json");
    let o = ahead(&[
        "bench",
        "--file",
        s(&f),
        "--device",
        "fast",
        "--mode",
        "direct",
        "--reps",
        "1",
        "--json",
        s(&json),
    ]);
    if stderr(&o).contains("cgroup") && !o.status.success() {
        eprintln!("SKIP bench --device: {}", stderr(&o));
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("device: fast (400 MiB/s, 20000 IOPS"), "{out}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let seq = rows
        .iter()
        .find(|r| r["pattern"] == "seq" && r["engine"] == "ahead")
        .unwrap();
    assert!(
        (seq["oracle_mb_s"].as_f64().unwrap() - 419.43).abs() < 0.1,
        "{seq}"
    );
    assert!(seq["cpu_s"].as_f64().unwrap() > 0.0, "{seq}");
    let last = rows.last().unwrap();
    assert_eq!(last["device"], "fast");
    // The process left its cgroup behind it: nothing named after it stays.
    let pid_dirs = ["/sys/fs/cgroup/blkio", "/sys/fs/cgroup"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("ahead-bench-"))
        .count();
    assert_eq!(pid_dirs, 0, "a bench cgroup was left behind");
    let o = ahead(&["bench", "--file", s(&f), "--device", "warp9"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown device profile"),
        "{}",
        stderr(&o)
    );
}
