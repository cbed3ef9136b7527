//! What a device charges, learned from the reads it serves
//! ([`DeviceCost`]), so that "reading through is cheaper" can be decided
//! from the device at hand and not from a model of one. The Direct engine
//! learns it from its files' reads, one learner per device ([`Devices`]),
//! and reports it ([`crate::Engine::device_cost`], `ahead read --stats`).
//! The policies decide by it where
//! [`crate::EngineConfig::learned_costs`] asks, which is off by default:
//! on this machine's capped profiles the policies' defaults already read
//! through what the learned figures would, and the learned figures'
//! margin read a 4-page stride as runs 1.13× slower than reading it
//! through (docs/never-worse.md).
//!
//! The learner is told when each read is submitted and when it completes
//! (times in nanoseconds from any fixed origin, the read's bytes, how many
//! reads were in flight when it was submitted) and keeps three figures,
//! the ones a capped or queued device is described by:
//!
//! * **latency**: the least time a small read (at most `SMALL_PAGES`)
//!   submitted alone took, over the last `LATENCY_WINDOW` such reads:
//!   the device's own latency, without queueing;
//! * **bandwidth**: the median bytes per second of busy time (time with at
//!   least one read in flight) of the last `RATE_WINDOW` intervals of at
//!   least `INTERVAL_NS` and `INTERVAL_READS` reads that averaged at least
//!   `LARGE_PAGES` (small reads are held to the request rate, and say
//!   nothing of the bandwidth) with at least `MIN_DEPTH` reads in flight on
//!   average over the interval's busy time;
//! * **request rate**: the median reads per second of busy time of the
//!   last such intervals whose reads averaged at most `SMALL_PAGES` (a
//!   rate of large reads says nothing of what one more request costs).
//!
//! Each figure is known once `MIN_SAMPLES` intervals gave it. Medians, not
//! maxima: a cgroup throttle lets a burst through after an idle spell
//! (0.1–0.5 s here), and the most seen was then 4–5 times the cap (96,582
//! small reads a second under a cap of 20,000). Intervals long enough to
//! hold two of the throttle's dispatch slices: the throttle passes a
//! slice's share at the disk's pace and then holds every read until the
//! next slice, about 100 ms later here, so intervals of 5 ms were either
//! all burst (1.2–2.5 GB/s under a cap of 200 MiB/s) or all wait (90
//! MB/s), and their median fell on either side from run to run.
//! A reader alone (one read in flight) measures its own latency, not what
//! the device serves at once, so such intervals teach no rate.
//!
//! From them, as the simulator's capped model derives its costs from its
//! caps: one more request holds the device bandwidth ÷ rate bytes
//! (`request_pages`); a reader waits the latency, or the rate's interval
//! if longer (`latency_pages`, in pages the bandwidth passes meanwhile);
//! and the device serves rate × latency requests at once, plus one
//! (`parallelism`, Little's law). Until all three are known
//! [`CostLearner::cost`] is `None`, and the policies use their measured
//! defaults.

use super::DeviceCost;

/// A read of at most this many pages is small: its time is the device's
/// latency, not its bandwidth (16 KiB of 4 KiB pages).
pub(crate) const SMALL_PAGES: u64 = 4;
/// A read of at least this many pages on average makes an interval's
/// bytes per second count as bandwidth (64 KiB of 4 KiB pages).
pub(crate) const LARGE_PAGES: u64 = 16;
/// The latency is the least of the last this many small reads submitted
/// alone: enough to find the device's own time among queued ones, few
/// enough to follow a device that slows down.
pub(crate) const LATENCY_WINDOW: usize = 64;
/// The least busy time an interval counts rates over: 250 ms, two and a
/// half of a cgroup throttle's dispatch slices (about 100 ms on this
/// kernel, measured: bursts of about 5 ms at the disk's pace, then a wait
/// of about 90 ms). A device that needs no throttle is measured as well
/// over long intervals as short ones.
pub(crate) const INTERVAL_NS: u64 = 250_000_000;
/// The rates are the medians of the last this many intervals of each kind.
pub(crate) const RATE_WINDOW: usize = 15;
/// A rate is known once this many intervals gave it: one interval may be a
/// throttle's burst after an idle spell, and the median of three is not.
pub(crate) const MIN_SAMPLES: usize = 3;
/// An interval counts for the rates only with at least this many reads in
/// flight on average over its busy time: a reader alone keeps one, and its
/// pace is its latency's, not what the device serves.
pub(crate) const MIN_DEPTH: f64 = 2.0;
/// The fewest reads an interval counts rates over.
pub(crate) const INTERVAL_READS: u64 = 32;

/// Learns a device's [`DeviceCost`] from its reads' times.
#[derive(Clone, Debug)]
pub struct CostLearner {
    page: u64,
    in_flight: u64,
    /// Reads completed since it was made.
    told: u64,
    busy_since: u64,
    /// The interval being counted: busy time closed so far, reads and
    /// bytes completed.
    busy_ns: u64,
    reads: u64,
    bytes: u64,
    /// Reads in flight times nanoseconds over the interval, and the time
    /// of the last submission or completion: the interval's mean depth.
    depth_area: u128,
    last_event: u64,
    /// The last small reads' times, a ring.
    small: [u64; LATENCY_WINDOW],
    small_count: usize,
    /// Bytes and reads per second of the last intervals of large and of
    /// small reads.
    bandwidth: Vec<f64>,
    rate: Vec<f64>,
    /// The costs as last derived (when a figure changed).
    cost: Option<DeviceCost>,
}

/// The most devices an engine learns at once ([`Devices`]): more are
/// read with the policies' defaults.
pub const MAX_DEVICES: usize = 16;

/// One [`CostLearner`] per device (`st_dev`, or `st_rdev` for a block
/// device read as a file): two files of one engine on different devices
/// teach each its own.
#[derive(Debug)]
pub struct Devices {
    page: u64,
    learners: Vec<(u64, CostLearner)>,
}

impl Devices {
    /// Learners for reads in pages of `page` bytes, none yet.
    pub fn new(page: u64) -> Devices {
        Devices {
            page,
            learners: Vec::new(),
        }
    }

    /// The learner of `device`, made at its first read (`None` past
    /// [`MAX_DEVICES`]).
    pub fn of(&mut self, device: u64) -> Option<&mut CostLearner> {
        let i = match self.learners.iter().position(|(d, _)| *d == device) {
            Some(i) => i,
            None if self.learners.len() < MAX_DEVICES => {
                self.learners.push((device, CostLearner::new(self.page)));
                self.learners.len() - 1
            }
            None => return None,
        };
        Some(&mut self.learners[i].1)
    }

    /// What `device` charges as learned so far.
    pub fn cost(&self, device: u64) -> Option<DeviceCost> {
        let l = self.learners.iter().find(|(d, _)| *d == device)?;
        l.1.cost()
    }

    /// What the device with the most reads so far charges.
    pub fn busiest(&self) -> Option<DeviceCost> {
        let l = self.learners.iter().max_by_key(|(_, l)| l.told)?;
        l.1.cost()
    }
}

/// Appends `x` to `ring`, holding the last [`RATE_WINDOW`].
fn push(ring: &mut Vec<f64>, x: f64) {
    if ring.len() == RATE_WINDOW {
        ring.remove(0);
    }
    ring.push(x);
}

fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied()
}

impl CostLearner {
    /// A learner for reads in pages of `page` bytes.
    pub fn new(page: u64) -> CostLearner {
        CostLearner {
            page: page.max(1),
            in_flight: 0,
            told: 0,
            busy_since: 0,
            busy_ns: 0,
            reads: 0,
            bytes: 0,
            depth_area: 0,
            last_event: 0,
            small: [0; LATENCY_WINDOW],
            small_count: 0,
            bandwidth: Vec::with_capacity(RATE_WINDOW),
            rate: Vec::with_capacity(RATE_WINDOW),
            cost: None,
        }
    }

    /// A read was submitted at `now`; returns how many reads are in
    /// flight with it (pass it to [`CostLearner::completed`]).
    pub fn submitted(&mut self, now: u64) -> u64 {
        if self.in_flight == 0 {
            self.busy_since = now;
        }
        self.count_depth(now);
        self.in_flight += 1;
        self.in_flight
    }

    /// The read submitted at `submitted` with `depth` in flight (what
    /// [`CostLearner::submitted`] returned) completed at `now` with
    /// `bytes`. A failed read is told with 0 bytes: it counts as a request.
    pub fn completed(&mut self, submitted: u64, depth: u64, now: u64, bytes: u64) {
        if self.in_flight == 0 {
            // Not told of its submission: nothing to learn.
            return;
        }
        self.count_depth(now);
        self.in_flight -= 1;
        self.told += 1;
        if depth == 1 && bytes > 0 && bytes <= SMALL_PAGES * self.page {
            self.small[self.small_count % LATENCY_WINDOW] = now.saturating_sub(submitted).max(1);
            self.small_count += 1;
            if self.small_count.is_multiple_of(8) {
                self.cost = self.derive();
            }
        }
        self.reads += 1;
        self.bytes += bytes;
        if self.in_flight == 0 {
            self.busy_ns += now.saturating_sub(self.busy_since);
        }
        let busy = self.busy_ns
            + if self.in_flight > 0 {
                now.saturating_sub(self.busy_since)
            } else {
                0
            };
        if busy >= INTERVAL_NS && self.reads >= INTERVAL_READS {
            let secs = busy as f64 / 1e9;
            let deep = self.depth_area as f64 / busy as f64 >= MIN_DEPTH;
            if deep && self.bytes >= LARGE_PAGES * self.page * self.reads {
                push(&mut self.bandwidth, self.bytes as f64 / secs);
            }
            if deep && self.bytes <= SMALL_PAGES * self.page * self.reads {
                push(&mut self.rate, self.reads as f64 / secs);
            }
            self.busy_ns = 0;
            self.reads = 0;
            self.bytes = 0;
            self.depth_area = 0;
            self.cost = self.derive();
            if self.in_flight > 0 {
                self.busy_since = now;
            }
        }
    }

    /// Adds the reads in flight since the last event to the interval's
    /// depth, up to `now`.
    fn count_depth(&mut self, now: u64) {
        let since = now.saturating_sub(self.last_event);
        self.depth_area += self.in_flight as u128 * since as u128;
        self.last_event = self.last_event.max(now);
    }

    /// The device's latency as learned: the least of the last small reads
    /// submitted alone, in nanoseconds.
    pub fn latency_ns(&self) -> Option<u64> {
        let n = self.small_count.min(LATENCY_WINDOW);
        // A few samples, so that one lucky read is not the device.
        (n >= 8).then(|| self.small[..n].iter().copied().min().unwrap_or(0))
    }

    /// Bytes per second of busy time in large reads (the median of the
    /// last intervals).
    pub fn bandwidth(&self) -> Option<f64> {
        (self.bandwidth.len() >= MIN_SAMPLES)
            .then(|| median(&self.bandwidth))
            .flatten()
            .filter(|&b| b > 0.0)
    }

    /// Small reads per second of busy time (the median of the last
    /// intervals).
    pub fn rate(&self) -> Option<f64> {
        (self.rate.len() >= MIN_SAMPLES)
            .then(|| median(&self.rate))
            .flatten()
            .filter(|&r| r > 0.0)
    }

    /// The costs, once latency, bandwidth and request rate are known (as
    /// derived when one of them last changed: a copy, no work).
    pub fn cost(&self) -> Option<DeviceCost> {
        self.cost
    }

    fn derive(&self) -> Option<DeviceCost> {
        let latency = self.latency_ns()? as f64 / 1e9;
        let (bw, rate) = (self.bandwidth()?, self.rate()?);
        let page = self.page as f64;
        Some(DeviceCost {
            request_pages: ((bw / rate / page).round() as u64).max(1),
            latency_pages: ((latency.max(1.0 / rate) * bw / page).round() as u64).max(1),
            parallelism: (rate * latency).ceil() as u64 + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device capped at `iops` and `bps` with `latency` (seconds): a
    /// read submitted at `t` is served when the caps have room for it,
    /// and done `latency` after that at the earliest.
    struct Capped {
        iops: f64,
        bps: f64,
        latency: f64,
        free_at: f64,
    }

    impl Capped {
        /// The simulator's `cloud` cap with a latency of 0.5 ms.
        fn cloud() -> Capped {
            Capped {
                iops: 5000.0,
                bps: 200.0 * 1048576.0,
                latency: 0.0005,
                free_at: 0.0,
            }
        }

        fn serve(&mut self, t: f64, bytes: u64) -> f64 {
            let hold = (1.0 / self.iops).max(bytes as f64 / self.bps);
            let start = t.max(self.free_at);
            self.free_at = start + hold;
            (start + hold).max(t + self.latency)
        }
    }

    fn ns(s: f64) -> u64 {
        (s * 1e9) as u64
    }

    /// Reads of `pages` pages, `depth` kept in flight, `n` of them.
    fn drive(
        l: &mut CostLearner,
        d: &mut impl Serve,
        t: &mut f64,
        pages: u64,
        depth: usize,
        n: usize,
    ) {
        let mut out: Vec<(f64, u64, f64)> = Vec::new();
        let mut left = n;
        while left > 0 || !out.is_empty() {
            while out.len() < depth && left > 0 {
                let depth_now = l.submitted(ns(*t));
                let done = d.serve(*t, pages * 4096);
                out.push((*t, depth_now, done));
                left -= 1;
            }
            out.sort_by(|a, b| a.2.total_cmp(&b.2));
            let (sub, dep, done) = out.remove(0);
            *t = t.max(done);
            l.completed(ns(sub), dep, ns(done), pages * 4096);
        }
    }

    /// How many reads of `size` a device serving `per_second` (reads, or
    /// bytes) takes `secs` to serve.
    fn seconds(secs: f64, per_second: f64, size: f64) -> usize {
        (secs * per_second / size) as usize
    }

    /// A reader alone with 200 small reads, then small reads sixteen at a
    /// time for `secs` of a device of `caps` (IOPS, bytes per second),
    /// then 256 KiB reads `depth` at a time for `secs`.
    fn teach(l: &mut CostLearner, d: &mut impl Serve, caps: (f64, f64), secs: f64, depth: usize) {
        let (iops, bps) = caps;
        let mut t = 0.0;
        drive(l, d, &mut t, 1, 1, 200);
        drive(l, d, &mut t, 1, 16, seconds(secs, iops, 1.0));
        drive(l, d, &mut t, 64, depth, seconds(secs, bps, 64.0 * 4096.0));
    }

    fn within(got: u64, want: f64, share: f64) -> bool {
        (got as f64 - want).abs() <= want * share + 1.0
    }

    #[test]
    fn learns_a_capped_volumes_costs_from_its_reads() {
        // The simulator's `cloud` and `fast` caps, and a disk-like latency.
        for (iops, bps, latency) in [
            (5000.0, 200.0 * 1048576.0, 0.0005),
            (20000.0, 400.0 * 1048576.0, 0.000075),
            (3000.0, 125.0 * 1048576.0, 0.004),
        ] {
            let mut d = Capped {
                iops,
                bps,
                latency,
                free_at: 0.0,
            };
            let mut l = CostLearner::new(4096);
            assert_eq!(l.cost(), None);
            // Large reads four at a time.
            teach(&mut l, &mut d, (iops, bps), 1.2, 4);
            let c = l.cost().expect("learned");
            let want_request = bps / iops / 4096.0;
            let want_latency = latency.max(1.0 / iops) * bps / 4096.0;
            let want_par = (iops * latency).ceil() + 1.0;
            assert!(
                within(c.request_pages, want_request, 0.2),
                "{c:?} vs {want_request}"
            );
            assert!(
                within(c.latency_pages, want_latency, 0.2),
                "{c:?} vs {want_latency}"
            );
            assert!(within(c.parallelism, want_par, 0.2), "{c:?} vs {want_par}");
        }
    }

    /// A cgroup throttle as this kernel's behaves: each slice of 100 ms
    /// passes its share of the caps at the disk's own pace (20 µs and 2
    /// GB/s), then holds every read until the next slice.
    struct Sliced {
        iops: f64,
        bps: f64,
        slice: u64,
        reads_left: f64,
        bytes_left: f64,
        dispatched: f64,
        free_at: f64,
    }

    impl Sliced {
        const SLICE: f64 = 0.1;

        fn new(iops: f64, bps: f64) -> Sliced {
            Sliced {
                iops,
                bps,
                slice: u64::MAX,
                reads_left: 0.0,
                bytes_left: 0.0,
                dispatched: 0.0,
                free_at: 0.0,
            }
        }
    }

    /// Drives any device model: a read of `bytes` submitted at `t`
    /// completes at the time returned.
    trait Serve {
        fn serve(&mut self, t: f64, bytes: u64) -> f64;
    }

    impl Serve for Capped {
        fn serve(&mut self, t: f64, bytes: u64) -> f64 {
            Capped::serve(self, t, bytes)
        }
    }

    impl Serve for Sliced {
        fn serve(&mut self, t: f64, bytes: u64) -> f64 {
            let mut at = t.max(self.dispatched);
            loop {
                let k = (at / Self::SLICE) as u64;
                if k != self.slice {
                    self.slice = k;
                    self.reads_left = self.iops * Self::SLICE;
                    self.bytes_left = self.bps * Self::SLICE;
                }
                if self.reads_left >= 1.0 && self.bytes_left >= bytes as f64 {
                    self.reads_left -= 1.0;
                    self.bytes_left -= bytes as f64;
                    break;
                }
                at = (k + 1) as f64 * Self::SLICE;
            }
            self.dispatched = at;
            self.free_at = at.max(self.free_at) + bytes as f64 / 2e9;
            self.free_at + 20e-6
        }
    }

    #[test]
    fn learns_a_throttles_caps_across_its_slices() {
        for (iops, bps) in [(5000.0, 200.0 * 1048576.0), (20000.0, 400.0 * 1048576.0)] {
            let mut d = Sliced::new(iops, bps);
            let mut l = CostLearner::new(4096);
            teach(&mut l, &mut d, (iops, bps), 1.5, 16);
            let c = l.cost().expect("learned");
            let want_request = bps / iops / 4096.0;
            assert!(
                within(c.request_pages, want_request, 0.25),
                "{c:?} vs {want_request}: bandwidth {:?}, rate {:?}",
                l.bandwidth(),
                l.rate()
            );
            let want_latency = bps / iops / 4096.0;
            assert!(
                within(c.latency_pages, want_latency, 0.25),
                "{c:?} vs {want_latency}"
            );
        }
    }

    #[test]
    fn a_reader_alone_teaches_no_rate() {
        let mut d = Capped::cloud();
        let mut l = CostLearner::new(4096);
        let mut t = 0.0;
        drive(&mut l, &mut d, &mut t, 1, 1, 5000);
        drive(&mut l, &mut d, &mut t, 64, 1, 3000);
        assert!(l.latency_ns().is_some());
        assert_eq!((l.rate(), l.bandwidth()), (None, None));
    }

    #[test]
    fn large_reads_alone_teach_no_request_cost() {
        let mut d = Capped::cloud();
        let mut l = CostLearner::new(4096);
        let mut t = 0.0;
        drive(&mut l, &mut d, &mut t, 64, 4, 4000);
        assert!(l.bandwidth().is_some());
        assert_eq!(l.cost(), None, "no rate of small reads, no costs");
    }

    #[test]
    fn small_reads_alone_teach_no_bandwidth() {
        let mut d = Capped::cloud();
        let mut l = CostLearner::new(4096);
        let mut t = 0.0;
        drive(&mut l, &mut d, &mut t, 1, 1, 100);
        drive(&mut l, &mut d, &mut t, 1, 16, 8000);
        assert!(l.rate().is_some() && l.latency_ns().is_some());
        assert_eq!(l.bandwidth(), None);
        assert_eq!(l.cost(), None, "no bandwidth, no costs");
    }

    #[test]
    fn a_completion_it_was_not_told_of_is_ignored() {
        let mut l = CostLearner::new(4096);
        l.completed(0, 1, 1000, 4096);
        assert_eq!(l.latency_ns(), None);
        assert_eq!(l.in_flight, 0);
    }
}
