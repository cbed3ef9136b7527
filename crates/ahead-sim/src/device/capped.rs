//! Capped volumes: a fast device behind a bandwidth cap and an IOPS cap,
//! as a cgroup's `io.max` and a provisioned cloud volume enforce them.

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
}

impl CappedParams {
    /// The device under the caps: this machine's virtio disk with the
    /// host holding the data (what the steady tool warms it to): about
    /// 2 GB/s streaming (docs/measuring.md: 2-2.7 GB/s host-warm), 64 requests
    /// at once (the virtio queue), and 75 µs for a 4 KiB read under the
    /// cap: sqlite3 reading a 188 MB table backwards, 4 KiB at a time
    /// (45,800 reads), took 3.54 s cold and 0.10 s warm on the `fast` cap
    /// (`corpus/predict.sh`), 75 µs a read; its IN-list query 100 µs a read.
    const DEVICE: CappedParams = CappedParams {
        name: "device",
        bps: f64::INFINITY,
        iops: f64::INFINITY,
        latency: 75e-6,
        device_bps: 2e9,
        queue_depth: 64,
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

/// The caps as totals (two virtual clocks, one per cap) in front of a
/// latency + bandwidth device.
#[derive(Clone, Debug)]
pub struct Capped {
    p: CappedParams,
    /// When the IOPS cap lets the next I/O through.
    io_free: f64,
    /// When the bandwidth cap lets the next byte through.
    byte_free: f64,
    /// When the device's own pipe is free.
    pipe_free: f64,
}

impl Capped {
    /// A device with these caps.
    pub fn new(p: CappedParams) -> Capped {
        Capped {
            p,
            io_free: 0.0,
            byte_free: 0.0,
            pipe_free: 0.0,
        }
    }
}

impl Device for Capped {
    fn concurrency(&self) -> usize {
        self.p.queue_depth
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let io_at = now.max(self.io_free);
        let byte_at = now.max(self.byte_free);
        self.io_free = io_at + 1.0 / self.p.iops;
        self.byte_free = byte_at + io.len as f64 / self.p.bps;
        let through = io_at.max(byte_at);
        let done =
            (through + self.p.latency).max(self.pipe_free) + io.len as f64 / self.p.device_bps;
        self.pipe_free = done;
        done
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:.0} MiB/s and {:.0} IOPS caps over a {:.0} µs, {:.1} GB/s device",
            self.p.name,
            self.p.bps / (1 << 20) as f64,
            self.p.iops,
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
