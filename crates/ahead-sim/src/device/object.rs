//! An object store behind a network: what `ahead bench remote`'s shaper
//! imposes between its client and server, so that a policy's remote
//! behaviour can be explored without a server.
//!
//! Each request waits for the request-rate cap, then for the first byte,
//! then transfers its bytes at its share of the network: one connection's
//! bandwidth, or the total split among the requests transferring at once
//! (the shaper relays every connection's chunks in turn, so they share it
//! evenly): `done = ready + len ÷ min(per_conn, total ÷ (active + 1))`,
//! never sooner than the total link, as a clock, allows.

use super::*;

/// Parameters of an object store's network.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ObjectParams {
    /// Name of the profile.
    pub name: &'static str,
    /// Time to the first byte of each request, seconds.
    pub first_byte: f64,
    /// One connection's bandwidth, bytes per second.
    pub per_conn: f64,
    /// All connections' bandwidth together, bytes per second.
    pub total: f64,
    /// Requests per second, at most (the network's cap).
    pub max_rps: f64,
    /// Requests per second the server answers at most (its own work per
    /// request, which the network's caps do not include).
    pub server_rps: f64,
    /// Requests in flight at once: the engine's depth (64 by default).
    pub parallelism: usize,
}

impl ObjectParams {
    /// `ahead bench remote --profile s3` over its embedded server on this
    /// 2-core machine: 30 ms to the first byte, 90 MB/s per connection,
    /// 250 MB/s in all, 5,500 GET/s; the engine's 64 requests in flight;
    /// and the server's own rate, 1,150 GET/s — what the benchmark's
    /// `naive` engine (no policy: 64 GETs of 64 KiB in flight, random-64k)
    /// completed, 75.5 MB/s, p50 54.9 ms where the network alone gives
    /// 30.7 (medians of 3).
    pub const S3: ObjectParams = ObjectParams {
        name: "s3",
        first_byte: 30e-3,
        per_conn: 90e6,
        total: 250e6,
        max_rps: 5500.0,
        server_rps: 1150.0,
        parallelism: 64,
    };
}

/// The model: two clocks, the request-rate cap's and the total link's.
#[derive(Clone, Debug)]
pub struct ObjectStore {
    p: ObjectParams,
    rate_free: f64,
    total_free: f64,
    /// When the requests started so far complete.
    ends: Vec<f64>,
}

impl ObjectStore {
    /// A store with these parameters.
    pub fn new(p: ObjectParams) -> ObjectStore {
        ObjectStore {
            p,
            rate_free: 0.0,
            total_free: 0.0,
            ends: Vec::new(),
        }
    }
}

impl Device for ObjectStore {
    fn concurrency(&self) -> usize {
        self.p.parallelism
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let sent = now.max(self.rate_free);
        self.rate_free = sent + 1.0 / self.p.max_rps.min(self.p.server_rps);
        let ready = sent + self.p.first_byte;
        let len = io.len as f64;
        self.ends.retain(|&e| e > ready);
        let share = self
            .p
            .per_conn
            .min(self.p.total / (self.ends.len() + 1) as f64);
        let link = ready.max(self.total_free) + len / self.p.total;
        self.total_free = link;
        let done = link.max(ready + len / share);
        self.ends.push(done);
        done
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:.0} ms to the first byte, {:.0} MB/s per connection, {:.0} MB/s in all, \
             {:.0} requests/s (the server: {:.0}), {} in flight",
            self.p.name,
            self.p.first_byte * 1e3,
            self.p.per_conn / 1e6,
            self.p.total / 1e6,
            self.p.max_rps,
            self.p.server_rps,
            self.p.parallelism
        )
    }

    /// What the engine's objects tell their policy
    /// ([`DeviceCost::object_store`]).
    fn cost(&self, page_size: u64) -> DeviceCost {
        DeviceCost::object_store(page_size, self.p.parallelism as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(len: u64) -> DevIo {
        DevIo { offset: 0, len }
    }

    #[test]
    fn one_request_pays_the_first_byte_and_one_connections_rate() {
        let mut d = ObjectStore::new(ObjectParams::S3);
        let done = d.start(0.0, io(9_000_000));
        // 30 ms, then 9 MB at 90 MB/s (the connection is the tighter cap).
        assert!((done - 0.13).abs() < 1e-9, "{done}");
    }

    #[test]
    fn many_requests_share_the_total_and_respect_the_rate_cap() {
        let mut d = ObjectStore::new(ObjectParams::S3);
        // 64 requests of 4 MiB at once: the total link, 250 MB/s, bounds
        // them (64 × 4 MiB ÷ 250 MB/s ≈ 1.07 s after the first byte).
        let last = (0..64)
            .map(|_| d.start(0.0, io(4 << 20)))
            .fold(0.0, f64::max);
        let want = 0.03 + 64.0 * (4 << 20) as f64 / 250e6;
        assert!((last - want).abs() < 0.02, "{last} vs {want}");
        // 5,500 tiny requests at once through a network that takes 5,500
        // a second: the last is let through a second later.
        let mut d = ObjectStore::new(ObjectParams {
            server_rps: f64::INFINITY,
            ..ObjectParams::S3
        });
        let last = (0..5500).map(|_| d.start(0.0, io(1))).fold(0.0, f64::max);
        assert!((last - 1.03).abs() < 0.01, "{last}");
        // A slower server is the tighter cap.
        let mut d = ObjectStore::new(ObjectParams::S3);
        let last = (0..1150).map(|_| d.start(0.0, io(1))).fold(0.0, f64::max);
        assert!((last - 1.03).abs() < 0.01, "{last}");
    }
}
