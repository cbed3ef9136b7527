//! Flash and object stores as one model: a latency per I/O, a bandwidth
//! shared by every I/O in flight, a queue depth.

use super::*;

/// Parameters of the latency + shared-bandwidth model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PipeParams {
    /// Name of the preset.
    pub name: &'static str,
    /// Latency of one I/O before its data flows, seconds.
    pub latency: f64,
    /// Bandwidth shared by all I/Os, bytes per second.
    pub bandwidth: f64,
    /// I/Os served at once.
    pub queue_depth: usize,
}

impl PipeParams {
    /// A SATA-class flash drive: 80 µs read latency, 500 MB/s, 32 commands
    /// (NCQ).
    pub const SSD: PipeParams = PipeParams {
        name: "ssd",
        latency: 80e-6,
        bandwidth: 500e6,
        queue_depth: 32,
    };
    /// A remote object store: 20 ms to first byte, 100 MB/s, 16 requests in
    /// flight.
    pub const NET: PipeParams = PipeParams {
        name: "net",
        latency: 20e-3,
        bandwidth: 100e6,
        queue_depth: 16,
    };
}

/// Latency + shared bandwidth + queue depth.
#[derive(Clone, Debug)]
pub struct Pipe {
    p: PipeParams,
    pipe_free: f64,
}

impl Pipe {
    /// A device with these parameters.
    pub fn new(p: PipeParams) -> Pipe {
        Pipe { p, pipe_free: 0.0 }
    }
}

impl Device for Pipe {
    fn concurrency(&self) -> usize {
        self.p.queue_depth
    }

    /// Latencies overlap across the queue: an I/O holds the device for its
    /// latency ÷ queue depth beyond its bytes (ssd: 2.5 µs, under a page;
    /// net: 1.25 ms, 30 pages); a reader waits the whole latency (ssd: 80
    /// µs, 9 pages); its queue depth.
    fn cost(&self, page_size: u64) -> DeviceCost {
        let pages = |t: f64| (t * self.p.bandwidth / page_size as f64) as u64;
        DeviceCost {
            request_pages: pages(self.p.latency / self.p.queue_depth as f64),
            latency_pages: pages(self.p.latency),
            parallelism: self.p.queue_depth as u64,
        }
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let ready = now + self.p.latency;
        let done = ready.max(self.pipe_free) + io.len as f64 / self.p.bandwidth;
        self.pipe_free = done;
        done
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:.0} µs latency, {:.0} MB/s, queue depth {}",
            self.p.name,
            self.p.latency * 1e6,
            self.p.bandwidth / 1e6,
            self.p.queue_depth
        )
    }
}
