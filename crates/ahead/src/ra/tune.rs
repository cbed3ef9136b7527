//! The Direct engine's readahead window, grown where larger windows do not
//! read slower and readers wait for readahead ([`WindowTuner`],
//! `EngineConfig::readahead_tuning`; docs/bench.md for what it found on
//! this host, and why it is off by default).

/// A sample of the window tuner spans at least this many of its windows
/// of readahead: enough that the windows in flight at its ends are a small
/// part of it.
pub const TUNE_SAMPLE_WINDOWS: u64 = 8;
/// …and at least this many bytes (32 MiB: 10–20 ms on the fast device of
/// docs/measuring.md, several of a cgroup throttle's slices on a capped
/// one).
pub const TUNE_SAMPLE_BYTES: u64 = 32 << 20;
/// A doubled window is undone if its sample read this much slower than
/// the window before it (the mean of its samples before and after): this
/// host's samples of one window size moved 5–10% between neighbours.
pub const TUNE_GAIN: f64 = 0.10;
/// A window is tried twice as large only while readers waited for pages
/// readahead had asked for (the `late` counter) at least this often per
/// window: the window did not cover the time its reads take. On this
/// host's disk a cold scan waited 0.9 times a window with 4 MiB windows,
/// 0.8 with 8 MiB and under 0.1 with 16 MiB (`ahead read --stats`).
pub const TUNE_LATE: f64 = 0.5;
/// A spell of this long from a readahead read's completion to the next
/// read's submission, none in flight between, ends a sample unfinished
/// (the program paused; its time says nothing of the window). The time a
/// read spends in flight counts however long it is: a throttled or
/// contended device's.
pub const TUNE_IDLE_NS: u64 = 20_000_000;

/// One sample of the window tuner: a window size, what readahead read with
/// it, and whether it was kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TuneStep {
    /// The largest window during the sample, in pages.
    pub window_pages: u64,
    /// Bytes of readahead completed per second of the sample's wall time.
    pub bytes_per_sec: f64,
    /// For a doubling: the rate it was held to, the mean of the window
    /// before it measured just before and just after it; 0 for the
    /// start's own samples.
    pub against: f64,
    /// How often per window a reader waited for pages readahead had asked
    /// for during the sample.
    pub late: f64,
    /// Whether the window was kept: the start's samples always are; a
    /// doubling unless it read more than [`TUNE_GAIN`] slower than the
    /// mean of the window before it (before and after).
    pub kept: bool,
}

/// What one sample measured.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    rate: f64,
    late: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Measuring the window the engine started with: two samples, the
    /// faster counts (`best`, after the first).
    Base { best: Option<Sample> },
    /// Measuring a doubling of `prev`, which measured `before`.
    Trying { prev: u64, before: Sample },
    /// Back at `prev` to measure it again after the doubling `tried`,
    /// which measured `got`.
    Recheck {
        prev: u64,
        before: Sample,
        tried: u64,
        got: Sample,
    },
    /// Done: the window stays (a sample that finds the cache thrashing
    /// still halves it).
    Settled,
}

/// Grows the engine's largest readahead window while doubling it makes
/// readahead faster (issue 36: "where the device sustains more than the
/// defaults allow … the engine finds out and grows them").
///
/// It is told of every readahead read's completion (time, bytes) and cuts
/// them into samples of [`TUNE_SAMPLE_WINDOWS`] windows (at least
/// [`TUNE_SAMPLE_BYTES`]): bytes per second of wall time, not of busy
/// time, so that a reader slower than the device, which leaves it idle
/// between windows, finds no gain and keeps the window it had.
///
/// It measures the start window twice (the faster rate counts, and the
/// mean of the waits). It
/// tries a doubling only while readers waited for pages readahead had
/// asked for ([`TUNE_LATE`] a window, the `late` counter): the window did
/// not cover the time its reads take. It measures the doubling between two
/// samples of the window before it (A, B, A) and undoes it if it read
/// [`TUNE_GAIN`] slower than their mean. A run's first reads are its
/// slowest (the cache's memory touched for the first time, the first
/// windows' ramp): samples taken one after another would credit that to
/// whichever window came later, and the mean of the samples either side
/// cancels such a drift. After a change, the windows of the old size in
/// flight pass first (two of the larger). Doublings go on up to the
/// ceiling the engine gives it (a sixteenth of the cache, what the reads
/// in flight can carry), until the waits stop or a doubling is undone.
///
/// Kept unless slower, not only if faster: on this host's disk a sample's
/// rate moved 5–10% between neighbours of one window size, and a 10–20%
/// gain of 8 and 16 MiB windows over 4 MiB, seen in medians of 12
/// alternated whole runs, was not seen by samples held to a gain
/// (docs/bench.md). A model device whose pace does not depend on the
/// window keeps each doubling (no slower). Under this host's cgroup
/// throttle (400 MiB/s) the throttle's burst at the start made the start
/// window's better sample 1,450–1,580 MB/s, and the doubling was undone:
/// the window stayed at the start, the run at the cap either way.
///
/// A sample during which the cache evicted readahead before its use
/// (thrashing: several streams' windows do not fit together) halves the
/// window, down to the start, in any phase.
#[derive(Clone, Debug)]
pub struct WindowTuner {
    page: u64,
    start: u64,
    ceiling: u64,
    window: u64,
    phase: Phase,
    /// The sample: when it began (the completion that opened it), the
    /// last completion, and the bytes completed since it began.
    began: Option<u64>,
    last: u64,
    bytes: u64,
    /// Bytes of readahead to let pass before the next sample (the old
    /// windows in flight after a change).
    skip: u64,
    /// The cache's counts of late pages and of pages evicted before use
    /// when the sample began.
    counts_at: (u64, u64),
    steps: Vec<TuneStep>,
}

impl WindowTuner {
    /// A tuner starting at `start` pages of `page` bytes, growing to at
    /// most `ceiling` pages (a power-of-two multiple of `start` is reached
    /// at most; a ceiling below twice the start leaves nothing to tune).
    pub fn new(page: u64, start: u64, ceiling: u64) -> WindowTuner {
        let start = start.max(1);
        WindowTuner {
            page: page.max(1),
            start,
            ceiling: ceiling.max(start),
            window: start,
            phase: if ceiling >= 2 * start {
                Phase::Base { best: None }
            } else {
                Phase::Settled
            },
            began: None,
            last: 0,
            bytes: 0,
            // A stream's first windows ramp up to the start (×4, ×2 per
            // window); the sample of the start begins after two of them.
            skip: 2 * start * page.max(1),
            counts_at: (0, 0),
            steps: Vec::new(),
        }
    }

    /// The window now, in pages.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The largest window it may try, in pages.
    pub fn ceiling(&self) -> u64 {
        self.ceiling
    }

    /// Whether it has stopped trying larger windows.
    pub fn settled(&self) -> bool {
        self.phase == Phase::Settled
    }

    /// Its samples of the start, and its doublings, in order.
    pub fn steps(&self) -> &[TuneStep] {
        &self.steps
    }

    fn sample_bytes(&self) -> u64 {
        (TUNE_SAMPLE_WINDOWS * self.window * self.page).max(TUNE_SAMPLE_BYTES)
    }

    /// A readahead read of `bytes`, submitted at `submitted`, completed at
    /// `now` (nanoseconds from any fixed origin); `counts` gives the cache's counts of late pages
    /// (a reader waited for them) and of pages read ahead and evicted
    /// before use, asked only when a sample begins or ends. Returns the
    /// new window in pages when it changes.
    pub fn completed(
        &mut self,
        now: u64,
        submitted: u64,
        bytes: u64,
        counts: impl FnOnce() -> (u64, u64),
    ) -> Option<u64> {
        if bytes == 0 {
            return None;
        }
        if self.skip > 0 {
            self.skip = self.skip.saturating_sub(bytes);
            return None;
        }
        // The sample ends unfinished if the program left the device idle
        // for long: this read was submitted long after the last one
        // completed, with nothing in flight between. The time from its
        // submission to its completion is the device's (or its
        // throttle's), however long, and counts; so does a spell with
        // reads in flight.
        let paused = submitted.saturating_sub(self.last) > TUNE_IDLE_NS;
        let began = match self.began {
            Some(b) if !paused => b,
            _ => {
                // This completion opens a sample: its bytes were read
                // before the sample's time began.
                self.began = Some(now);
                self.last = now;
                self.bytes = 0;
                self.counts_at = counts();
                return None;
            }
        };
        self.last = now;
        self.bytes += bytes;
        if self.bytes < self.sample_bytes() || now <= began {
            return None;
        }
        let (late, thrashed) = counts();
        let window = self.window;
        let windows = self.bytes as f64 / (window * self.page) as f64;
        let got = Sample {
            rate: self.bytes as f64 * 1e9 / (now - began) as f64,
            late: late.saturating_sub(self.counts_at.0) as f64 / windows,
        };
        self.began = None;
        let step = |against: f64, kept: bool| TuneStep {
            window_pages: window,
            bytes_per_sec: got.rate,
            against,
            late: got.late,
            kept,
        };
        if thrashed > self.counts_at.1 && window > self.start {
            self.steps.push(step(0.0, false));
            self.phase = Phase::Settled;
            return self.set((window / 2).max(self.start));
        }
        match self.phase {
            Phase::Settled => None,
            Phase::Base { best } => {
                self.steps.push(step(0.0, true));
                match best {
                    None => {
                        self.phase = Phase::Base { best: Some(got) };
                        None
                    }
                    // The faster rate; the waits of both (they come in
                    // spells, as the device's pace does).
                    Some(b) => self.try_double(Sample {
                        rate: b.rate.max(got.rate),
                        late: (b.late + got.late) / 2.0,
                    }),
                }
            }
            Phase::Trying { prev, before } => {
                self.phase = Phase::Recheck {
                    prev,
                    before,
                    tried: window,
                    got,
                };
                self.set(prev)
            }
            Phase::Recheck {
                before,
                tried,
                got: trial,
                ..
            } => {
                // Tried because readers waited for readahead: kept unless
                // it read slower than the window before it, measured on
                // either side of it (the mean cancels a run's own drift).
                let against = (before.rate + got.rate) / 2.0;
                let kept = trial.rate >= against * (1.0 - TUNE_GAIN);
                self.steps.push(TuneStep {
                    window_pages: tried,
                    bytes_per_sec: trial.rate,
                    against,
                    late: trial.late,
                    kept,
                });
                if !kept {
                    self.phase = Phase::Settled;
                    return None;
                }
                // The doubling holds: on to the next, held to this one.
                self.window = tried;
                let changed = self.try_double(trial);
                if changed.is_none() {
                    // Settled: back to the doubling kept.
                    return self.set_from(window, tried);
                }
                changed
            }
        }
    }

    /// Tries twice the window (now measured as `now`) if readers still
    /// waited for readahead ([`TUNE_LATE`]) and the ceiling allows, else
    /// settles. Returns the new window if it changed.
    fn try_double(&mut self, now: Sample) -> Option<u64> {
        let next = self.window * 2;
        if next > self.ceiling || now.late < TUNE_LATE {
            self.phase = Phase::Settled;
            return None;
        }
        self.phase = Phase::Trying {
            prev: self.window,
            before: now,
        };
        self.set(next)
    }

    fn set(&mut self, window: u64) -> Option<u64> {
        let old = self.window;
        self.set_from(old, window)
    }

    /// Moves from `old` (the window the engine has now) to `window`.
    fn set_from(&mut self, old: u64, window: u64) -> Option<u64> {
        self.window = window;
        if window == old {
            return None;
        }
        // The windows of the old size still in flight, and the one the
        // reader's marker starts next, are not the new size's.
        self.skip = 2 * window.max(old) * self.page;
        self.began = None;
        Some(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device for the tuner: MB/s and readers' waits per window, each
    /// by the window in MiB.
    struct Dev<R: Fn(u64) -> f64, L: Fn(u64) -> f64> {
        mb_s: R,
        late: L,
    }

    /// The cache's counters as the tuner is told them.
    #[derive(Default)]
    struct Counts {
        late: std::cell::Cell<f64>,
        thrashed: std::cell::Cell<u64>,
    }

    /// Feeds `tuner` `bytes` of readahead in 256 KiB completions from
    /// `dev`, pausing `pause.1` ns every `pause.0` completions.
    fn feed<R: Fn(u64) -> f64, L: Fn(u64) -> f64>(
        tuner: &mut WindowTuner,
        t: &mut u64,
        bytes: u64,
        dev: &Dev<R, L>,
        pause: (u64, u64),
        counts: &Counts,
    ) {
        let io = 256 << 10;
        for i in 0..bytes / io {
            let w = tuner.window() * 4096;
            let rate = (dev.mb_s)(w >> 20) * 1e6;
            // In flight since before the last completion, unless the
            // program paused: then submitted after the pause.
            let mut submitted = t.saturating_sub(1);
            if pause.0 > 0 && i % pause.0 == pause.0 - 1 {
                *t += pause.1;
                submitted = *t;
            }
            *t += (io as f64 / rate * 1e9) as u64;
            counts
                .late
                .set(counts.late.get() + (dev.late)(w >> 20) * io as f64 / w as f64);
            tuner.completed(*t, submitted, io, || {
                (counts.late.get() as u64, counts.thrashed.get())
            });
        }
    }

    const MIB4: u64 = 1024;

    fn always(x: f64) -> impl Fn(u64) -> f64 {
        move |_| x
    }

    #[test]
    fn the_tuner_keeps_each_doubling_that_is_not_slower_and_undoes_the_first_that_is() {
        let mut tu = WindowTuner::new(4096, MIB4, 16 * MIB4);
        let (mut t, c) = (0, Counts::default());
        // 4 MiB: 1,000 MB/s; 8 MiB: 1,500; 16 MiB: 1,300 (13% less);
        // readers wait once a window at every size.
        let dev = Dev {
            mb_s: |w: u64| match w {
                4 => 1000.0,
                8 => 1500.0,
                _ => 1300.0,
            },
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 2 << 30, &dev, (0, 0), &c);
        assert!(tu.settled());
        assert_eq!(tu.window(), 2 * MIB4);
        let steps: Vec<(u64, bool)> = tu
            .steps()
            .iter()
            .map(|s| (s.window_pages, s.kept))
            .collect();
        assert_eq!(
            steps,
            [
                (MIB4, true),
                (MIB4, true),
                (2 * MIB4, true),
                (4 * MIB4, false)
            ]
        );
        let rate = |i: usize| tu.steps()[i].bytes_per_sec / 1e6;
        assert!((rate(0) - 1000.0).abs() < 20.0, "{}", rate(0));
        assert!((rate(2) - 1500.0).abs() < 30.0, "{}", rate(2));
        // Each doubling was held to the window before it, measured again.
        let against = |i: usize| tu.steps()[i].against / 1e6;
        assert!((against(2) - 1000.0).abs() < 20.0, "{}", against(2));
        assert!((against(3) - 1500.0).abs() < 30.0, "{}", against(3));
        assert!((tu.steps()[2].late - 1.0).abs() < 0.1, "{:?}", tu.steps());
    }

    #[test]
    fn the_tuner_grows_to_its_ceiling_and_no_further() {
        let mut tu = WindowTuner::new(4096, MIB4, 8 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: |w: u64| 250.0 * w as f64,
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 4 << 30, &dev, (0, 0), &c);
        assert!(tu.settled());
        assert_eq!(tu.window(), 8 * MIB4);
        assert!(tu.steps().iter().all(|s| s.kept));
    }

    #[test]
    fn a_reader_that_never_waits_keeps_the_window_it_had() {
        // The reader takes 1,200 MB/s whatever the window, and readahead is
        // always there before it: nothing to gain, no doubling tried.
        let mut tu = WindowTuner::new(4096, MIB4, 16 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: always(1200.0),
            late: always(0.0),
        };
        feed(&mut tu, &mut t, 1 << 30, &dev, (64, 5_000_000), &c);
        assert!(tu.settled());
        assert_eq!(tu.window(), MIB4);
        assert_eq!(tu.steps().len(), 2);
    }

    #[test]
    fn a_doubling_that_reads_slower_is_undone() {
        // 8 MiB windows read 15% slower, and readers wait at every size.
        let mut tu = WindowTuner::new(4096, MIB4, 16 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: |w: u64| if w == 8 { 850.0 } else { 1000.0 },
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 1 << 30, &dev, (0, 0), &c);
        assert!(tu.settled());
        assert_eq!(tu.window(), MIB4, "{:?}", tu.steps());
        assert_eq!(tu.steps().len(), 3);
        assert!(!tu.steps()[2].kept);
    }

    #[test]
    fn a_capped_device_where_readers_wait_grows_to_the_ceiling_no_slower() {
        // 400 MB/s whatever the window; the reader waits for every window.
        let mut tu = WindowTuner::new(4096, MIB4, 4 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: always(400.0),
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 1 << 30, &dev, (0, 0), &c);
        assert!(tu.settled());
        assert_eq!(tu.window(), 4 * MIB4, "{:?}", tu.steps());
    }

    #[test]
    fn a_doubling_that_stops_the_waits_is_kept_at_the_same_pace() {
        // 8 MiB windows read no faster, but readers stop waiting for them
        // (a reader faster than the device no longer stalls; here its pace
        // is the device's either way): kept, and with no waits left no
        // further doubling is tried.
        let mut tu = WindowTuner::new(4096, MIB4, 16 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: always(1000.0),
            late: |w: u64| if w == 4 { 1.0 } else { 0.1 },
        };
        feed(&mut tu, &mut t, 1 << 30, &dev, (0, 0), &c);
        assert!(tu.settled());
        assert_eq!(tu.window(), 2 * MIB4, "{:?}", tu.steps());
        assert_eq!(tu.steps().len(), 3);
    }

    #[test]
    fn a_pause_of_the_program_does_not_count_against_a_window() {
        // 8 MiB is 30% faster, and the program stops for 50 ms every 40
        // completions (10 MiB): samples begin again after each pause, and
        // the doubling is still seen.
        let mut tu = WindowTuner::new(4096, MIB4, 2 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: |w: u64| if w == 8 { 1300.0 } else { 1000.0 },
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 2 << 30, &dev, (160, 50_000_000), &c);
        assert_eq!(tu.window(), 2 * MIB4, "{:?}", tu.steps());
        // Without the restart a sample spanning a pause of 50 ms in
        // 40 MiB would read about half the device's rate.
        assert!(
            tu.steps().iter().all(|s| s.bytes_per_sec > 0.9e9),
            "{:?}",
            tu.steps()
        );
    }

    #[test]
    fn a_throttles_spells_with_reads_in_flight_still_count() {
        // A cgroup throttle holds reads in flight for 30 ms every 40
        // completions (10 MiB): samples go through those spells, and the
        // doubling (30% faster) is seen and kept.
        let mut tu = WindowTuner::new(4096, MIB4, 2 * MIB4);
        let mut t = 0u64;
        let late = std::cell::Cell::new(0.0f64);
        let io = 256u64 << 10;
        for i in 0..(2u64 << 30) / io {
            let rate = if tu.window() == 2 * MIB4 {
                520.0
            } else {
                400.0
            } * 1e6;
            let submitted = t.saturating_sub(1);
            t += (io as f64 / rate * 1e9) as u64;
            if i % 40 == 39 {
                t += 30_000_000;
            }
            late.set(late.get() + io as f64 / (tu.window() * 4096) as f64);
            tu.completed(t, submitted, io, || (late.get() as u64, 0));
        }
        assert!(tu.settled(), "{:?}", tu.steps());
        assert_eq!(tu.window(), 2 * MIB4, "{:?}", tu.steps());
    }

    #[test]
    fn a_slow_read_with_nothing_else_in_flight_is_the_devices_time() {
        // A contended device, a reader that waits for each read: every
        // read is submitted 0.1 ms after the one before it completed, and
        // every tenth takes 30 ms. That is the device's time, not a
        // pause: samples run through it, and the two of the start
        // window finish in 160 MiB (8 MiB let pass, then 32 MiB each).
        let mut tu = WindowTuner::new(4096, MIB4, 2 * MIB4);
        let mut t = 0u64;
        let io = 256u64 << 10;
        for i in 0..(160u64 << 20) / io {
            let submitted = t + 100_000;
            t = submitted + if i % 10 == 9 { 30_000_000 } else { 600_000 };
            tu.completed(t, submitted, io, || (0, 0));
        }
        assert_eq!(tu.steps().len(), 2, "{:?}", tu.steps());
        assert!(tu.settled(), "{:?}", tu.steps());
    }

    #[test]
    fn readahead_evicted_before_use_halves_a_grown_window() {
        let mut tu = WindowTuner::new(4096, MIB4, 4 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: |w: u64| 250.0 * w as f64,
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 2 << 30, &dev, (0, 0), &c);
        assert_eq!(tu.window(), 4 * MIB4);
        c.thrashed.set(100);
        feed(&mut tu, &mut t, 512 << 20, &dev, (0, 0), &c);
        assert_eq!(tu.window(), 2 * MIB4, "{:?}", tu.steps());
        c.thrashed.set(200);
        feed(&mut tu, &mut t, 512 << 20, &dev, (0, 0), &c);
        c.thrashed.set(300);
        feed(&mut tu, &mut t, 512 << 20, &dev, (0, 0), &c);
        assert_eq!(tu.window(), MIB4, "never below the start: {:?}", tu.steps());
    }

    #[test]
    fn a_slow_start_does_not_make_a_slower_doubling_look_better() {
        // The first 40 MiB read at half the device's pace (its memory
        // touched for the first time); 8 MiB windows are 15% slower. The
        // second sample of the start finds its pace, and 8 MiB is undone.
        let mut tu = WindowTuner::new(4096, MIB4, 4 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let slow = Dev {
            mb_s: always(500.0),
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 40 << 20, &slow, (0, 0), &c);
        let dev = Dev {
            mb_s: |w: u64| if w == 8 { 850.0 } else { 1000.0 },
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 1 << 30, &dev, (0, 0), &c);
        assert_eq!(tu.window(), MIB4, "{:?}", tu.steps());
        assert!(tu.settled());
    }

    #[test]
    fn a_run_that_speeds_up_by_itself_does_not_hide_a_slower_doubling() {
        // The device gets faster as the run goes on (+30% per 100 MiB),
        // and 8 MiB windows read 15% slower than 4 MiB: sampled after the
        // window before it, the doubling would look as fast; the sample of
        // that window after it shows the run's pace, and it is undone.
        let mut tu = WindowTuner::new(4096, MIB4, 4 * MIB4);
        let (mut t, c) = (0, Counts::default());
        let mut done = 0u64;
        let io = 256u64 << 10;
        for _ in 0..(1u64 << 30) / io {
            let w = if tu.window() == 2 * MIB4 { 0.85 } else { 1.0 };
            let rate = w * 1000.0 * (1.0 + 0.3 * (done as f64 / (100 << 20) as f64)) * 1e6;
            t += (io as f64 / rate * 1e9) as u64;
            done += io;
            c.late
                .set(c.late.get() + io as f64 / (tu.window() * 4096) as f64);
            tu.completed(t, t - 1, io, || (c.late.get() as u64, 0));
        }
        assert!(tu.settled());
        assert_eq!(tu.window(), MIB4, "{:?}", tu.steps());
    }

    #[test]
    fn a_ceiling_below_two_windows_leaves_nothing_to_tune() {
        let mut tu = WindowTuner::new(4096, MIB4, MIB4 + 1);
        let (mut t, c) = (0, Counts::default());
        let dev = Dev {
            mb_s: |w: u64| 250.0 * w as f64,
            late: always(1.0),
        };
        feed(&mut tu, &mut t, 1 << 30, &dev, (0, 0), &c);
        assert!(tu.settled() && tu.steps().is_empty());
        assert_eq!(tu.window(), MIB4);
    }
}
