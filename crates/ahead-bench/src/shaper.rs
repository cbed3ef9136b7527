//! A network of known latency and bandwidth between an object-store client
//! and its server, for the remote benchmark: this kernel has no `tc
//! netem`, so the shaping is a TCP proxy of its own on 127.0.0.1, in front
//! of whichever server it is (the embedded one, Ceph's radosgw, any
//! endpoint).
//!
//! * **First-byte delay.** Each request (the client's bytes that follow
//!   the server's answer to the one before, on a kept-alive connection,
//!   as HTTP/1.1 without pipelining sends them) is held for the profile's
//!   latency before it is passed on.
//! * **Bandwidth.** The server's bytes are paced per connection and in
//!   all, each a clock of when its link is free again.
//! * **Request rate.** A request is passed on no sooner than the rate cap
//!   allows.
//!
//! Profiles from published figures: [`NetProfile::S3`] (AWS's guidance:
//! tens of milliseconds to first byte, about 85–90 MB/s per connection;
//! 5,500 GET/s per prefix), [`NetProfile::LAN`], or `LATENCY,PER_CONN,TOTAL`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{Error, Result};

/// A network between client and server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetProfile {
    /// Its name in reports.
    pub name: &'static str,
    /// Added before each request reaches the server.
    pub first_byte: Duration,
    /// One connection's bandwidth, bytes per second.
    pub per_conn: u64,
    /// All connections' bandwidth together, bytes per second.
    pub total: u64,
    /// Requests per second, at most.
    pub max_rps: u64,
}

impl NetProfile {
    /// A cloud object store: 30 ms to the first byte, 90 MB/s per
    /// connection, 250 MB/s in all (below what the embedded server serves
    /// on 2 cores), 5,500 GET/s.
    pub const S3: NetProfile = NetProfile {
        name: "s3",
        first_byte: Duration::from_millis(30),
        per_conn: 90_000_000,
        total: 250_000_000,
        max_rps: 5_500,
    };
    /// A store on the local network: 1 ms, 1 GB/s in all.
    pub const LAN: NetProfile = NetProfile {
        name: "lan",
        first_byte: Duration::from_millis(1),
        per_conn: 1_000_000_000,
        total: 1_000_000_000,
        max_rps: 100_000,
    };

    /// `s3`, `lan`, or `LATENCY_MS,PER_CONN_MBPS,TOTAL_MBPS` (MB = 10^6
    /// bytes).
    pub fn parse(s: &str) -> Result<NetProfile> {
        match s {
            "s3" => return Ok(NetProfile::S3),
            "lan" => return Ok(NetProfile::LAN),
            _ => {}
        }
        let bad = || {
            Error::msg(format!(
                "network profile '{s}': s3, lan, or LATENCY_MS,PER_CONN_MBPS,TOTAL_MBPS"
            ))
        };
        let v: Vec<f64> = s
            .split(',')
            .map(|p| p.trim().parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad())?;
        if v.len() != 3
            || v.iter().any(|x| !x.is_finite() || *x < 0.0)
            || v[1] <= 0.0
            || v[2] <= 0.0
        {
            return Err(bad());
        }
        Ok(NetProfile {
            name: "custom",
            first_byte: Duration::from_secs_f64(v[0] / 1000.0),
            per_conn: (v[1] * 1e6) as u64,
            total: (v[2] * 1e6) as u64,
            max_rps: 100_000,
        })
    }
}

/// How far a link's clock may fall behind the present and catch up: a
/// timer wakes up to a millisecond late (tokio's granularity), and a clock
/// reset to "now" after every late wake-up would lose that time on every
/// chunk — one connection relaying 16 KiB reads got about 35 MB/s of a
/// 90 MB/s profile that way.
const SLACK: Duration = Duration::from_millis(4);

/// When a link is free again: pacing by a clock, so that shares of a
/// bandwidth add up exactly.
struct Link {
    bps: u64,
    free_at: Instant,
}

impl Link {
    fn new(bps: u64) -> Link {
        Link {
            bps,
            free_at: Instant::now(),
        }
    }

    /// Books `n` bytes (or one request, with `bps` as a rate): when they
    /// have passed. An idle link's clock starts from the present less
    /// [`SLACK`], so that late wake-ups are made up and the rate over any
    /// longer time is the link's.
    fn book(&mut self, n: u64) -> Instant {
        let now = Instant::now();
        let start = self.free_at.max(now.checked_sub(SLACK).unwrap_or(now));
        self.free_at = start + Duration::from_secs_f64(n as f64 / self.bps as f64);
        self.free_at
    }
}

/// A running shaper: a proxy on 127.0.0.1 in front of `upstream`.
pub struct Shaper {
    addr: SocketAddr,
    bytes_down: Arc<std::sync::atomic::AtomicU64>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Shaper {
    /// Starts a proxy to `upstream` with `profile`.
    pub fn start(upstream: SocketAddr, profile: NetProfile) -> Result<Shaper> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ahead-shaper")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let total = Arc::new(Mutex::new(Link::new(profile.total)));
        let bytes_down = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let down_count = bytes_down.clone();
        let rate = Arc::new(Mutex::new(Link::new(profile.max_rps)));
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (total, rate, count) = (total.clone(), rate.clone(), down_count.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        let _ = relay(client, server, profile, total, rate, count).await;
                    }
                });
            }
        });
        Ok(Shaper {
            addr,
            bytes_down,
            runtime: Some(runtime),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Bytes the server sent through the shaper so far (bodies and
    /// headers), counted for every client alike.
    pub fn bytes_down(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.bytes_down.clone()
    }
}

impl Drop for Shaper {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Relays one connection both ways, shaped.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    profile: NetProfile,
    total: Arc<Mutex<Link>>,
    rate: Arc<Mutex<Link>>,
    count: Arc<std::sync::atomic::AtomicU64>,
) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // Set when the server has answered since the client last sent: the
    // client's next bytes are a new request.
    let answered = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let answered_up = answered.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = cr.read(&mut buf).await?;
            if n == 0 {
                sw.shutdown().await?;
                return Ok::<_, std::io::Error>(());
            }
            if answered_up.swap(false, std::sync::atomic::Ordering::AcqRel) {
                let due = Instant::now() + profile.first_byte;
                let allowed = rate.lock().unwrap_or_else(|p| p.into_inner()).book(1);
                tokio::time::sleep_until(due.max(allowed).into()).await;
            }
            sw.write_all(&buf[..n]).await?;
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut conn = Link::new(profile.per_conn);
        loop {
            let n = sr.read(&mut buf).await?;
            if n == 0 {
                cw.shutdown().await?;
                return Ok::<_, std::io::Error>(());
            }
            answered.store(true, std::sync::atomic::Ordering::Release);
            count.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            let mine = conn.book(n as u64);
            let all = total
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .book(n as u64);
            tokio::time::sleep_until(mine.max(all).into()).await;
            cw.write_all(&buf[..n]).await?;
        }
    };
    let (a, b) = tokio::join!(up, down);
    a.and(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_makes_up_late_wake_ups_but_banks_no_more_than_its_slack() {
        // 1 MB/s: 1,000 bytes take 1 ms.
        let mut link = Link::new(1_000_000);
        let first = link.book(1_000);
        // Woken late (here: 10 ms after the first booking was due), the
        // next bytes are booked from at most SLACK before the present,
        // so they are due at once: the late time is made up.
        std::thread::sleep(Duration::from_millis(10));
        let now = Instant::now();
        assert!(link.book(1_000) <= now, "late time was lost");
        // Idle much longer than the slack: what can be sent at once is
        // bounded by it (8 ms of bytes are due at least 4 ms from now).
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        let due = link.book(8_000);
        assert!(
            due >= now + Duration::from_millis(8) - SLACK,
            "banked too much"
        );
        assert!(due > first);
    }
}
