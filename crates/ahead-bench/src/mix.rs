//! The mixed-latency benchmark of the non-blocking buffered reads series
//! (docs/references.md): a server's event loop keeps a
//! fixed number of 16 KiB reads in flight and must never block on I/O.
//! Each new request is
//!
//! * f1 (73%): random over a mostly cached file, Zipf-distributed;
//! * f2 (18%): random, uniform, over a file whose pages were dropped first;
//! * f3 (9%): sequential over a third file, also dropped first.
//!
//! Engines: `ahead-buffered` (the probe on the loop's thread, misses to the
//! engine's backend, through [`ahead::File::read_owned`] futures polled by
//! a small executor), `pool-only` (every read handed to a thread pool of as
//! many threads as requests in flight: tokio's `spawn_blocking`, Samba,
//! libuv), `io_uring` (buffered reads on a ring: the kernel's own
//! non-blocking path and its workers) and `pread` (blocking reads on as
//! many threads). Latency is measured from the moment a request is made to
//! its completion, per class, into HDR histograms.

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use ahead::io::{AlignedBuf, Backend, BackendKind, IoBuf, ReadOp};
use hdrhistogram::Histogram;

/// Request size: the series' 16 KiB.
pub const BS: u64 = 16 << 10;
/// Shares of the three classes, in percent (the series' 73/18/9).
pub const SHARES: [u32; 3] = [73, 18, 9];
/// fio's default Zipf exponent for `random_distribution=zipf` examples
/// (`zipf:1.2`), which the series' "zipf med-size dataset" suggests.
pub const ZIPF_THETA: f64 = 1.2;

/// Which engine serves the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixEngine {
    /// ahead's Buffered mode: the RWF_NOWAIT probe inline, misses to the
    /// engine's backend.
    AheadBuffered,
    /// Every read to a thread pool.
    PoolOnly,
    /// Buffered reads on an io_uring.
    IoUring,
    /// Blocking reads on as many threads as requests in flight.
    Pread,
}

impl MixEngine {
    /// All of them, in report order.
    pub const ALL: [MixEngine; 4] = [
        MixEngine::AheadBuffered,
        MixEngine::PoolOnly,
        MixEngine::IoUring,
        MixEngine::Pread,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            MixEngine::AheadBuffered => "ahead-buffered",
            MixEngine::PoolOnly => "pool-only",
            MixEngine::IoUring => "io_uring",
            MixEngine::Pread => "pread",
        }
    }
}

/// The three files.
#[derive(Clone, Debug)]
pub struct MixFiles {
    /// Mostly cached, Zipf reads.
    pub f1: PathBuf,
    /// Dropped first, uniform random reads.
    pub f2: PathBuf,
    /// Dropped first, sequential reads.
    pub f3: PathBuf,
}

/// How a run goes.
#[derive(Clone, Debug)]
pub struct MixConfig {
    /// How long the loop runs.
    pub seconds: f64,
    /// Requests kept in flight.
    pub inflight: usize,
    /// Seed of the request sequence (the same for every engine).
    pub seed: u64,
    /// Only f1 (`mix-f1-alone`).
    pub f1_alone: bool,
    /// The backend ahead's misses go to.
    pub ahead_backend: BackendKind,
    /// ahead's kernel hints.
    pub hints: bool,
    /// Threads (or ring depth) of ahead's miss backend; 0: `inflight`.
    pub ahead_depth: usize,
}

/// One class's figures.
#[derive(Clone, Debug, Default)]
pub struct ClassResult {
    /// Requests completed.
    pub requests: u64,
    /// Latency percentiles, µs.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Megabytes (10^6) per second.
    pub mb_s: f64,
    /// ahead only: the share of this class's reads served inline by the
    /// probe.
    pub inline_share: Option<f64>,
}

/// A run's figures: one per class (None for a class that did not run).
pub type MixResult = [Option<ClassResult>; 3];

/// Picks requests: the class by its share, then the offset.
struct Picker {
    rng: fastrand::Rng,
    zipf_cdf: Vec<f64>,
    f1_blocks: u64,
    f2_blocks: u64,
    f3_blocks: u64,
    f3_next: Arc<AtomicU64>,
    f1_alone: bool,
}

impl Picker {
    fn new(sizes: [u64; 3], seed: u64, f1_alone: bool, f3_next: Arc<AtomicU64>) -> Picker {
        let f1_blocks = (sizes[0] / BS).max(1);
        // The Zipf CDF over f1's blocks by rank.
        let mut cdf = Vec::with_capacity(f1_blocks as usize);
        let mut sum = 0.0;
        for k in 1..=f1_blocks {
            sum += 1.0 / (k as f64).powf(ZIPF_THETA);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Picker {
            rng: fastrand::Rng::with_seed(seed),
            zipf_cdf: cdf,
            f1_blocks,
            f2_blocks: (sizes[1] / BS).max(1),
            f3_blocks: (sizes[2] / BS).max(1),
            f3_next,
            f1_alone,
        }
    }

    /// (class, offset).
    fn next(&mut self) -> (usize, u64) {
        let class = if self.f1_alone {
            0
        } else {
            let r = self.rng.u32(0..100);
            if r < SHARES[0] {
                0
            } else if r < SHARES[0] + SHARES[1] {
                1
            } else {
                2
            }
        };
        let block = match class {
            0 => {
                let u = self.rng.f64();
                let rank = self.zipf_cdf.partition_point(|&c| c < u) as u64;
                // Popular blocks spread over the file, not packed at its
                // start: rank times an odd constant, modulo the blocks.
                (rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) % self.f1_blocks
            }
            1 => self.rng.u64(0..self.f2_blocks),
            _ => self.f3_next.fetch_add(1, Ordering::Relaxed) % self.f3_blocks,
        };
        (class, block * BS)
    }
}

/// Latency histograms and byte counts per class.
struct Record {
    hist: [Histogram<u64>; 3],
    bytes: [u64; 3],
}

impl Record {
    fn new() -> Record {
        let h = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
        Record {
            hist: [h(), h(), h()],
            bytes: [0; 3],
        }
    }
    fn add(&mut self, class: usize, started: Instant, bytes: usize) {
        let ns = started.elapsed().as_nanos().clamp(1, 60_000_000_000) as u64;
        let _ = self.hist[class].record(ns);
        self.bytes[class] += bytes as u64;
    }
    fn merge(&mut self, other: &Record) {
        for c in 0..3 {
            let _ = self.hist[c].add(&other.hist[c]);
            self.bytes[c] += other.bytes[c];
        }
    }
    fn result(&self, seconds: f64) -> MixResult {
        let mut out: MixResult = [None, None, None];
        for (c, o) in out.iter_mut().enumerate() {
            let h = &self.hist[c];
            if h.is_empty() {
                continue;
            }
            let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            *o = Some(ClassResult {
                requests: h.len(),
                p50_us: us(0.50),
                p90_us: us(0.90),
                p99_us: us(0.99),
                p999_us: us(0.999),
                mb_s: self.bytes[c] as f64 / seconds / 1e6,
                inline_share: None,
            });
        }
        out
    }
}

/// Drops the pages of f2 and f3 and reads f1 whole into the kernel's
/// cache: the state every engine starts from.
pub fn prepare(files: &MixFiles) -> crate::Result<()> {
    for p in [&files.f2, &files.f3] {
        crate::workload::evict(p)?;
    }
    let f = std::fs::File::open(&files.f1)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", files.f1.display())))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, at)
            .map_err(|e| crate::Error::msg(format!("{}: {e}", files.f1.display())))?;
        if n == 0 {
            return Ok(());
        }
        at += n as u64;
    }
}

fn size(p: &Path) -> crate::Result<u64> {
    std::fs::metadata(p)
        .map(|m| m.len())
        .map_err(|e| crate::Error::msg(format!("{}: {e}", p.display())))
}

fn open(p: &Path) -> crate::Result<Arc<OwnedFd>> {
    ahead::testdata::open_read(p, false)
        .map(Arc::new)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", p.display())))
}

/// Runs the loop once on `engine` (call [`prepare`] first).
pub fn run(files: &MixFiles, engine: MixEngine, cfg: &MixConfig) -> crate::Result<MixResult> {
    let sizes = [size(&files.f1)?, size(&files.f2)?, size(&files.f3)?];
    let f3_next = Arc::new(AtomicU64::new(0));
    let deadline = Duration::from_secs_f64(cfg.seconds);
    match engine {
        MixEngine::AheadBuffered => run_ahead(files, sizes, cfg, f3_next, deadline),
        MixEngine::PoolOnly | MixEngine::IoUring => {
            let backend: Arc<dyn Backend> = if engine == MixEngine::PoolOnly {
                Arc::new(ahead::io::Pool::new(cfg.inflight))
            } else {
                Arc::new(
                    ahead::io::Uring::new(cfg.inflight)
                        .map_err(|e| crate::Error::msg(format!("io_uring: {e}")))?,
                )
            };
            run_backend(files, sizes, cfg, f3_next, deadline, backend)
        }
        MixEngine::Pread => run_pread(files, sizes, cfg, f3_next, deadline),
    }
}

fn run_backend(
    files: &MixFiles,
    sizes: [u64; 3],
    cfg: &MixConfig,
    f3_next: Arc<AtomicU64>,
    deadline: Duration,
    backend: Arc<dyn Backend>,
) -> crate::Result<MixResult> {
    let fds = [open(&files.f1)?, open(&files.f2)?, open(&files.f3)?];
    let mut picker = Picker::new(sizes, cfg.seed, cfg.f1_alone, f3_next);
    let (tx, rx) = channel::<(usize, Instant, ReadOp, std::io::Result<usize>)>();
    let mut rec = Record::new();
    let start = Instant::now();
    let submit = |picker: &mut Picker, buf: IoBuf| {
        let (class, offset) = picker.next();
        let tx = tx.clone();
        let t = Instant::now();
        backend.submit(
            ReadOp {
                source: fds[class].clone(),
                offset,
                len: BS as usize,
                buf,
                flags: 0,
                known_miss: false,
            },
            Box::new(move |op, r| {
                let _ = tx.send((class, t, op, r));
            }),
        );
    };
    for _ in 0..cfg.inflight {
        submit(
            &mut picker,
            IoBuf::Owned(AlignedBuf::new(BS as usize, 4096)),
        );
    }
    let mut inflight = cfg.inflight;
    while inflight > 0 {
        let (class, t, op, r) = rx.recv().map_err(|_| "backend stopped".to_string())?;
        inflight -= 1;
        let n = r.map_err(|e| crate::Error::msg(format!("read: {e}")))?;
        rec.add(class, t, n);
        if start.elapsed() < deadline {
            submit(&mut picker, op.buf);
            inflight += 1;
        }
    }
    Ok(rec.result(start.elapsed().as_secs_f64()))
}

fn run_pread(
    files: &MixFiles,
    sizes: [u64; 3],
    cfg: &MixConfig,
    f3_next: Arc<AtomicU64>,
    deadline: Duration,
) -> crate::Result<MixResult> {
    let fds = [open(&files.f1)?, open(&files.f2)?, open(&files.f3)?];
    let total = Mutex::new(Record::new());
    let failed = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..cfg.inflight {
            let (fds, total, failed, f3_next) = (&fds, &total, &failed, f3_next.clone());
            s.spawn(move || {
                let mut picker = Picker::new(sizes, cfg.seed + t as u64, cfg.f1_alone, f3_next);
                let mut rec = Record::new();
                let mut buf = vec![0u8; BS as usize];
                while start.elapsed() < deadline {
                    let (class, offset) = picker.next();
                    let t = Instant::now();
                    match rustix::io::pread(&*fds[class], &mut buf, offset)
                        .map_err(std::io::Error::from)
                    {
                        Ok(n) => rec.add(class, t, n),
                        Err(_) => {
                            failed.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
                total.lock().unwrap_or_else(|p| p.into_inner()).merge(&rec);
            });
        }
    });
    if failed.load(Ordering::Relaxed) {
        return Err("a read failed".into());
    }
    let rec = total.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(rec.result(start.elapsed().as_secs_f64()))
}

/// Wakes the loop with the id of a future that can make progress.
struct Wakeup {
    id: usize,
    tx: Mutex<Sender<usize>>,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        let _ = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(self.id);
    }
}

fn run_ahead(
    files: &MixFiles,
    sizes: [u64; 3],
    cfg: &MixConfig,
    f3_next: Arc<AtomicU64>,
    deadline: Duration,
) -> crate::Result<MixResult> {
    let depth = if cfg.ahead_depth > 0 {
        cfg.ahead_depth
    } else {
        cfg.inflight.max(1)
    };
    let engine = ahead::Engine::new(
        ahead::EngineConfig::default()
            .with_depth(depth)
            .with_buffered_backend(cfg.ahead_backend),
    )
    .map_err(|e| e.to_string())?;
    let opts = ahead::OpenOptions::new()
        .mode(ahead::Mode::Buffered)
        .hints(cfg.hints);
    let open = |p: &Path| engine.open_with(p, &opts).map_err(|e| e.to_string());
    let f = [open(&files.f1)?, open(&files.f2)?, open(&files.f3)?];
    let mut picker = Picker::new(sizes, cfg.seed, cfg.f1_alone, f3_next);
    let (tx, rx) = channel::<usize>();
    type Fut = Pin<Box<ahead::ReadOwned>>;
    let mut slots: HashMap<usize, (usize, Instant, Fut, Waker)> = HashMap::new();
    let mut next_id = 0usize;
    let mut free_bufs: Vec<Vec<u8>> = Vec::new();
    let mut rec = Record::new();
    let mut inline = [0u64; 3];
    let start = Instant::now();
    loop {
        // Keep `inflight` requests going; a request the probe serves at
        // once completes here, on the loop's thread.
        while slots.len() < cfg.inflight && start.elapsed() < deadline {
            let (class, offset) = picker.next();
            let buf = free_bufs.pop().unwrap_or_else(|| vec![0u8; BS as usize]);
            let t = Instant::now();
            let mut fut = Box::pin(f[class].read_owned(buf, offset));
            let id = next_id;
            next_id += 1;
            let waker = Waker::from(Arc::new(Wakeup {
                id,
                tx: Mutex::new(tx.clone()),
            }));
            match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready((buf, r)) => {
                    let n = r.map_err(|e| e.to_string())?;
                    rec.add(class, t, n);
                    inline[class] += 1;
                    free_bufs.push(buf);
                }
                Poll::Pending => {
                    slots.insert(id, (class, t, fut, waker));
                }
            }
        }
        if slots.is_empty() {
            break;
        }
        let id = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "no read completed for 30 s".to_string())?;
        let Some((class, t, mut fut, waker)) = slots.remove(&id) else {
            continue; // a late wake-up of a finished future
        };
        match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready((buf, r)) => {
                let n = r.map_err(|e| e.to_string())?;
                rec.add(class, t, n);
                free_bufs.push(buf);
            }
            Poll::Pending => {
                slots.insert(id, (class, t, fut, waker));
            }
        }
    }
    let mut out = rec.result(start.elapsed().as_secs_f64());
    for (c, o) in out.iter_mut().enumerate() {
        if let Some(r) = o {
            r.inline_share = Some(inline[c] as f64 / r.requests.max(1) as f64);
        }
    }
    Ok(out)
}

/// The backend ahead's engine uses for misses with `kind`.
pub fn ahead_backend(kind: BackendKind) -> &'static str {
    match ahead::io::new_backend(kind, 1) {
        Ok(b) => b.name(),
        Err(_) => "none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picker_keeps_the_shares_and_the_zipf_head() {
        let mut p = Picker::new(
            [256 << 20, 1 << 30, 1 << 30],
            1,
            false,
            Arc::new(AtomicU64::new(0)),
        );
        let mut counts = [0u32; 3];
        let mut f1: HashMap<u64, u32> = HashMap::new();
        let mut last_f3 = None;
        for _ in 0..100_000 {
            let (c, off) = p.next();
            counts[c] += 1;
            assert_eq!(off % BS, 0);
            if c == 0 {
                *f1.entry(off).or_default() += 1;
            }
            if c == 2 {
                if let Some(l) = last_f3 {
                    assert_eq!(off, l + BS, "f3 is sequential");
                }
                last_f3 = Some(off);
            }
        }
        for (c, share) in SHARES.iter().enumerate() {
            let got = counts[c] as f64 / 1000.0;
            assert!((got - *share as f64).abs() < 1.0, "class {c}: {got}%");
        }
        // Zipf: the most popular block takes a large share of f1.
        let top = f1.values().max().copied().unwrap_or(0) as f64 / counts[0] as f64;
        assert!(top > 0.1, "{top}");
    }
}
