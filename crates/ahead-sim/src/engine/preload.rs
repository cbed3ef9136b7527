//! `ahead run` in the simulator (`--policy run`): the kernel reads as it
//! does for any program (`ondemand`), and the preload's hints arrive on
//! top. The preload hands the `ahead` policy only some of a program's
//! reads, and this is a model of which, one file read through one
//! descriptor, cold, without `--stats`:
//!
//! * **The shim** (crates/ahead-shim, `fds.rs`) passes on reads that
//!   continue the last one, and the first
//!   [`SHIM_HOLD`](hints::preload::SHIM_HOLD) that do not, and more of
//!   those while they jump at random ([`hints::preload::shim_holds`]); the
//!   next loads the core, which is handed the last of them.
//! * **The core** (crates/ahead-preload, `quiet.rs`) passes over every
//!   read of a file of at most [`SMALL_FILE`] bytes, and reads that
//!   continue the last one except the first [`FORWARD_RUN`] of a run in a
//!   file read otherwise at least twice, and reads of a dense forward
//!   sweep ([`Sweep`]), and most reads of a file the helper has found
//!   nothing to hint for lately ([`hints::preload::muted`]); it holds the
//!   first read it would send, and sends it with the second.
//! * **The helper** (`helper/mod.rs`) gives each read it gets to a
//!   [`Hinter`], flagged sequential where it began at the end of the one
//!   before, and hints what comes back (`POSIX_FADV_WILLNEED`: readahead
//!   with no marker, which the kernel's readahead does not see as its own).
//!
//! The helper's hints go out when it next wakes ([`HELPER_NAP`]). What
//! the model leaves out: the helper's own time, files already cached,
//! several descriptors of one file, and the fork of a process. The numbers
//! are the preload's own ([`ahead::ra::hints::preload`]).

use ahead::ra::hints::preload::{Sweep, FORWARD_RUN, MAX_WINDOW, SMALL_FILE};
use ahead::ra::hints::trial::{self, Advice, Clock, Trial};
use ahead::ra::hints::{self, Hinter};
use ahead::ra::{new_policy, PolicyKind};

/// The real helper, while the program is active, naps a millisecond at a
/// time and takes what the hooks queued meanwhile
/// (crates/ahead-preload/src/helper, `NAP_NS`): a read's hints go out at
/// the next whole millisecond of the simulated clock, together with those
/// of the other reads of that millisecond. Sent as the read was served,
/// the model put short hinted `tail -n` and `limit-desc` programs at
/// about half their real times (seed 54: 13 ms against 30, 18 against 34).
pub(crate) const HELPER_NAP: f64 = 1e-3;

/// A read, as (offset, length) in bytes.
type Read = (u64, u64);

/// What the shim knows of the descriptor before the core is loaded.
#[derive(Debug, Default)]
struct Shim {
    loaded: bool,
    /// Where the last read ended.
    next: u64,
    held: u8,
    last_held: Option<Read>,
    /// The held read before the last.
    before_held: Option<Read>,
    /// A bit for each of the last eight steps between held reads: whether
    /// it continued one of the two before it.
    steps: u8,
}

/// The core's state for the descriptor.
#[derive(Debug, Default)]
struct Core {
    next: u64,
    run: u32,
    jumps: u8,
    sweep: Sweep,
    /// Reads in a row the helper hinted nothing for, and reads counted
    /// while muted ([`hints::preload::muted`]).
    idle: u32,
    muted: u32,
    /// The first read it would have sent, held; `Some(None)` once sent.
    held: Option<Option<Read>>,
}

/// The preload's view of one file read through one descriptor.
pub(crate) struct Preload {
    size: u64,
    page: u64,
    /// Hinted pages not yet read.
    unread: hints::Unread,
    shim: Shim,
    core: Core,
    /// Where the last read the helper got ended.
    helper_end: u64,
    hinter: Hinter,
    /// The trial of the kernel's readahead on a walk
    /// ([`ahead::ra::hints::trial`]; none for a file the program advised
    /// random), the reads timed for it, and how far past a read the
    /// kernel may have read ahead (twice its largest window).
    trial: Option<Trial>,
    clock: Clock,
    window_ahead: u64,
    /// The kernel's readahead is off by the trial.
    ra_off: bool,
    /// Advice the engine is yet to give the kernel's model: random (true)
    /// or normal again, and bytes to drop from the cache. Random ignores
    /// the marks as well: the hooks' guard ends the kernel's stream.
    advice: Option<(bool, Option<(u64, u64)>)>,
    /// The helper hinted the file (no trial from then on).
    hinted: bool,
}

impl Preload {
    /// For a file of `size` bytes in pages of `page` bytes, whose kernel
    /// windows are at most `kernel_window` bytes; `trial`: the kernel's
    /// readahead may be tried off.
    pub(crate) fn new(size: u64, page: u64, kernel_window: u64, trial: bool) -> Preload {
        Preload {
            trial: trial.then(|| Trial::new(page)),
            clock: Clock::default(),
            window_ahead: 2 * kernel_window,
            ra_off: false,
            advice: None,
            hinted: false,
            size,
            page,
            unread: hints::Unread::default(),
            shim: Shim::default(),
            core: Core::default(),
            helper_end: 0,
            hinter: Hinter::new(
                new_policy(PolicyKind::Ahead, hints::config(MAX_WINDOW, page)),
                size,
                page,
            ),
        }
    }

    /// The program read `len` bytes at `offset`: the byte runs the helper
    /// hints for it, appended to `out`.
    pub(crate) fn read(&mut self, offset: u64, len: u64, out: &mut Vec<Read>) {
        let mut sent = [None, None];
        self.gate(offset, len, &mut sent);
        for (at, n) in sent.into_iter().flatten() {
            let sequential = self.helper_end == at;
            self.helper_end = at.saturating_add(n);
            let used = if n > 0 {
                let end = at.saturating_add(n).div_ceil(self.page);
                self.unread.read(at / self.page, end).0
            } else {
                0
            };
            self.trial_step(at, n);
            let before = out.len();
            self.hinter.request(at, n, false, sequential, out);
            self.hinted |= out.len() > before;
            for &(off, len) in &out[before..] {
                self.unread
                    .hinted(off / self.page, (off + len) / self.page, usize::MAX);
            }
            let c = &mut self.core;
            c.idle = if out.len() > before || used > 0 {
                0
            } else {
                c.idle.saturating_add(1)
            };
        }
    }

    /// A read the hooks timed: `ns` for `bytes`.
    pub(crate) fn timed(&mut self, ns: u64, bytes: u64) {
        if self.trial.is_some() {
            self.clock.ns += ns;
            self.clock.reads += 1;
            self.clock.fast += u64::from(trial::fast(ns, bytes));
        }
    }

    /// The advice for the kernel's readahead since last taken, and the
    /// bytes the helper dropped with it.
    pub(crate) fn take_advice(&mut self) -> Option<(bool, Option<(u64, u64)>)> {
        self.advice.take()
    }

    /// The helper's step of the trial for a read it got.
    fn trial_step(&mut self, at: u64, n: u64) {
        let Some(t) = self.trial.as_mut() else { return };
        let ahead = self.window_ahead;
        let step = if self.hinted {
            t.hinted()
        } else {
            t.read(at, n, self.clock, self.ra_off, false, || ahead)
        };
        if let Some(a) = step.advise {
            self.ra_off = a == Advice::Random;
            self.advice = Some((self.ra_off, None));
        }
        if let Some(drop) = step.drop.filter(|_| self.ra_off) {
            self.advice = Some((true, Some(drop)));
        }
    }

    /// Which reads reach the helper for this one: none, it alone, or a
    /// held one before it.
    fn gate(&mut self, offset: u64, len: u64, sent: &mut [Option<Read>; 2]) {
        let end = offset.saturating_add(len);
        let s = &mut self.shim;
        if !s.loaded {
            let from = s.next;
            let forward = s.next == offset;
            s.next = end;
            if forward {
                return;
            }
            if hints::preload::shim_holds(s.held, s.steps) {
                s.held += 1;
                if let Some(prev) = s.last_held {
                    let near = hints::preload::shim_near(self.size);
                    let on = hints::preload::shim_continues((from, 0), offset, len, near)
                        || hints::preload::shim_continues(prev, offset, len, near)
                        || s.before_held
                            .is_some_and(|b| hints::preload::shim_continues(b, offset, len, near));
                    s.steps = (s.steps << 1) | u8::from(on);
                    s.before_held = Some(prev);
                }
                s.last_held = Some((offset, len));
                return;
            }
            s.loaded = true;
            // The core is handed the last held read (`ahead_core_held`).
            if let Some((at, n)) = s.last_held {
                self.core.next = at.saturating_add(n);
                self.core.held = Some(Some((at, n)));
            }
        }
        if self.size <= SMALL_FILE {
            return;
        }
        let c = &mut self.core;
        let follows = c.next == offset;
        c.next = end;
        let sweeps = c.sweep.read(offset, len);
        let pass = if follows {
            let run = c.run;
            c.run += 1;
            run >= FORWARD_RUN || c.jumps < 2
        } else {
            c.run = 0;
            c.jumps = (c.jumps + 1).min(2);
            false
        };
        if self.ra_off && (sweeps || (follows && c.run >= trial::REVERT_RUN)) {
            // The hooks turn the kernel's readahead back on for a stream.
            self.ra_off = false;
            self.advice = Some((false, None));
        }
        if pass || sweeps {
            return;
        }
        if c.idle >= hints::preload::MUTE_AFTER {
            c.muted = c.muted.wrapping_add(1);
            if hints::preload::muted(c.idle, c.muted - 1) {
                return;
            }
        }
        match c.held {
            None => c.held = Some(Some((offset, len))),
            Some(None) => sent[0] = Some((offset, len)),
            Some(Some(h)) => {
                c.held = Some(None);
                *sent = [Some(h), Some((offset, len))];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    fn hinted(p: &mut Preload, reads: impl IntoIterator<Item = Read>) -> Vec<u64> {
        reads
            .into_iter()
            .map(|(at, n)| {
                let mut out = Vec::new();
                p.read(at, n, &mut out);
                out.iter().map(|r| r.1 / PAGE).sum()
            })
            .collect()
    }

    #[test]
    fn a_backward_scan_is_hinted_from_the_shims_ninth_jump() {
        let size = 64 << 20;
        let mut p = Preload::new(size, PAGE, 128 << 10, true);
        let reads = (1..=64).map(|i| (size - i * 8192, 8192));
        let pages = hinted(&mut p, reads);
        // Eight jumps pass without the core; the ninth loads it, and goes
        // to the helper with the eighth (which the core holds as its own
        // first read).
        assert!(pages[..8].iter().all(|&n| n == 0), "{pages:?}");
        assert!(pages[8..].iter().sum::<u64>() >= 64, "{pages:?}");
    }

    #[test]
    fn forward_reads_small_files_and_a_few_jumps_are_never_hinted() {
        let mut p = Preload::new(64 << 20, PAGE, 128 << 10, true);
        let pages = hinted(&mut p, (0..512).map(|i| (i * 65536, 65536)));
        assert!(pages.iter().all(|&n| n == 0));
        let mut p = Preload::new(SMALL_FILE, PAGE, 128 << 10, true);
        let pages = hinted(&mut p, (0..32).rev().map(|i| (i * 4096, 4096)));
        assert!(pages.iter().all(|&n| n == 0));
        // A database's header, then a lookup or two: eight jumps.
        let mut p = Preload::new(64 << 20, PAGE, 128 << 10, true);
        let reads = [
            0,
            24,
            50 << 20,
            30 << 20,
            12 << 20,
            40 << 20,
            8 << 20,
            60 << 20,
            2 << 20,
        ];
        let pages = hinted(&mut p, reads.map(|at| (at, 4096)));
        assert!(pages.iter().all(|&n| n == 0), "{pages:?}");
    }

    #[test]
    fn random_reads_that_hint_nothing_are_muted_and_a_scan_after_them_is_seen() {
        let size = 1 << 30;
        let mut p = Preload::new(size, PAGE, 128 << 10, true);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<Read> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % (size / PAGE)) * PAGE, PAGE)
            })
            .collect();
        hinted(&mut p, random);
        // After MUTE_AFTER reads that hinted nothing, most are not sent.
        assert!(p.core.idle >= hints::preload::MUTE_AFTER, "{}", p.core.idle);
        assert!(
            p.core.muted > 2048,
            "{} reads counted while muted",
            p.core.muted
        );
        // A backward scan that starts now is seen within a cycle, hinted,
        // and hinted to its end: its reads take hinted pages.
        let back: Vec<Read> = (1..=4096).map(|i| (size / 2 - i * PAGE, PAGE)).collect();
        let pages = hinted(&mut p, back);
        let first = pages
            .iter()
            .position(|&n| n > 0)
            .expect("the scan is hinted");
        assert!(
            first < hints::preload::MUTE_CYCLE as usize,
            "first hint at read {first}"
        );
        assert!(
            pages[3000..].iter().any(|&n| n > 0),
            "the scan's end is hinted"
        );
        assert_eq!(p.core.idle, 0);
    }
}
