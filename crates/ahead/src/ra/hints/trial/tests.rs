use super::*;

const PAGE: u64 = 4096;

/// What a drive of a trial did: the reads at which it advised, the ranges
/// it dropped, and the trial.
struct Drive {
    advised: Vec<(u64, Advice)>,
    dropped: Vec<(u64, u64)>,
    timed: u64,
    trial: Trial,
}

/// Drives a trial with a walk of `reads` 4 KiB reads `gap` pages apart;
/// `ns(i, off)` is how long read `i` takes with the kernel's readahead off
/// or on. The hooks' part is played here: reads are timed while asked.
fn drive(reads: u64, gap: u64, ns: impl Fn(u64, bool) -> u64) -> Drive {
    drive_with(Trial::new(PAGE), reads, gap, ns)
}

fn drive_with(mut t: Trial, reads: u64, gap: u64, ns: impl Fn(u64, bool) -> u64) -> Drive {
    let mut clock = Clock::default();
    let (mut timing, mut off) = (false, false);
    let mut d = Drive {
        advised: Vec::new(),
        dropped: Vec::new(),
        timed: 0,
        trial: t.clone(),
    };
    for i in 0..reads {
        if timing {
            let took = ns(i, off);
            clock.ns += took;
            clock.reads += 1;
            clock.fast += u64::from(fast(took, PAGE));
            d.timed += 1;
        }
        let step = t.read(i * gap * PAGE, PAGE, clock, off, false, || 16 << 20);
        timing = step.time.unwrap_or(timing);
        if let Some(a) = step.advise {
            off = a == Advice::Random;
            d.advised.push((i, a));
        }
        d.dropped.extend(step.drop);
    }
    d.trial = t;
    d
}

/// The kernel streaming a walk: one read in 75 waits `wait` ns for its
/// window, the others come from the cache in 2 µs.
fn streamed(i: u64, wait: u64) -> u64 {
    if i.is_multiple_of(75) {
        wait
    } else {
        2_000
    }
}

#[test]
fn a_walk_the_kernel_streams_slowly_is_read_without_its_readahead() {
    // The IN-list on the steady device: 53 µs a miss until the kernel's
    // stream begins at read 600, then 14 ms a window (about 190 µs a read);
    // without readahead, 53 µs again.
    let d = drive(3_000, 27, |i, off| match (off, i < 600) {
        (true, _) | (false, true) => 53_000,
        (false, false) => streamed(i, 14_000_000),
    });
    let o = d.trial.outcome().expect("a trial finished");
    assert!(o.off && d.trial.off(), "{o:?}");
    assert_eq!(o.trials, 1);
    assert_eq!(o.off_ns, 53_000);
    assert!((150_000..250_000).contains(&o.on_ns), "{o:?}");
    assert_eq!(d.advised.len(), 1, "{:?}", d.advised);
    let (at, advice) = d.advised[0];
    assert_eq!(advice, Advice::Random);
    // What the kernel may have read ahead is dropped, from the page after
    // the read that decided.
    let from = (at * 27 + 1) * PAGE;
    assert_eq!(d.dropped, vec![(from, from + (16 << 20))]);
    // Timing stopped once decided: the later reads were not timed.
    assert!(d.timed < 3_000 - at, "{} timed", d.timed);
}

#[test]
fn a_walk_the_kernel_streams_fast_is_left_to_it_without_a_trial() {
    // A fast device: a window in 1.3 ms (about 19 µs a read), a miss 80 µs.
    // The miss blocks already say off would be slower: nothing is tried.
    let d = drive(6_000, 27, |i, off| match (off, i < 600) {
        (true, _) | (false, true) => 80_000,
        (false, false) => streamed(i, 1_300_000),
    });
    assert!(
        d.advised.is_empty() && d.dropped.is_empty(),
        "{:?}",
        d.advised
    );
    assert!(d.trial.outcome().is_none());
}

#[test]
fn off_tried_and_found_slower_goes_back_on_and_is_not_tried_again_for_that() {
    // Streamed from the start (no miss block to compare with): off is
    // tried, 80 µs a read against the stream's 19, and undone. The stream
    // is looked at again after RETRY_READS reads, then twice that, and
    // held to the 80 µs measured: not tried again.
    let d = drive(20_000, 27, |i, off| {
        if off {
            80_000
        } else {
            streamed(i, 1_300_000)
        }
    });
    let o = d.trial.outcome().expect("a trial finished");
    assert!(!o.off && !d.trial.off(), "{o:?}");
    assert_eq!((o.off_ns, o.trials), (80_000, 1), "{o:?}");
    assert_eq!(d.advised.len(), 2, "{:?}", d.advised);
    assert_eq!(
        (d.advised[0].1, d.advised[1].1),
        (Advice::Random, Advice::Normal)
    );
    assert!(d.trial.backoff >= RETRY_READS << 2, "looked again twice");
}

#[test]
fn a_stream_slower_than_the_off_reads_measured_before_is_tried_again() {
    // The first trial finds off slower (80 µs against 19); later the
    // device slows and the stream costs 190 µs a read: off again.
    let d = drive(30_000, 27, |i, off| match (off, i < 5_000) {
        (true, _) => 80_000,
        (false, true) => streamed(i, 1_300_000),
        (false, false) => streamed(i, 14_000_000),
    });
    let o = d.trial.outcome().expect("a trial finished");
    assert!(o.off && d.trial.off(), "{o:?} {:?}", d.advised);
    assert_eq!(o.trials, 2);
    let kinds: Vec<Advice> = d.advised.iter().map(|a| a.1).collect();
    assert_eq!(kinds, [Advice::Random, Advice::Normal, Advice::Random]);
    assert!(d.advised[2].0 - d.advised[1].0 >= RETRY_READS);
}

#[test]
fn no_trial_where_the_kernel_does_not_stream_or_the_reads_do_not_walk() {
    // Every read waits for the device with readahead on: nothing to try.
    let d = drive(3_000, 27, |_, off| if off { 20_000 } else { 50_000 });
    assert!(d.advised.is_empty() && d.trial.outcome().is_none());
    assert!(d.timed > 2_000, "a walk is timed while it lasts");
    // Reads that continue each other (the next page) are a stream, not a
    // walk: not even timed.
    let d = drive(3_000, 1, |i, _| streamed(i, 14_000_000));
    assert!(d.advised.is_empty() && d.timed == 0);
}

#[test]
fn a_stream_the_hooks_saw_ends_the_trial_and_the_programs_advice_ends_all() {
    let mut t = Trial::new(PAGE);
    let mut clock = Clock::default();
    let mut i = 0u64;
    let mut off = false;
    // Streamed reads of 50 µs on average until readahead goes off.
    while !off && i < 5_000 {
        clock.ns += streamed(i, 3_600_000);
        clock.reads += 1;
        clock.fast += u64::from(!i.is_multiple_of(75));
        off = t
            .read(i * 16 * PAGE, PAGE, clock, false, false, || 0)
            .advise
            == Some(Advice::Random);
        i += 1;
    }
    assert!(off && t.off());
    // The hooks turned it back on: the trial stops timing and waits.
    let step = t.read(i * 16 * PAGE, PAGE, clock, false, false, || 0);
    assert_eq!(step.time, Some(false));
    assert!(!t.off());
    assert_eq!(t.wait, RETRY_READS);
    // The program's own advice: never again.
    t.advised();
    for j in 0..10_000 {
        let s = t.read((i + j) * 16 * PAGE, PAGE, clock, false, false, || 0);
        assert_eq!(s, Step::default());
    }
}

#[test]
fn forced_off_needs_a_stream_but_weighs_nothing() {
    // The fast device's walk, which a trial leaves to the kernel: forced,
    // off once the kernel streams it, and kept off though slower.
    let fast_stream = |i: u64, off: bool| match (off, i < 600) {
        (true, _) | (false, true) => 80_000,
        (false, false) => streamed(i, 1_300_000),
    };
    let d = drive_with(Trial::forced(PAGE), 6_000, 27, fast_stream);
    let o = d.trial.outcome().expect("a trial finished");
    assert!(o.off && d.trial.off(), "{o:?}");
    assert_eq!(d.advised.len(), 1);
    assert!(d.advised[0].0 > 600, "not before the kernel streams");
    // Where the kernel never streams, nothing, forced or not.
    let d = drive_with(Trial::forced(PAGE), 3_000, 27, |_, _| 50_000);
    assert!(d.advised.is_empty());
}

#[test]
fn hints_of_ahead_end_the_trial_and_turn_readahead_back_on() {
    let mut t = Trial::forced(PAGE);
    let mut clock = Clock::default();
    let mut i = 0;
    while !t.off() && i < 5_000 {
        clock.ns += 2_000;
        clock.reads += 1;
        clock.fast += 1;
        t.read(i * 16 * PAGE, PAGE, clock, t.off(), false, || 0);
        i += 1;
    }
    assert!(t.off());
    let step = t.hinted();
    assert_eq!(step.advise, Some(Advice::Normal));
    assert!(!t.off());
    // Never again, and no advice twice.
    assert_eq!(t.hinted(), Step::default());
    for j in 0..5_000 {
        assert_eq!(
            t.read((i + j) * 16 * PAGE, PAGE, clock, false, false, || 0),
            Step::default()
        );
    }
}
