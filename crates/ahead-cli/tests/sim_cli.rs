//! The `ahead sim` command as a user runs it: the real binary.

mod common;

use common::{ahead, stderr};

#[test]
fn json_has_the_documented_fields() {
    let o = ahead(&[
        "sim",
        "interleaved",
        "--device",
        "ssd",
        "--file-size",
        "32m",
        "--memory",
        "64m",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON array");
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 6, "2 workloads x 3 policies");
    for r in rows {
        for f in [
            "scenario",
            "workload",
            "policy",
            "device",
            "record_kib",
            "throughput_mb_s",
            "avg_io_kib",
            "hit_ratio",
            "waste_ratio",
            "evicted_before_use_pages",
            "late_prefetches",
        ] {
            assert!(r.get(f).is_some(), "missing {f} in {r}");
        }
        assert_eq!(r["scenario"], "interleaved");
        assert!(r["throughput_mb_s"].as_f64().unwrap() > 0.0);
    }
    let workloads: Vec<&str> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert!(workloads.contains(&"single") && workloads.contains(&"interleaved-8"));
}

#[test]
fn ondemand_without_context_readahead_is_marked_and_reads_less() {
    // iozone on a small file: the stride test leaves runs of cached records
    // that context readahead takes for streams.
    let run = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "iozone",
            "--file-size",
            "64m",
            "--memory",
            "32m",
            "--policy",
            "legacy,ondemand",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = ahead(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array().unwrap().clone()
    };
    let with = run(&[]);
    let without = run(&["--no-context-readahead"]);
    assert!(with.iter().all(|r| r.get("context_readahead").is_none()));
    for r in &without {
        let marked = r.get("context_readahead").and_then(|v| v.as_bool());
        if r["policy"] == "ondemand" {
            assert_eq!(marked, Some(false), "{r}");
        } else {
            assert_eq!(marked, None, "{r}");
        }
    }
    let amp = |rows: &[serde_json::Value], policy: &str, workload: &str| {
        rows.iter()
            .find(|r| r["policy"] == policy && r["workload"] == workload)
            .map(|r| r["read_amplification"].as_f64().unwrap())
            .unwrap()
    };
    // Without it, ondemand reads the random records exactly as legacy does.
    assert_eq!(
        amp(&without, "ondemand", "random"),
        amp(&without, "legacy", "random")
    );
    assert!(amp(&with, "ondemand", "stride") > amp(&without, "ondemand", "stride"));
}

#[test]
fn table_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("p.svg");
    let o = ahead(&[
        "sim",
        "aio-random",
        "--file-size",
        "16m",
        "--memory",
        "64m",
        "--policy",
        "ondemand,ahead",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("random-64k") && out.contains("ondemand") && out.contains("ahead"),
        "{out}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("ahead"));
}

#[test]
fn replay_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let mut text = String::new();
    for i in 0..200u64 {
        text.push_str(&format!(
            "{} 4096 1\n{} 4096 2\n",
            i * 4096,
            (1000 + i) * 4096
        ));
    }
    std::fs::write(&trace, text).unwrap();
    let o = ahead(&[
        "sim",
        "replay",
        trace.to_str().unwrap(),
        "--device",
        "ssd",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(v[0]["workload"], "replay");
}

/// The first row of `ahead sim replay TRACE --device DEVICE --json` with
/// the `ondemand` policy and `extra` options, which must succeed.
fn replay_row(trace: &std::path::Path, device: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["sim", "replay", trace.to_str().unwrap()];
    args.extend_from_slice(&["--policy", "ondemand", "--device", device, "--json"]);
    args.extend_from_slice(extra);
    let o = ahead(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0].clone()
}

/// A trace's `# readahead` line is the kernel's window in the replay,
/// unless `--max-readahead` says otherwise: a forward read of 16 MiB is
/// read in I/Os of up to 8 MiB, not 128 KiB.
#[test]
fn a_trace_gives_the_kernels_readahead() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let mut text = String::from("# file 7:1 16777216 /data/f\n# readahead 7:1 8388608\n");
    for i in 0..4096u64 {
        text.push_str(&format!("{} 4096 3 file=7:1\n", i * 4096));
    }
    std::fs::write(&trace, text).unwrap();
    let run = |extra: &[&str]| replay_row(&trace, "fast", extra);
    let traced = run(&[]);
    assert_eq!(traced["max_readahead_kib"], 8192, "{traced}");
    let given = run(&["--max-readahead", "128k"]);
    assert_eq!(given["max_readahead_kib"], 128, "{given}");
    let io = |r: &serde_json::Value| r["avg_io_kib"].as_f64().unwrap();
    assert!(io(&traced) > 1024.0, "{traced}");
    assert!(io(&given) <= 128.0, "{given}");
    // A bad line is an error that names it.
    std::fs::write(&trace, "# readahead 7:1 lots\n0 4096\n").unwrap();
    let o = ahead(&["sim", "replay", trace.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("readahead 'lots'"), "{}", stderr(&o));
}

/// A trace's `# advice ID random` line replays the file as the kernel
/// reads one advised `POSIX_FADV_RANDOM`: each miss as asked. Runs of 32
/// sequential 64 KiB reads at scattered offsets (fio's `rw=randread:32`,
/// which advises random): the kernel's policy reads ahead of each run
/// without the line, and reads only what is asked with it. `sequential`
/// doubles the kernel's window.
#[test]
fn a_trace_gives_the_programs_advice() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let mut reads = String::new();
    for run in 0..64u64 {
        let start = (run * 37 % 64) * (4 << 20);
        for i in 0..32u64 {
            reads.push_str(&format!("{} 65536 3 file=7:1\n", start + i * 65536));
        }
    }
    let replay = |advice: &str| {
        let text =
            format!("# file 7:1 268435456 /data/f\n# readahead 7:1 1048576\n{advice}{reads}");
        std::fs::write(&trace, text).unwrap();
        replay_row(&trace, "fast", &[])
    };
    let amp = |r: &serde_json::Value| r["read_amplification"].as_f64().unwrap();
    let plain = replay("");
    let random = replay("# advice 7:1 random\n");
    let sequential = replay("# advice 7:1 sequential\n");
    assert!(amp(&plain) > 1.05, "{plain}");
    assert!((amp(&random) - 1.0).abs() < 0.01, "{random}");
    assert_eq!(sequential["max_readahead_kib"], 2048, "{sequential}");
    assert_eq!(random["max_readahead_kib"], 1024, "{random}");
    // Advice on a range leaves the file as it was; a bad line is an error.
    let willneed = replay("# advice 7:1 willneed\n");
    assert_eq!(amp(&willneed), amp(&plain), "{willneed}");
    std::fs::write(&trace, "# advice 7:1\n0 4096\n").unwrap();
    let o = ahead(&["sim", "replay", trace.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("# advice ID WORD"), "{}", stderr(&o));
}

/// Two processes' opens of one path (fio's jobs on one file) share its
/// cached pages in a replay: two readers of the same 1,024 pages at random
/// read each page from the device once, where two files of other paths
/// are read twice.
#[test]
fn opens_of_one_path_share_the_cache_in_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let replay = |second: &str| {
        let mut text = format!(
            "# file 7:1 4194304 /data/f\n# advice 7:1 random\n\
             # file 8:1 4194304 {second}\n# advice 8:1 random\n"
        );
        for (k, id) in ["7:1", "8:1"].iter().enumerate() {
            for i in 0..1024u64 {
                let page = (i * 389 + k as u64 * 101) % 1024;
                text.push_str(&format!("{} 4096 3 file={id}\n", page * 4096));
            }
        }
        std::fs::write(&trace, text).unwrap();
        replay_row(&trace, "ssd", &[])["read_amplification"]
            .as_f64()
            .unwrap()
    };
    let shared = replay("/data/f");
    let apart = replay("/data/g");
    assert!(shared < 0.55, "{shared}");
    assert!(apart > 0.95, "{apart}");
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "0 4096\n4096 nope\n").unwrap();
    let missing = dir.path().join("missing.trace");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["sim", "bogus"], "unknown scenario 'bogus'"),
        (
            vec!["sim", "iozone", "--policy", "magic"],
            "unknown readahead policy 'magic'",
        ),
        (
            vec!["sim", "iozone", "--device", "floppy"],
            "unknown device 'floppy'",
        ),
        (
            vec!["sim", "iozone", "--memory", "12q"],
            "invalid size '12q'",
        ),
        (
            vec!["sim", "iozone", "--memory", "64k"],
            "smaller than two readahead windows",
        ),
        (
            vec!["sim", "replay", bad.to_str().unwrap()],
            "bad.trace:2: length",
        ),
        (
            vec!["sim", "replay", missing.to_str().unwrap()],
            "missing.trace",
        ),
        (vec!["sim", "replay"], "replay needs a trace file"),
    ];
    for (args, want) in cases {
        let o = ahead(&args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `--timed` replays a trace's threads with the program's time between
/// its reads, says how long the traced program's reads took, and refuses
/// a trace without timestamps with a clear error.
#[test]
fn a_timed_replay_says_the_programs_span_and_needs_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let timed = dir.path().join("timed.trace");
    let mut text = String::from("# file 9:1 1048576 /d/f\n");
    for i in 0..64u64 {
        // 2 ms apart: 126 ms from the first read to the last.
        text += &format!("{} 16384 3 file=9:1 tid=9 t={}\n", i * 16384, i * 2_000_000);
    }
    std::fs::write(&timed, text).unwrap();
    let t = timed.to_str().unwrap();
    let o = ahead(&[
        "sim", "replay", t, "--device", "ssd", "--policy", "ondemand", "--timed",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("timed: the traced program's reads spanned 0.126 s"),
        "{out}"
    );
    let row = replay_row(&timed, "ssd", &["--timed"]);
    assert_eq!(row["program_s"].as_f64(), Some(0.126));
    assert!(row["seconds"].as_f64().unwrap() >= 0.12, "{row}");
    let row = replay_row(&timed, "ssd", &[]);
    assert!(row.get("program_s").is_none(), "{row}");
    assert!(row["seconds"].as_f64().unwrap() < 0.06, "{row}");
    let bare = dir.path().join("bare.trace");
    std::fs::write(&bare, "0 4096 3\n4096 4096 3\n").unwrap();
    let o = ahead(&["sim", "replay", bare.to_str().unwrap(), "--timed"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("needs tid= and t="), "{}", stderr(&o));
}
