//! How many GETs an engine keeps in flight: the bandwidth-delay product
//! it measures, not a fixed number.
//!
//! A reader of small ranges from a store far away needs many requests in
//! flight to use its bandwidth: by Little's law, rate × first-byte time ÷
//! the bytes of one request. On the `s3` profile (30 ms, 250 MB/s) a
//! stride of 64 KiB runs needs about 115; with the engine's fixed 64 it
//! ran at 140 MB/s at best. Arrow's `CacheOptions::MakeFromNetworkMetrics`
//! sizes its requests from the same two figures, given by the caller;
//! here they are measured as the GETs complete, the way BBR sizes a TCP
//! window: the best delivery rate seen over a window of a few round
//! trips, times the least first-byte time seen, is what the path holds;
//! the engine keeps [`GAIN`] times that in flight, in requests of the
//! mean size so far. While the depth is what limits the rate, the rate
//! follows the depth and the depth doubles each window; once the path is
//! full the rate stops growing and so does the depth.
//!
//! The depth starts at the engine's configured one and only grows, to at
//! most [`GROWTH`] times it: a request waiting for a permit has its
//! buffer already (the window it belongs to was admitted by the cache),
//! so a deeper queue costs the store requests, never memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The requests in flight are this many times the measured
/// bandwidth-delay product (two, BBR's window gain): at one, a request's
/// own transfer time, the server's queueing and the rate's measurement
/// error all leave the path idle part of the time.
pub(crate) const GAIN: f64 = 2.0;

/// The depth grows to at most this many times the configured one (four:
/// 256 GETs from the default 64, enough for 64 KiB requests at 500 MB/s
/// and 30 ms).
pub(crate) const GROWTH: usize = 4;

/// The shortest window over which a delivery rate is measured (the
/// rounding of a timer, a burst of completions, would make a shorter one
/// meaningless); it is at least two first-byte times otherwise.
const MIN_WINDOW: Duration = Duration::from_millis(10);

/// The engine's requests in flight: permits, and what sizes their number.
pub(crate) struct Depth {
    permits: Arc<Semaphore>,
    /// Permits granted so far (the depth now).
    granted: AtomicUsize,
    /// The most it may grow to.
    cap: usize,
    meter: Mutex<Meter>,
}

/// What the completed GETs showed.
struct Meter {
    /// Start of the window being measured, and its bytes so far.
    since: Instant,
    bytes: u64,
    /// The best delivery rate of a window, bytes per second.
    best_rate: f64,
    /// The least first-byte time seen.
    first_byte: Option<Duration>,
    /// GETs completed and their bytes (the mean request).
    gets: u64,
    get_bytes: u64,
}

impl Depth {
    /// `depth` requests in flight to begin with, growing to at most
    /// [`GROWTH`] times that.
    pub(crate) fn new(depth: usize) -> Depth {
        let depth = depth.max(1);
        Depth {
            permits: Arc::new(Semaphore::new(depth)),
            granted: AtomicUsize::new(depth),
            cap: depth.saturating_mul(GROWTH),
            meter: Mutex::new(Meter {
                since: Instant::now(),
                bytes: 0,
                best_rate: 0.0,
                first_byte: None,
                gets: 0,
                get_bytes: 0,
            }),
        }
    }

    /// The depth now.
    pub(crate) fn now(&self) -> usize {
        self.granted.load(Ordering::Relaxed)
    }

    /// Waits for a place among the requests in flight.
    pub(crate) async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        // The semaphore is never closed: `None` cannot happen, and a
        // request without a permit would only run one more at once.
        self.permits.clone().acquire_owned().await.ok()
    }

    /// A GET of `bytes` completed, its first byte `first_byte` after it was
    /// sent: measures, and grows the depth where the path holds more.
    pub(crate) fn completed(&self, bytes: u64, first_byte: Duration) {
        let want = {
            let mut m = self.meter.lock().unwrap_or_else(|p| p.into_inner());
            m.record(bytes, first_byte)
        };
        if let Some(want) = want {
            self.grow(want);
        }
    }

    /// Grows the depth to `want` requests (at most the cap); never shrinks it.
    pub(crate) fn grow(&self, want: usize) {
        let want = want.min(self.cap);
        let granted = self.granted.load(Ordering::Relaxed);
        if want > granted
            && self
                .granted
                .compare_exchange(granted, want, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.permits.add_permits(want - granted);
        }
    }
}

impl Meter {
    /// Counts a completed GET; at the end of a window, the depth the
    /// measurements ask for.
    fn record(&mut self, bytes: u64, first_byte: Duration) -> Option<usize> {
        self.first_byte = Some(self.first_byte.map_or(first_byte, |f| f.min(first_byte)));
        self.bytes += bytes;
        self.gets += 1;
        self.get_bytes += bytes;
        let latency = self.first_byte?;
        let elapsed = self.since.elapsed();
        if elapsed < (2 * latency).max(MIN_WINDOW) {
            return None;
        }
        let rate = self.bytes as f64 / elapsed.as_secs_f64();
        self.best_rate = self.best_rate.max(rate);
        self.since = Instant::now();
        self.bytes = 0;
        let mean = (self.get_bytes / self.gets).max(1) as f64;
        let want = GAIN * self.best_rate * latency.as_secs_f64() / mean;
        Some(want.ceil().min(usize::MAX as f64) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A meter whose window started `ago` and whose least first byte is
    /// `latency`.
    fn meter(ago: Duration, latency: Duration) -> Meter {
        Meter {
            since: Instant::now() - ago,
            bytes: 0,
            best_rate: 0.0,
            first_byte: Some(latency),
            gets: 0,
            get_bytes: 0,
        }
    }

    #[test]
    fn the_depth_asked_for_is_gain_times_rate_times_latency_over_the_mean_request() {
        // A window of 100 ms (a little more by the time it is read), 64
        // GETs of 64 KiB: 41.9 MB/s; 30 ms of first byte holds 1.26 MB,
        // 19.2 requests; twice that, rounded up, is 39 (38 if the test
        // took more than 1 ms).
        let mut m = meter(Duration::from_millis(100), Duration::from_millis(30));
        (m.bytes, m.gets, m.get_bytes) = (63 << 16, 63, 63 << 16);
        let got = m
            .record(64 << 10, Duration::from_millis(30))
            .expect("a window of 100 ms against 60 ms is over");
        assert!((38..=39).contains(&got), "{got}");
        assert_eq!(m.bytes, 0, "a new window begins");
    }

    #[test]
    fn no_depth_is_asked_for_within_a_window() {
        let mut m = meter(Duration::ZERO, Duration::from_millis(30));
        assert_eq!(m.record(1 << 20, Duration::from_millis(30)), None);
        assert_eq!(m.bytes, 1 << 20);
    }

    #[test]
    fn the_depth_grows_to_what_is_asked_and_never_past_its_cap() {
        let d = Depth::new(4);
        assert_eq!(d.now(), 4);
        // A window of 1 s that delivered 1 GB in 1 MiB GETs at 30 ms: 57
        // requests asked, capped at 4 × 4.
        {
            let mut m = d.meter.lock().unwrap();
            m.since = Instant::now() - Duration::from_secs(1);
            m.bytes = 1_000_000_000 - (1 << 20);
            m.gets = 999;
            m.get_bytes = 999 << 20;
        }
        d.completed(1 << 20, Duration::from_millis(30));
        assert_eq!(d.now(), 16);
        assert_eq!(d.permits.available_permits(), 16);
        // A slower window asks for less: the depth stays.
        {
            let mut m = d.meter.lock().unwrap();
            m.since = Instant::now() - Duration::from_secs(1);
            m.bytes = 0;
        }
        d.completed(1 << 10, Duration::from_millis(30));
        assert_eq!(d.now(), 16);
        assert_eq!(d.permits.available_permits(), 16);
    }

    #[test]
    fn a_path_that_is_full_stops_the_growth() {
        // 4 in flight of 64 KiB at 30 ms: 8.7 MB/s; gain 2 asks for 8.
        let d = Depth::new(4);
        {
            let mut m = d.meter.lock().unwrap();
            m.since = Instant::now() - Duration::from_millis(300);
            m.bytes = 40 * 65536 - 65536;
            m.gets = 39;
            m.get_bytes = 39 * 65536;
        }
        d.completed(65536, Duration::from_millis(30));
        assert_eq!(d.now(), 8);
    }
}
