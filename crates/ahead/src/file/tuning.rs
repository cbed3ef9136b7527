//! What the window tuner chose, for callers ([`Engine::readahead_tuning`];
//! the tuner is `ra::tune::WindowTuner`).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::engine::{EngineConfig, Shared};
use super::Engine;
use crate::ra::tune::WindowTuner;

/// The largest window the tuner tries ([`EngineConfig::readahead_tuning`]):
/// 64 MiB, sixteen times the default.
pub const TUNE_MAX_READAHEAD: u64 = 64 << 20;

/// The tuner of an engine of `frames` frames whose windows start at
/// `start` pages, if `config` asks for one and the budget holds a larger
/// window. Its ceiling: a sixteenth of the cache (two windows in flight
/// are an eighth of it, and a scan's ring stays within a quarter,
/// `Planner::ring_for`), what the reads in flight can carry, and
/// [`TUNE_MAX_READAHEAD`].
pub(super) fn tuner(
    config: &EngineConfig,
    frames: u64,
    start: u64,
    max_io_pages: usize,
) -> Option<Mutex<WindowTuner>> {
    let page = config.page_size;
    let ceiling = (frames / 16)
        .min(config.depth as u64 * max_io_pages as u64)
        .min(TUNE_MAX_READAHEAD / page);
    (config.readahead_tuning && ceiling >= 2 * start)
        .then(|| Mutex::new(WindowTuner::new(page, start, ceiling)))
}

impl Shared {
    /// The read submitted `at` (what [`Shared::submitted`] returned)
    /// completed with `result`; `speculative`: it was readahead, which
    /// the window tuner times.
    pub(super) fn completed(
        &self,
        device: u64,
        at: (u64, u64),
        result: &io::Result<usize>,
        speculative: bool,
    ) {
        let now = self.now_ns();
        let bytes = result.as_ref().map_or(0, |&n| n as u64);
        if let Ok(mut l) = self.learner.lock() {
            if let Some(l) = l.of(device) {
                l.completed(at.0, at.1, now, bytes);
            }
        }
        if let (true, Some(t)) = (speculative, &self.tuner) {
            let counts = || {
                let g = self.cache.lock();
                (g.totals.late, g.totals.evicted_before_use)
            };
            if let Some(w) = t
                .lock()
                .ok()
                .and_then(|mut t| t.completed(now, at.0, bytes, counts))
            {
                self.ra_window.store(w, Ordering::Relaxed);
            }
        }
    }

    /// Direct files' largest readahead window now, in pages.
    pub(super) fn ra_window(&self) -> u64 {
        self.ra_window.load(Ordering::Relaxed)
    }
}

/// What the window tuner chose ([`Engine::readahead_tuning`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ReadaheadTuning {
    /// The largest window now, in bytes.
    pub window: u64,
    /// The window the engine started with, in bytes.
    pub start: u64,
    /// The largest it may try, in bytes.
    pub ceiling: u64,
    /// Whether it has stopped trying larger windows.
    pub settled: bool,
    /// Its samples of the start window, and its doublings, in order.
    pub steps: Vec<TuneSample>,
}

/// One of [`ReadaheadTuning::steps`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct TuneSample {
    /// The window, in bytes.
    pub window: u64,
    /// Bytes of readahead per second it read.
    pub bytes_per_sec: f64,
    /// For a doubling, the rate it was held to: the better of the window
    /// before it, measured just before and just after it. 0 for the start
    /// window's own samples.
    pub against: f64,
    /// How often per window a reader waited for pages readahead had asked
    /// for (a window too small for the time its reads take waits about
    /// once a window).
    pub late: f64,
    /// Whether it was kept.
    pub kept: bool,
}

impl Engine {
    /// Direct files' largest readahead window now, in bytes: the
    /// configured one unless the tuner grew it
    /// ([`EngineConfig::readahead_tuning`]).
    pub fn readahead_window(&self) -> u64 {
        self.shared.ra_window() * self.shared.config.page_size
    }

    /// What the window tuner measured and chose so far; `None` when the
    /// window is not tuned (a window was set, or the budget holds no
    /// larger one).
    pub fn readahead_tuning(&self) -> Option<ReadaheadTuning> {
        let t = self.shared.tuner.as_ref()?.lock().ok()?;
        let page = self.shared.config.page_size;
        Some(ReadaheadTuning {
            window: t.window() * page,
            start: self.shared.max_ra_pages * page,
            ceiling: t.ceiling() * page,
            settled: t.settled(),
            steps: t
                .steps()
                .iter()
                .map(|s| TuneSample {
                    window: s.window_pages * page,
                    bytes_per_sec: s.bytes_per_sec,
                    against: s.against,
                    late: s.late,
                    kept: s.kept,
                })
                .collect(),
        })
    }
}
