//! Capped volumes: a fast device behind a bandwidth cap and an IOPS cap,
//! as a cgroup's throttle (`blkio.throttle.*`, `io.max`) and a provisioned
//! cloud volume enforce them.

use super::*;

/// A volume capped in bandwidth and IOPS over a fast device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CappedParams {
    /// Name of the profile.
    pub name: &'static str,
    /// Bandwidth cap, bytes per second.
    pub bps: f64,
    /// Cap on I/Os per second.
    pub iops: f64,
    /// The device's own latency per I/O once let through, seconds.
    pub latency: f64,
    /// The device's own bandwidth, bytes per second.
    pub device_bps: f64,
    /// I/Os the device serves at once.
    pub queue_depth: usize,
    /// The throttle's window, seconds: each window lets through its share
    /// of both caps (bandwidth × window bytes, IOPS × window I/Os) as soon
    /// as they are asked for, and what a window leaves unused is lost.
    pub slice: f64,
}

impl CappedParams {
    /// The device under the caps: this machine's virtio disk with the
    /// host holding the data (what the steady tool warms it to): about
    /// 2 GB/s streaming (docs/measuring.md: 2-2.7 GB/s host-warm), 64
    /// requests at once (the virtio queue), and 55 µs for a 4 KiB read.
    /// The latency was measured three ways (2026-11-26): fio's `psync`
    /// engine reading 4 KiB at random through the page cache (cold,
    /// `fadvise_hint=random`, no cap) took 56-62 µs a read, its own time
    /// included; sqlite3 joins and lookups of the generator
    /// (`scripts/never-worse`) took 40-58 µs a read cold under the cap,
    /// less their warm runs, counted by the cgroup's `io_serviced`; a
    /// table read backwards 4 KiB at a time, 58-78 µs. (It was 75 µs,
    /// from one backward scan: 3.54 s cold and 0.10 s warm for 45,800
    /// reads; replaying the generator's cases with it put 24 of 40
    /// programs' times more than 20% from the real runs.)
    ///
    /// The window is blk-throttle's slice, 100 ms (`HZ / 10`) on a queue
    /// that says it is rotational, as virtio disks do: after a pause,
    /// 1 MiB `O_DIRECT` reads under the `fast` cap read 32-40 MiB at the
    /// device's pace (18-39 ms) and 48-72 MiB in 118-136 ms, the second
    /// window's share let through at 100 ms.
    const DEVICE: CappedParams = CappedParams {
        name: "device",
        bps: f64::INFINITY,
        iops: f64::INFINITY,
        latency: 55e-6,
        device_bps: 2e9,
        queue_depth: 64,
        slice: 0.1,
    };
    /// `ahead bench --device cloud`: a provisioned cloud SSD volume, 200
    /// MiB/s and 5000 IOPS.
    pub const CLOUD: CappedParams = CappedParams {
        name: "cloud",
        bps: (200 << 20) as f64,
        iops: 5000.0,
        ..CappedParams::DEVICE
    };
    /// `small-cloud`: the smallest cloud volumes, 125 MiB/s and 3000 IOPS.
    pub const SMALL_CLOUD: CappedParams = CappedParams {
        name: "small-cloud",
        bps: (125 << 20) as f64,
        iops: 3000.0,
        ..CappedParams::DEVICE
    };
    /// `fast`: a fast volume, 400 MiB/s and 20000 IOPS.
    pub const FAST: CappedParams = CappedParams {
        name: "fast",
        bps: (400 << 20) as f64,
        iops: 20000.0,
        ..CappedParams::DEVICE
    };
}

/// The caps as blk-throttle applies them, in windows of
/// [`CappedParams::slice`], in front of a latency + bandwidth device. The
/// first I/O after a window's length of quiet starts a fresh window;
/// otherwise windows follow one another. An I/O the window's shares cannot
/// take waits for the next window, and the throttle keeps the order in
/// which I/Os came.
#[derive(Clone, Debug)]
pub struct Capped {
    p: CappedParams,
    /// When the current window began (`None` before the first I/O).
    window: Option<f64>,
    /// I/Os and bytes let through in the current window.
    ios: f64,
    bytes: f64,
    /// When the last I/O was let through.
    last: f64,
    /// When the device's own pipe is free.
    pipe_free: f64,
}

impl Capped {
    /// A device with these caps.
    pub fn new(p: CappedParams) -> Capped {
        Capped {
            p,
            window: None,
            ios: 0.0,
            bytes: 0.0,
            last: 0.0,
            pipe_free: 0.0,
        }
    }

    /// When the throttle lets an I/O of `len` bytes asked for at `now`
    /// through, and counts it.
    fn let_through(&mut self, now: f64, len: f64) -> f64 {
        let s = self.p.slice;
        let mut t = now.max(self.last);
        match self.window {
            // Windows follow one another while I/O keeps coming.
            Some(w) if t <= self.last + s => {
                let passed = ((t - w) / s).floor();
                if passed >= 1.0 {
                    self.window = Some(w + passed * s);
                    self.ios = 0.0;
                    self.bytes = 0.0;
                }
            }
            // After a pause (or at the start) a fresh window starts here.
            _ => {
                self.window = Some(t);
                self.ios = 0.0;
                self.bytes = 0.0;
            }
        }
        let (io_share, byte_share) = (self.p.iops * s, self.p.bps * s);
        // An I/O larger than a window's share goes alone in a fresh one.
        while (self.ios + 1.0 > io_share || self.bytes + len > byte_share)
            && (self.ios > 0.0 || self.bytes > 0.0)
        {
            let next = self.window.unwrap_or(t) + s;
            self.window = Some(next);
            self.ios = 0.0;
            self.bytes = 0.0;
            t = t.max(next);
        }
        self.ios += 1.0;
        self.bytes += len;
        self.last = t;
        t
    }
}

impl Device for Capped {
    fn concurrency(&self) -> usize {
        self.p.queue_depth
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let through = self.let_through(now, io.len as f64);
        let done =
            (through + self.p.latency).max(self.pipe_free) + io.len as f64 / self.p.device_bps;
        self.pipe_free = done;
        done
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:.0} MiB/s and {:.0} IOPS caps in {:.0} ms windows over a {:.0} µs, {:.1} GB/s device",
            self.p.name,
            self.p.bps / (1 << 20) as f64,
            self.p.iops,
            self.p.slice * 1e3,
            self.p.latency * 1e6,
            self.p.device_bps / 1e9
        )
    }

    /// * request: an I/O takes 1 ÷ IOPS of the IOPS cap, in which the
    ///   bandwidth cap passes bandwidth ÷ IOPS bytes (a cloud volume's
    ///   200 MiB/s ÷ 5000 is 41.9 KB, 10 pages of 4 KiB);
    /// * latency: the device's, or the IOPS cap's interval if longer;
    /// * parallelism: what the IOPS cap lets a reader keep in flight
    ///   (Little's law: IOPS × latency, 1.2 for `fast`), rounded up, plus
    ///   one: more only wait for the cap.
    fn cost(&self, page_size: u64) -> DeviceCost {
        let page = page_size as f64;
        DeviceCost {
            request_pages: (self.p.bps / self.p.iops / page) as u64,
            latency_pages: (self.p.latency.max(1.0 / self.p.iops) * self.p.bps / page) as u64,
            parallelism: (self.p.iops * self.p.latency).ceil() as u64 + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn io(len: u64) -> DevIo {
        DevIo { offset: 0, len }
    }

    /// `n` reads of `len` bytes one after another from `start`: when
    /// each completes.
    fn serial(d: &mut Capped, start: f64, n: usize, len: u64) -> Vec<f64> {
        let mut now = start;
        (0..n)
            .map(|_| {
                now = d.start(now, io(len));
                now
            })
            .collect()
    }

    #[test]
    fn a_window_share_passes_at_the_devices_pace_and_the_rest_waits_for_the_next() {
        let mut d = Capped::new(CappedParams::FAST);
        // 40 MiB a window at 400 MiB/s: 40 reads of 1 MiB, each 55 µs and
        // 0.52 ms of the device's own bandwidth.
        let done = serial(&mut d, 0.0, 41, MIB);
        assert!(done[39] < 0.03, "the window's share took {}", done[39]);
        assert!(
            (0.1..0.102).contains(&done[40]),
            "the 41st read ended at {}",
            done[40]
        );
    }

    #[test]
    fn a_long_run_reads_at_the_cap() {
        let mut d = Capped::new(CappedParams::FAST);
        let done = serial(&mut d, 0.0, 800, MIB);
        let rate = 800.0 * MIB as f64 / done[799] / (400 * MIB) as f64;
        assert!((0.95..1.1).contains(&rate), "{rate} of the cap");
        // 4 KiB reads 64 at once: the IOPS cap.
        let mut d = Capped::new(CappedParams::FAST);
        let mut end: f64 = 0.0;
        for _ in 0..40_000 {
            end = end.max(d.start(0.0, io(4096)));
        }
        assert!((1.9..2.05).contains(&end), "40,000 I/Os took {end} s");
    }

    #[test]
    fn what_a_window_leaves_unused_is_lost_and_a_pause_starts_afresh() {
        let mut d = Capped::new(CappedParams::FAST);
        // One read at 0, then 60 MiB asked at 50 ms: the window that began
        // at 0 has 39 MiB left, the rest waits for 100 ms.
        d.start(0.0, io(MIB));
        let done = serial(&mut d, 0.05, 60, MIB);
        assert!(done[38] < 0.1, "{}", done[38]);
        assert!(done[39] >= 0.1, "{}", done[39]);
        // After a pause longer than a window, a fresh window from there:
        // 40 MiB at once again.
        let t = done[59] + 0.5;
        let again = serial(&mut d, t, 40, MIB);
        assert!(again[39] - t < 0.03, "{}", again[39] - t);
    }

    #[test]
    fn an_io_larger_than_a_window_share_still_passes() {
        let p = CappedParams {
            bps: MIB as f64,
            ..CappedParams::FAST
        };
        let mut d = Capped::new(p);
        let done = serial(&mut d, 0.0, 3, 4 * MIB);
        assert!(done.iter().all(|t| t.is_finite()));
        assert!(done[2] >= 0.2, "{:?}", done);
    }

    #[test]
    fn the_latency_can_be_given() {
        let d: DeviceKind = "400m,20000,80us".parse().unwrap();
        let DeviceKind::Capped(p) = d else {
            panic!("{d:?}")
        };
        assert!((p.latency - 80e-6).abs() < 1e-12);
        let d: DeviceKind = "400m,20000".parse().unwrap();
        assert_eq!(
            d,
            DeviceKind::Capped(CappedParams {
                name: "custom",
                ..CappedParams::FAST
            })
        );
        for bad in [
            "400m,20000,fast",
            "400m,20000,-1us",
            "400m,20000,1us,2",
            "400m",
        ] {
            assert!(bad.parse::<DeviceKind>().is_err(), "{bad}");
        }
    }
}
