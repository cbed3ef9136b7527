//! `ahead run`'s trial of the kernel's readahead on a sparse forward walk.
//!
//! A program that reads rows or members in file order, skipping most of
//! the file between them (sqlite3 fetching the ids of an IN-list from a
//! large table, `tarfile` taking every sixth member), is a walk the
//! kernel's readahead follows badly. Once two reads happen to land on
//! neighbouring pages its window starts; each later read that lands in a
//! window's marked folio grows the next; from then on the kernel reads the
//! whole file through. On this kernel (6.18, large folios, the device's
//! `read_ahead_kb` 8 MiB) that was 250 MB for the 17 MB sqlite3 asked
//! (issue 32, seed 104, case 12): its reads took 53 µs each before the
//! stream began and 186 µs each after, on the steady device. Whether
//! reading the gaps costs more than a request per row depends on the
//! device: on a fast one reading through is cheap and hides each read's
//! latency; on a throttled or remote one it is not.
//!
//! So the preload measures rather than assumes:
//!
//! * For a descriptor whose reads are a sparse forward walk
//!   ([`WALK_JUMPS`] of [`WALK_READS`] skip at least a page forward), the
//!   hooks time its reads ([`Clock`]), in blocks of [`BLOCK_READS`]. A
//!   block where at least a quarter of the reads came from the cache
//!   ([`fast`]) is the kernel reading the walk through (a *stream* block);
//!   otherwise each read waited for its own (a *miss* block).
//! * Once [`STREAM_READS`] reads were streamed, and as soon as the miss
//!   blocks do not show reads as slow as the stream's ([`GAIN`]), the kernel's
//!   readahead is turned off for the descriptor: `POSIX_FADV_RANDOM`, so
//!   that a miss reads what it asks, and `POSIX_FADV_DONTNEED` of the
//!   window the kernel may have read ahead ([`Step::drop`]). The drop is
//!   needed: the kernel starts its next window from a marked folio
//!   whatever the advice (`page_cache_async_ra` looks only at the
//!   file's `ra_pages`), so a stream whose marks lie ahead of the reader
//!   would go on.
//! * After a block to settle (and the drop again if the kernel still
//!   streams, [`DROPS`]), [`OFF_READS`] reads are timed without. Off
//!   stays if they are faster by [`KEEP`]; otherwise readahead goes back
//!   on (`POSIX_FADV_NORMAL`) and the trial waits ever longer before the
//!   next ([`RETRY_READS`], doubled each time), when the stream is judged
//!   again against the reads measured without it.
//!
//! Off is never left in the way of a stream: the hooks turn the kernel's
//! readahead back on at once when [`REVERT_RUN`] reads in a row continue
//! the one before, or the reads become a dense forward sweep, and a
//! program's own `posix_fadvise` of the file ends every trial on it.

/// Reads the trial looks at, at a time, to call a descriptor's reads a
/// walk.
pub const WALK_READS: u32 = 32;

/// Of [`WALK_READS`], at least this many begin a page or more past the end
/// of the read before: three quarters. (Of the IN-list's 4,247 reads,
/// spread over 114,480 pages, about one in fourteen lands within a page of
/// the last.)
pub const WALK_JUMPS: u32 = 24;

/// Timed reads in a block.
pub const BLOCK_READS: u64 = 128;

/// Reads of stream blocks before the stream is judged: 512. The kernel's
/// windows make a stream's reads bursty — with 8 MiB windows on the
/// steady device, one read in about 75 waits 10–20 ms for its window and
/// the rest are answered from the cache, so that means of 256 reads of
/// one walk ranged 26–377 µs — and a mean must span several windows.
pub const STREAM_READS: u64 = 512;

/// Reads of stream blocks after which a stream found no slower than the
/// reads without readahead is left to the kernel (until the trial looks
/// again, [`RETRY_READS`]): 4,096. Until then the stream's mean, over all
/// its blocks so far, is judged again at every block.
pub const STREAM_MAX: u64 = 4096;

/// Times the window ahead is dropped again in a trial while a block
/// without readahead still shows the kernel streaming: 3. A folio being
/// read cannot be dropped, and the one the kernel marks is the first of
/// the window it has just begun to read, so the first drop can miss it
/// (in `ahead run`'s helper, which acts a little after the read that
/// decided, the first drop left the stream going in two runs of three of
/// the IN-list).
pub const DROPS: u32 = 3;

/// Reads timed without readahead before it is judged: 256.
pub const OFF_READS: u64 = 256;

/// Reads that each waited for their own (the miss blocks, or a trial's
/// reads without readahead) must take at most this fraction of the time
/// a streamed read took, 2/3, for the kernel's readahead to be tried off:
/// a margin over the spread of a stream's means (above), so that a walk
/// the kernel's readahead serves about as well is left as the kernel has
/// it.
pub const GAIN: (u64, u64) = (2, 3);

/// Reads without the kernel's readahead, measured, must take at most this
/// fraction of the time a streamed read took, 4/5, for readahead to stay
/// off. Looser than [`GAIN`], which decides whether to try: a trial's
/// evidence is its own measurement, and undoing it costs little (the
/// stream it ended starts again only by chance, as it first did).
pub const KEEP: (u64, u64) = (4, 5);

/// Reads in a row that each begin where the last ended, after which the
/// hooks turn the kernel's readahead back on: 4 (a sequential reader of 4
/// KiB pays at most four single-page reads). Fewer would undo the trial at
/// every pair of neighbouring rows that a walk meets by chance.
pub const REVERT_RUN: u32 = 4;

/// Reads seen after a trial that left readahead on before the next may
/// start: 1,024, doubled after each such trial, so that what the trials
/// cost (their reads without readahead) is a falling share of the file's.
pub const RETRY_READS: u64 = 1024;

/// A read answered within this many nanoseconds, plus a nanosecond per 4
/// bytes copied, came from the cache: 10 µs, about five cached 4 KiB
/// reads on this machine and a fraction of any device read's latency
/// (about 50 µs on the steady device, tens on the disk uncapped).
pub const FAST_NS: u64 = 10_000;

/// Whether a read of `bytes` that took `ns` was answered from the cache
/// ([`FAST_NS`]).
pub fn fast(ns: u64, bytes: u64) -> bool {
    ns < FAST_NS + bytes / 4
}

/// A descriptor's timed reads so far, as the hooks count them while asked
/// to ([`Step::time`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// Nanoseconds inside the reads.
    pub ns: u64,
    /// Reads timed.
    pub reads: u64,
    /// Of them, reads answered from the cache ([`fast`]).
    pub fast: u64,
}

/// The advice a step gives the kernel for the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `POSIX_FADV_RANDOM`: the kernel's readahead off.
    Random,
    /// `POSIX_FADV_NORMAL`: on again.
    Normal,
}

/// What the helper does after a read: start or stop the hooks' timing,
/// advise the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Time the descriptor's reads (`Some(true)`), or stop (`Some(false)`).
    pub time: Option<bool>,
    /// Advice for the kernel.
    pub advise: Option<Advice>,
    /// Bytes `[from, to)` to drop from the cache (`POSIX_FADV_DONTNEED`):
    /// what the kernel may have read ahead of the reader, marks included.
    pub drop: Option<(u64, u64)>,
}

/// The last trial's figures, for `--stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Mean nanoseconds of a read the kernel's readahead streamed.
    pub on_ns: u64,
    /// Of a read without readahead.
    pub off_ns: u64,
    /// Readahead stayed off.
    pub off: bool,
    /// Trials finished on the descriptor.
    pub trials: u32,
}

/// Nanoseconds and reads summed over blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sum {
    ns: u64,
    reads: u64,
}

impl Sum {
    fn add(&mut self, ns: u64, reads: u64) {
        self.ns = self.ns.saturating_add(ns);
        self.reads = self.reads.saturating_add(reads);
    }

    fn mean(&self) -> u64 {
        self.ns / self.reads.max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not timing.
    Idle,
    /// Timing with the kernel's readahead on; the block began at `from`.
    On { from: Clock },
    /// Readahead off; the block began at `from`, and the first (`settle`)
    /// is not counted.
    Off { from: Clock, settle: bool },
    /// Readahead off, decided.
    Kept,
    /// The program advised the file itself: no trial.
    Never,
}

/// One descriptor's trial (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Trial {
    /// Off wherever the kernel streams, unweighed.
    force: bool,
    page: u64,
    last_end: Option<u64>,
    /// Reads and forward jumps in the current look ([`WALK_READS`]).
    look: (u32, u32),
    /// The last complete look found a walk.
    walk: bool,
    phase: Phase,
    /// Reads in blocks the kernel streamed, in miss blocks, and without
    /// readahead.
    stream: Sum,
    miss: Sum,
    off: Sum,
    /// Drops again in this trial ([`DROPS`]).
    drops: u32,
    /// Reads to see before a trial may start.
    wait: u64,
    backoff: u64,
    outcome: Option<Outcome>,
    trials: u32,
}

impl Trial {
    /// A trial for a descriptor of a file in pages of `page` bytes.
    pub fn new(page: u64) -> Trial {
        Trial::with(page, false)
    }

    /// A trial that turns the kernel's readahead off wherever it streams
    /// a walk, without weighing (`ahead run --kernel-readahead off`).
    pub fn forced(page: u64) -> Trial {
        Trial::with(page, true)
    }

    fn with(page: u64, force: bool) -> Trial {
        Trial {
            force,
            page: page.max(1),
            last_end: None,
            look: (0, 0),
            walk: false,
            phase: Phase::Idle,
            stream: Sum::default(),
            miss: Sum::default(),
            off: Sum::default(),
            drops: 0,
            wait: 0,
            backoff: RETRY_READS,
            outcome: None,
            trials: 0,
        }
    }

    /// The last trial's figures, if one finished; else, for a trial under
    /// way, the stream's mean and what is off now (`off_ns` 0: not yet
    /// measured).
    pub fn outcome(&self) -> Option<Outcome> {
        match (self.outcome, self.phase) {
            (_, Phase::Off { .. }) => Some(Outcome {
                on_ns: self.stream.mean(),
                off_ns: if self.off.reads > 0 {
                    self.off.mean()
                } else {
                    0
                },
                off: true,
                trials: self.trials,
            }),
            (o, _) => o,
        }
    }

    /// Whether the kernel's readahead is off for the descriptor by this
    /// trial (being tried, or kept off).
    pub fn off(&self) -> bool {
        matches!(self.phase, Phase::Off { .. } | Phase::Kept)
    }

    /// The program advised the file itself: its advice stands, and no
    /// trial runs again. Stops the timing.
    pub fn advised(&mut self) -> Step {
        let timing = matches!(self.phase, Phase::On { .. } | Phase::Off { .. });
        self.phase = Phase::Never;
        Step {
            time: timing.then_some(false),
            ..Step::default()
        }
    }

    /// ahead's own policy hinted the file: its hints, not the kernel's
    /// readahead, make reads fast, and the two are not to be weighed
    /// against each other. No trial runs again; the kernel's readahead is
    /// on again if a trial had it off.
    pub fn hinted(&mut self) -> Step {
        let was_off = self.off();
        let mut step = self.advised();
        step.advise = was_off.then_some(Advice::Normal);
        step
    }

    /// A read of `len` bytes at `offset` that the helper saw. `clock` is
    /// the hooks' count of the descriptor's timed reads, `off_now` whether
    /// the kernel's readahead is still off for it (the hooks turn it back
    /// on for a stream: [`REVERT_RUN`]), `guarding` whether they still keep
    /// the reader from the stream the trial ended (`crate::walk` of the
    /// preload; an off block counts only after), and `ahead` gives, when
    /// asked, how far past a read the kernel may have read ahead of it
    /// (twice the device's largest window).
    pub fn read(
        &mut self,
        offset: u64,
        len: u64,
        clock: Clock,
        off_now: bool,
        guarding: bool,
        ahead: impl FnOnce() -> u64,
    ) -> Step {
        let end = offset.saturating_add(len);
        let jump = self
            .last_end
            .is_some_and(|e| offset >= e.saturating_add(self.page));
        self.last_end = Some(end);
        self.look.0 += 1;
        self.look.1 += u32::from(jump);
        if self.look.0 >= WALK_READS {
            self.walk = self.look.1 >= WALK_JUMPS;
            self.look = (0, 0);
        }
        self.wait = self.wait.saturating_sub(1);
        if self.off() && !off_now {
            // The hooks saw a stream and turned readahead back on.
            let timing = matches!(self.phase, Phase::Off { .. });
            self.give_up();
            return Step {
                time: timing.then_some(false),
                ..Step::default()
            };
        }
        match self.phase {
            Phase::Idle if self.walk && self.wait == 0 => {
                self.phase = Phase::On { from: clock };
                // The stream is judged afresh; what a read without the
                // kernel's readahead costs is kept from the trials before.
                self.stream = Sum::default();
                Step {
                    time: Some(true),
                    ..Step::default()
                }
            }
            Phase::On { .. } if !self.walk => {
                self.phase = Phase::Idle;
                Step {
                    time: Some(false),
                    ..Step::default()
                }
            }
            Phase::On { from } => self.on_block(from, clock, end, ahead),
            Phase::Off { .. } if guarding => {
                // The hooks still keep the reader from the kernel's
                // stream: the transition, not yet reads without it.
                self.phase = Phase::Off {
                    from: clock,
                    settle: true,
                };
                Step::default()
            }
            Phase::Off { from, settle } => self.off_block(from, settle, clock, end, ahead),
            _ => Step::default(),
        }
    }

    /// With readahead on: a block ended? Judge the stream once long enough.
    fn on_block(
        &mut self,
        from: Clock,
        clock: Clock,
        end: u64,
        ahead: impl FnOnce() -> u64,
    ) -> Step {
        let Some((n, ns, streamed)) = block(from, clock) else {
            return Step::default();
        };
        if streamed {
            self.stream.add(ns, n);
        } else {
            self.miss.add(ns, n);
        }
        self.phase = Phase::On { from: clock };
        if self.stream.reads < STREAM_READS {
            return Step::default();
        }
        let misses_as_slow = !self.force
            && self.miss.reads >= BLOCK_READS
            && self.miss.mean() * GAIN.1 > self.stream.mean() * GAIN.0;
        if misses_as_slow && self.stream.reads < STREAM_MAX {
            // Not yet: the stream's mean is judged again at every block.
            return Step::default();
        }
        if misses_as_slow {
            // Each read waiting for its own is no better than the stream.
            self.phase = Phase::Idle;
            self.retry_later();
            return Step {
                time: Some(false),
                ..Step::default()
            };
        }
        self.phase = Phase::Off {
            from: clock,
            settle: true,
        };
        self.off = Sum::default();
        self.drops = 0;
        Step {
            time: None,
            advise: Some(Advice::Random),
            drop: Some(self.ahead_of(end, ahead)),
        }
    }

    /// Without readahead: a block ended? Judge once [`OFF_READS`] are in.
    fn off_block(
        &mut self,
        from: Clock,
        settle: bool,
        clock: Clock,
        end: u64,
        ahead: impl FnOnce() -> u64,
    ) -> Step {
        let Some((n, ns, streamed)) = block(from, clock) else {
            return Step::default();
        };
        if streamed && self.drops < DROPS {
            // The kernel still streams: a marked folio escaped the drop
            // (one being read cannot be dropped). Again, and settle again.
            self.drops += 1;
            self.phase = Phase::Off {
                from: clock,
                settle: true,
            };
            return Step {
                drop: Some(self.ahead_of(end, ahead)),
                ..Step::default()
            };
        }
        if !settle {
            self.off.add(ns, n);
        }
        self.phase = Phase::Off {
            from: clock,
            settle: false,
        };
        if self.off.reads < OFF_READS {
            return Step::default();
        }
        self.trials += 1;
        let keep = self.force || self.off.mean() * KEEP.1 <= self.stream.mean() * KEEP.0;
        self.outcome = Some(Outcome {
            on_ns: self.stream.mean(),
            off_ns: self.off.mean(),
            off: keep,
            trials: self.trials,
        });
        if keep {
            self.phase = Phase::Kept;
            Step {
                time: Some(false),
                ..Step::default()
            }
        } else {
            // What a read without readahead costs, measured: the next
            // stream is held to it before off is tried again.
            self.miss = self.off;
            self.phase = Phase::Idle;
            self.retry_later();
            Step {
                time: Some(false),
                advise: Some(Advice::Normal),
                drop: None,
            }
        }
    }

    /// The bytes the kernel may have read ahead of a read that ended at
    /// `end`: from the next page, `ahead()` of them.
    fn ahead_of(&self, end: u64, ahead: impl FnOnce() -> u64) -> (u64, u64) {
        let from = end.next_multiple_of(self.page);
        (from, from.saturating_add(ahead()))
    }

    /// Readahead is on again, by the hooks: the trial ends, to be tried
    /// again later.
    fn give_up(&mut self) {
        self.phase = Phase::Idle;
        self.retry_later();
        if let Some(o) = self.outcome.as_mut() {
            o.off = false;
        }
    }

    fn retry_later(&mut self) {
        self.wait = self.backoff;
        self.backoff = self.backoff.saturating_mul(2);
    }
}

/// A block of at least [`BLOCK_READS`] timed reads from `from` to
/// `clock`, if it is complete: its reads, their nanoseconds, and whether
/// the kernel streamed it (a quarter of them or more from the cache).
fn block(from: Clock, clock: Clock) -> Option<(u64, u64, bool)> {
    let n = clock.reads.saturating_sub(from.reads);
    let streamed = clock.fast.saturating_sub(from.fast) * 4 >= n;
    (n >= BLOCK_READS).then(|| (n, clock.ns.saturating_sub(from.ns), streamed))
}

#[cfg(test)]
mod tests;
