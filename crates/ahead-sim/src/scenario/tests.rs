//! Tests of the scenarios and of trace parsing.

use super::*;
use std::path::Path;

#[test]
fn trace_errors_name_the_line() {
    let p = Path::new("t.trace");
    let err = parse_trace("0 4096\n# c\n\n8192 x 1\n", p)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.trace:4: length"), "{err}");
    let err = parse_trace("1 2 3 4\n", p).unwrap_err().to_string();
    assert!(err.contains(":1:"), "{err}");
    let err = parse_trace("0 4k s\n", p).unwrap_err().to_string();
    assert!(err.contains("stream id"), "{err}");
    let t = parse_trace("0 4k\n4096 4096 7 # x\n", p).unwrap();
    assert_eq!(
        t.ops[1],
        TraceOp {
            offset: 4096,
            len: 4096,
            stream: 7,
            file: 0,
            fault: false,
            tid: None,
            t: None,
        }
    );
    let t = parse_trace("0 4k 3 map=1\n4096 4k 3 map=0\n", p).unwrap();
    assert!(t.ops[0].fault && !t.ops[1].fault);
    let err = parse_trace("0 4k 3 map=yes\n", p).unwrap_err().to_string();
    assert!(err.contains("map=yes"), "{err}");
    let err = parse_trace("0 4k 3 color=red\n", p)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field 'color='"), "{err}");
}

#[test]
fn ahead_trace_lines_name_their_files() {
    let p = Path::new("t.trace");
    let text = "# ahead trace\n# file 7:1 65536 /d/a.db\n# file 7:2 8192 /d/b\n\
                0 100 3 file=7:1 tid=7 t=1\n4096 4096 4 file=7:2 tid=8 t=2\n8192 4096 3 file=7:1 tid=7 t=3\n";
    let mut t = parse_trace(text, p).unwrap();
    assert_eq!(t.files.len(), 2);
    assert_eq!(t.files[0].size, Some(65536));
    assert_eq!(t.files[1].path.as_deref(), Some("/d/b"));
    assert_eq!(t.ops[1].file, 1);
    assert_eq!(t.ops[2].stream, 3);
    assert_eq!((t.ops[1].tid, t.ops[1].t), (Some(8), Some(2)));
    let err = parse_trace("0 4k 3 t=soon\n", p).unwrap_err().to_string();
    assert!(err.contains("t=soon"), "{err}");
    t.only("a.db").unwrap();
    assert_eq!(t.ops.len(), 2);
    assert!(t.only("nope").unwrap_err().contains("7:1 /d/a.db"));
}

#[test]
fn memory_smaller_than_a_window_is_refused() {
    let o = SimOptions {
        memory: Some(64 * KIB),
        ..SimOptions::default()
    };
    let err = run(&Scenario::Iozone, &o).unwrap_err().to_string();
    assert!(err.contains("smaller than two readahead windows"), "{err}");
}

#[test]
fn unknown_scenario() {
    let err = Scenario::parse("bogus", None).unwrap_err().to_string();
    assert!(err.contains("unknown scenario 'bogus'"), "{err}");
}

#[test]
fn stride_follows_iozone_column_by_column() {
    let recs: Vec<u64> = stride_records(1700, 1).map(|(r, _)| r).collect();
    assert_eq!(recs.len(), 1700);
    assert_eq!(&recs[..3], &[0, 17, 34]);
    // Each pass p starts at record p, right after the previous pass
    // reached the last rows.
    let starts: Vec<u64> = recs
        .windows(2)
        .filter(|w| w[1] < w[0])
        .map(|w| w[1])
        .collect();
    assert_eq!(starts, (1..=17).collect::<Vec<u64>>());
    // Every record is read once, except that the passes starting at 15
    // and 16 wrap one row short (iozone wraps when the next record
    // would reach the last one), and the reads left over begin another
    // pass at 17: as many reads as the file has records.
    let mut seen = vec![0u32; 1700];
    for &r in &recs {
        seen[r as usize] += 1;
    }
    let never: Vec<usize> = (0..1700).filter(|&r| seen[r] == 0).collect();
    let twice: Vec<usize> = (0..1700).filter(|&r| seen[r] == 2).collect();
    assert_eq!(never, vec![1698, 1699]);
    assert_eq!(twice, vec![17, 34]);
}

#[test]
fn small_iozone_runs_every_workload_for_every_policy() {
    let o = SimOptions {
        file_size: Some(64 * MIB),
        memory: Some(32 * MIB),
        ..SimOptions::default()
    };
    let r = run(&Scenario::Iozone, &o).unwrap();
    assert_eq!(r.len(), 7 * 3);
    for row in &r {
        assert!(row.throughput_mb_s > 0.0, "{row:?}");
        assert!((row.requested_mb - 64.0 * 1.048576).abs() < 0.01, "{row:?}");
    }
}

/// Replays `text` as a trace file on the `ssd` model with `ondemand`,
/// timed by `timed` (see [`SimOptions::timed`]).
fn replay_text(text: &str, timed: Option<f64>) -> Result<SimResult, SimError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.trace");
    std::fs::write(&path, text).unwrap();
    let o = SimOptions {
        policies: vec![ahead::ra::PolicyKind::OnDemand.into()],
        device: DeviceKind::Ssd,
        timed,
        ..SimOptions::default()
    };
    run(&Scenario::Replay(path), &o).map(|mut rows| rows.remove(0))
}

/// A forward reader that computes 1 ms after each 16 KiB it reads: timed,
/// its replay takes the program's 0.5 s and the device's time hides under
/// it, as the kernel's readahead reads on while the program computes
/// (at most a quarter of it shows); untimed, the device's time alone.
/// Halved (`--timed=0.5`), half the program's time.
#[test]
fn a_timed_replay_overlaps_the_programs_time_with_readahead() {
    let mut text = String::from("# file 1:1 8388608 /d/f\n");
    for i in 0..512u64 {
        text += &format!("{} 16384 3 file=1:1 tid=1 t={}\n", i * 16384, i * 1_000_000);
    }
    let untimed = replay_text(&text, None).unwrap();
    let timed = replay_text(&text, Some(1.0)).unwrap();
    let half = replay_text(&text, Some(0.5)).unwrap();
    let program = 0.511;
    assert_eq!(timed.program_s, Some(program));
    assert_eq!(untimed.program_s, None);
    assert!(untimed.seconds < 0.2, "{untimed:?}");
    // The program's own span, the reads' copies within it, and at most a
    // quarter of the device's time on top.
    assert!(
        timed.seconds >= 0.5 && timed.seconds < program + untimed.seconds / 4.0,
        "timed {} s, untimed {} s",
        timed.seconds,
        untimed.seconds
    );
    assert!(
        half.seconds >= 0.25 && half.seconds < program / 2.0 + untimed.seconds / 4.0,
        "{half:?}"
    );
}

/// One thread reading two files backward, the first whole before the
/// second: a timed replay reads them one after the other, as the thread
/// did, where the untimed one runs the two descriptors as two readers at
/// once. A trace without timestamps is refused a timed replay.
#[test]
fn a_timed_replay_keeps_a_threads_reads_in_order_across_files() {
    let mut text = String::from("# file 1:1 4194304 /d/a\n# file 1:2 4194304 /d/b\n");
    let mut t = 0;
    for (file, fd) in [("1:1", 3), ("1:2", 4)] {
        for i in (0..256u64).rev() {
            t += 1;
            text += &format!("{} 4096 {fd} file={file} tid=1 t={t}\n", i * 16384);
        }
    }
    let untimed = replay_text(&text, None).unwrap();
    let timed = replay_text(&text, Some(1.0)).unwrap();
    assert!(
        timed.seconds > 1.6 * untimed.seconds,
        "timed {} s, untimed {} s",
        timed.seconds,
        untimed.seconds
    );
    let err = replay_text("0 4096 3\n4096 4096 3\n", Some(1.0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs tid= and t="), "{err}");
}

/// A forward reader stepping 20 pages at a time, which once read two
/// pages a page apart and then the next page and then two marks' folios
/// (as sqlite3's IN-list in key order over 2.7 KB rows did at its read
/// 2,071 on this machine). With single-page marks the kernel's window
/// dies at the first mark the reader steps over, and the rest is read a
/// page at a time; in large folios the marks it lands on grow to 16 and
/// 256 pages and the windows run ahead of it to the end. The same trace
/// under 6.18 read 250 MB for 17 MB asked; `--large-folios` replays it at
/// 250.5 MB, 22.2 MB without.
#[test]
fn in_large_folios_a_reader_stepping_over_pages_meets_the_marks_and_streams() {
    let mut reads = vec![1000u64, 1002, 1003, 1006];
    reads.extend((0..400).map(|k| 1021 + 20 * k));
    let mut text = String::from("# file 1:1 67108864 /d/t.db\n");
    for (i, p) in reads.iter().enumerate() {
        text += &format!("{} 4096 3 file=1:1 tid=1 t={i}\n", p * 4096);
    }
    let run = |folios: bool| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        std::fs::write(&path, &text).unwrap();
        let o = SimOptions {
            policies: vec![ahead::ra::PolicyKind::OnDemand.into()],
            device: DeviceKind::Ssd,
            max_readahead: Some(8 * MIB),
            large_folios: folios,
            ..SimOptions::default()
        };
        run(&Scenario::Replay(path), &o).unwrap().remove(0)
    };
    let (small, large) = (run(false), run(true));
    let device = |r: &SimResult| r.read_amplification * r.requested_mb;
    assert!(small.read_amplification < 1.5, "{small:?}");
    assert!(
        device(&large) > 10.0 * device(&small),
        "{} MB in large folios, {} MB in small pages",
        device(&large),
        device(&small)
    );
    assert!(
        large.hit_ratio > 0.95 && small.hit_ratio < 0.1,
        "{large:?} {small:?}"
    );
}

/// `--policy run` models the preload's trial of the kernel's readahead
/// (`ahead::ra::hints::trial`): a walk 10-30 pages a step that the kernel
/// reads through in large folios, on a device capped in bandwidth, is read
/// without the kernel's readahead once the trial finds a read waiting for
/// its own faster than the stream: fewer bytes, less time. A file the
/// program advised random has no trial (and no stream to end).
#[test]
fn under_ahead_run_a_walk_the_kernel_reads_through_is_read_without_its_readahead() {
    // Neighbouring reads start the kernel's stream; then steps of 10 to 30
    // pages, drawn (an irregular walk: no stride for ahead's own hints).
    let mut reads = vec![1000u64, 1002, 1003, 1006];
    let (mut x, mut page) = (1u64, 1021u64);
    for _ in 0..3_000 {
        reads.push(page);
        x = (x * 1_103_515_245 + 12_345) % (1 << 31);
        page += 10 + (x >> 16) % 21;
    }
    let replay = |advice: &str| {
        let mut text = String::from("# file 1:1 335544320 /d/t.db\n");
        text += advice;
        for (i, p) in reads.iter().enumerate() {
            text += &format!("{} 4096 3 file=1:1 tid=1 t={}\n", p * 4096, i * 1000);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        std::fs::write(&path, &text).unwrap();
        let o = SimOptions {
            policies: vec![
                ahead::ra::PolicyKind::OnDemand.into(),
                "run".parse().unwrap(),
            ],
            device: "419430400,20000,55us".parse().unwrap(),
            max_readahead: Some(8 * MIB),
            large_folios: true,
            timed: Some(1.0),
            ..SimOptions::default()
        };
        run(&Scenario::Replay(path), &o).unwrap()
    };
    let r = replay("");
    let device = |r: &SimResult| r.read_amplification * r.requested_mb;
    let (plain, ahead) = (&r[0], &r[1]);
    assert!(
        device(plain) > 100.0,
        "the kernel reads the walk through: {plain:?}"
    );
    assert!(
        device(ahead) < 0.6 * device(plain) && ahead.seconds < 0.8 * plain.seconds,
        "{} MB in {:.3} s under ahead run, {} MB in {:.3} s plainly",
        device(ahead),
        ahead.seconds,
        device(plain),
        plain.seconds
    );
    let r = replay("# advice 1:1 random\n");
    assert_eq!(device(&r[0]), device(&r[1]), "advised random: no trial");
}
