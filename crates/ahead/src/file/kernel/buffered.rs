//! The Buffered mode's own parts: the `RWF_NOWAIT` probe and how often
//! it is tried (a smoothed hit ratio per file), and the readahead hints
//! sent to the kernel from a helper thread.

use super::*;

/// The weight of each new probe in a file's smoothed hit ratio: 1/8, the
/// gain TCP gives each new sample of its smoothed round-trip time (RFC
/// 6298). From the optimistic start (1.0), 18 misses in a row take a file
/// below [`PROBE_STOP_RATIO`].
pub(in crate::file) const PROBE_WEIGHT: f64 = 1.0 / 8.0;

/// Below this smoothed hit ratio a file's reads go straight to a blocking read:
/// the probe would cost a system call and find nothing nine times in ten. The
/// non-blocking buffered reads series kept "fast reads" only for files with a
/// good hit ratio without giving a figure; 10% is where a probe (about 1 µs on
/// a miss) stops paying for itself against a 100 µs device read saved once in
/// ten.
pub(in crate::file) const PROBE_STOP_RATIO: f64 = 0.10;

/// While a file is not probed, every this-many-th read probes anyway, so a
/// file that becomes cached is noticed within a few dozen reads (3% of reads
/// spent probing a cold file).
pub(in crate::file) const REPROBE_EVERY: u32 = 32;

/// Probes in a row that served their whole read, after which a file's
/// blocking reads go straight to a plain `pread` (no probe): where every
/// read is served from the kernel's cache, the probe only adds what
/// `preadv2` costs over `pread` and its own counting. A `perf` profile of
/// cached 4 KiB random reads put the readv path `RWF_NOWAIT` needs at
/// 8.6% of the time against 5.7% for `pread`'s path, and the probe's own
/// work at 3.5% (docs/bench.md). 64: the kernel's default readahead
/// window is 32 pages, so this is more than a window's worth of reads
/// found cached one after the other.
pub(in crate::file) const TRUST_AFTER: u32 = 64;

/// While a file is trusted, every this-many-th read still probes, so a
/// file that stops being cached is noticed within this many reads (the
/// first probe that misses ends the trust); the reads before it block in
/// the kernel as a plain `pread` does, with the kernel's readahead.
pub(in crate::file) const TRUST_PROBE_EVERY: u32 = 16;

/// Fixed-point scale of the hit ratio.
pub(super) const RATIO_ONE: u32 = 1 << 16;

/// Hints for the helper thread: `(offset, len)` byte runs of one file.
pub(in crate::file) struct Hint {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) runs: Vec<(u64, u64)>,
}

/// Starts the thread that issues an engine's kernel hints. It ends when the
/// engine (the last sender) is gone.
pub(in crate::file) fn start_hinter() -> Option<Sender<Hint>> {
    let (tx, rx) = channel::<Hint>();
    std::thread::Builder::new()
        .name("ahead-hints".into())
        .spawn(move || {
            for h in rx {
                for (offset, len) in h.runs {
                    let _ = sys::fadvise(h.fd.as_fd(), offset, len, sys::Advice::WillNeed);
                }
            }
        })
        .ok()?;
    Some(tx)
}

impl KernelFile {
    /// Whether this blocking read may skip the probe: Buffered mode, the
    /// file's last [`TRUST_AFTER`] probes all hit, the policy not waiting
    /// for cached reads (a lookahead marker or hinted pages out), and not
    /// the [`TRUST_PROBE_EVERY`]-th read. The streak is a heuristic kept
    /// with plain loads and stores: two threads may count one read.
    pub(super) fn trusted(&self) -> bool {
        if self.mode != Mode::Buffered || self.wants_cached.load(Ordering::Relaxed) {
            return false;
        }
        let s = self.streak.load(Ordering::Relaxed);
        if s < TRUST_AFTER {
            return false;
        }
        self.streak.store(s.wrapping_add(1), Ordering::Relaxed);
        !s.is_multiple_of(TRUST_PROBE_EVERY)
    }

    /// Whether this read should be tried with RWF_NOWAIT first.
    pub(super) fn should_probe(&self) -> bool {
        if self.mode != Mode::Buffered || !self.nowait() {
            return false;
        }
        let ratio = self.ratio.load(Ordering::Relaxed) as f64 / RATIO_ONE as f64;
        if ratio >= PROBE_STOP_RATIO {
            return true;
        }
        let n = self.skipped.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= REPROBE_EVERY {
            self.skipped.store(0, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Folds one probe's outcome into the smoothed hit ratio.
    pub(super) fn record(&self, hit: bool) {
        let old = self.ratio.load(Ordering::Relaxed) as f64;
        let sample = if hit { RATIO_ONE as f64 } else { 0.0 };
        let new = old + PROBE_WEIGHT * (sample - old);
        self.ratio.store(new.round() as u32, Ordering::Relaxed);
    }

    /// The probe: reads what the kernel has cached of `buf.len()` bytes at
    /// `offset` without waiting for the device. Returns the bytes served.
    pub(super) fn probe(&self, buf: &mut [u8], offset: u64) -> usize {
        if buf.is_empty() || !self.should_probe() {
            return 0;
        }
        // One probe in PROBE_TIMED_EVERY is timed, and counts for all of
        // them: two clock reads per probe were 3% of a cached 16 KiB read.
        let timed = self
            .counters
            .probes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PROBE_TIMED_EVERY);
        let t = timed.then(Instant::now);
        let n = match sys::pread_flags(self.fd.as_fd(), buf, offset, libc::RWF_NOWAIT) {
            Ok(n) => n,
            Err(e) if unsupported(&e) => {
                // The file system refuses the flag after all.
                self.nowait.store(false, Ordering::Relaxed);
                0
            }
            // EAGAIN: not cached. A real error is found again, and
            // reported, by the blocking read.
            Err(_) => 0,
        };
        let hit = n == buf.len();
        self.record(hit);
        let streak = if hit {
            self.streak.load(Ordering::Relaxed).saturating_add(1)
        } else {
            0
        };
        self.streak.store(streak, Ordering::Relaxed);
        add(
            if hit {
                &self.counters.probe_hits
            } else {
                &self.counters.probe_misses
            },
            1,
        );
        add(&self.counters.inline_bytes, n as u64);
        if let Some(t) = t {
            add(&self.counters.inline_ns, nanos(t) * PROBE_TIMED_EVERY);
        }
        n
    }

    /// Feeds a request to the readahead policy and sends the hints it
    /// decides to the helper thread. As in the kernel's on-demand
    /// readahead, the policy is consulted only at misses and lookahead
    /// markers: a request the probe served whole (`cached`) that carries no
    /// marker costs nothing more.
    pub(super) fn hint(&self, offset: u64, len: usize, cached: bool) {
        let (Some(h), Some(tx)) = (&self.hints, &self.hinter) else {
            return;
        };
        let end = offset + len as u64;
        let sequential = self.last_end.swap(end, Ordering::Relaxed) == offset;
        if cached && !self.wants_cached.load(Ordering::Relaxed) {
            // No marker and no hint is out: a hit is no news to the
            // policy (and takes no lock).
            return;
        }
        let mut runs = Vec::new();
        let pages = {
            let mut g = h.lock().unwrap_or_else(|p| p.into_inner());
            let pages = g.request(offset, len as u64, cached, sequential, &mut runs);
            self.wants_cached
                .store(g.wants_cached_requests(), Ordering::Relaxed);
            pages
        };
        if runs.is_empty() {
            return;
        }
        add(&self.counters.hints, runs.len() as u64);
        add(&self.counters.hinted_pages, pages);
        let _ = tx.send(Hint {
            fd: self.fd.clone(),
            runs,
        });
    }
}
