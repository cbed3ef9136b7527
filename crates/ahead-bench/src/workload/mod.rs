//! Read workloads on real files, through the kernel's paths and through
//! ahead, measured the same way.
//!
//! A workload is a [`Pattern`] of requests of `bs` bytes; an [`Engine`] says
//! who serves them. Every run starts cold unless the pattern is about cached
//! reads: the file is dropped from the kernel's cache (`POSIX_FADV_DONTNEED`)
//! and ahead gets a fresh engine with an empty cache. Throughput is bytes
//! returned over wall time; latency percentiles come from per-request timing
//! where the pattern asks for it (random 4 KiB, cached 16 KiB).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahead::io::{AlignedBuf, Backend, IoBuf, ReadOp};
use ahead::{Engine as AheadEngine, EngineConfig};

mod alternate;
mod cycles;
mod object;
mod prepare;
pub use alternate::run_alternated;
use object::run_url;
pub use prepare::evict;
use prepare::prepare;

/// An access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Forward, request after request.
    Seq,
    /// Backward from the end.
    Reverse,
    /// Read `bs`, skip `gap` bytes, forward.
    Stride {
        /// Bytes skipped after each read.
        gap: u64,
    },
    /// `n` threads each streaming their own part of the file forward.
    Interleaved {
        /// Number of streams (threads).
        n: usize,
    },
    /// Every aligned block once, in random order (as fio's `randread`).
    Random,
    /// Uniformly random aligned blocks drawn independently (repeats
    /// possible: a cache absorbs them).
    RandomRepeat,
}

impl std::str::FromStr for Pattern {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        let bad = || {
            format!("unknown pattern '{s}' (seq, reverse, stride:GAP, random, random-repeat, interleaved:N)")
        };
        match s.split_once(':') {
            None => match s {
                "seq" => Ok(Pattern::Seq),
                "reverse" => Ok(Pattern::Reverse),
                "random" => Ok(Pattern::Random),
                "random-repeat" => Ok(Pattern::RandomRepeat),
                "stride" => Ok(Pattern::Stride { gap: 12 << 10 }),
                "interleaved" => Ok(Pattern::Interleaved { n: 8 }),
                _ => Err(bad().into()),
            },
            Some(("stride", gap)) => Ok(Pattern::Stride {
                gap: ahead::units::parse_size(gap).map_err(|e| e.to_string())?,
            }),
            Some(("interleaved", n)) => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Pattern::Interleaved { n }),
                _ => Err(bad().into()),
            },
            _ => Err(bad().into()),
        }
    }
}

/// Who serves the reads.
#[derive(Clone, Debug)]
pub enum Engine {
    /// Kernel buffered `pread`.
    Kernel,
    /// Kernel `pread` on an O_DIRECT descriptor (no cache, no readahead).
    KernelDirect,
    /// ahead with this configuration, files opened in `mode`; `zero_copy`
    /// uses `read_pages` instead of `read_at` (Direct mode only).
    Ahead {
        /// Engine settings.
        config: EngineConfig,
        /// Lend pages instead of copying.
        zero_copy: bool,
        /// Direct, Buffered or Uncached.
        mode: ahead::Mode,
    },
    /// Large O_DIRECT reads through io_uring at high depth: what the device
    /// can do. `bs` and depth come from the workload.
    DeviceLimit,
}

impl Engine {
    /// The name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Kernel => "kernel",
            Engine::KernelDirect => "kernel-direct",
            Engine::Ahead {
                zero_copy: true, ..
            } => "ahead-zero-copy",
            Engine::Ahead { mode, .. } => match mode {
                ahead::Mode::Buffered => "ahead-buffered",
                ahead::Mode::Uncached => "ahead-uncached",
                _ => "ahead",
            },
            Engine::DeviceLimit => "device-limit",
        }
    }
}

/// One workload.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The pattern.
    pub pattern: Pattern,
    /// Request size in bytes.
    pub bs: u64,
    /// Requests in flight (threads for the kernel's paths, `read_many`
    /// batches for ahead, ring depth for the device limit).
    pub depth: usize,
    /// Stop after this many bytes have been returned (0: the whole pattern).
    pub bytes: u64,
    /// Evict the file from the kernel's cache first.
    pub cold: bool,
    /// Time each request, for latency percentiles.
    pub latency: bool,
    /// Seed of random offsets.
    pub seed: u64,
    /// Use only the first `span` bytes of the file (0: all of it).
    pub span: u64,
    /// Run the pattern once, untimed, before measuring (same engine, same
    /// cache), after reading the span through the kernel's cache: for
    /// cached-read workloads.
    pub warm: bool,
    /// Bytes to read with O_DIRECT (leaving every cache as it is) just
    /// before the clock starts: on a throttled device this spends the burst
    /// the throttle lets through after an idle spell, so that the run is
    /// paced by the cap from its first read. 0: none.
    pub drain: u64,
}

impl Workload {
    /// A cold single-stream workload of `bs` requests at depth 1.
    pub fn new(pattern: Pattern, bs: u64) -> Workload {
        Workload {
            pattern,
            bs,
            depth: 1,
            bytes: 0,
            cold: true,
            latency: false,
            seed: 1,
            span: 0,
            warm: false,
            drain: 0,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Measurement {
    /// Bytes returned.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// CPU time (user + system) of the whole process over the same span:
    /// every thread the engine uses (workers, the reaper, the hint thread)
    /// counts. `None` where getrusage fails.
    pub cpu_s: Option<f64>,
    /// CPU cycles of the whole process, user and kernel, where the CPU
    /// counts them (counted per thread with `perf_event_open`; see
    /// docs/bench.md). Only `bench fast` reads them.
    pub cycles: Option<u64>,
    /// Median request latency in µs, when timed.
    pub p50_us: Option<f64>,
    /// 99th percentile request latency in µs, when timed.
    pub p99_us: Option<f64>,
    /// ahead's counters, for ahead runs.
    pub stats: Option<ahead::Stats>,
    /// Whether reads bypassed the kernel cache as intended.
    pub direct: bool,
    /// Device reads sent into registered buffers, for ahead runs.
    pub fixed_reads: Option<u64>,
    /// What ahead's engine learned its device charges, for Direct runs.
    pub device_cost: Option<ahead::ra::DeviceCost>,
    /// What ahead's engine chose for its readahead window, where it tuned
    /// it (Direct runs with no window set).
    pub readahead_tuning: Option<ahead::ReadaheadTuning>,
    /// An object's requests, bytes fetched and disk tier counters.
    pub remote: Option<ahead::remote::RemoteStats>,
    /// What the cache's memory was made of, for ahead runs.
    pub huge_pages: Option<ahead::io::HugeChoice>,
}

impl Measurement {
    /// Throughput in MB/s (10^6 bytes per second).
    pub fn mb_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// The request offsets of a single-stream pattern over `size` bytes.
pub fn offsets(pattern: Pattern, size: u64, bs: u64, seed: u64) -> Vec<u64> {
    let blocks = size / bs;
    match pattern {
        Pattern::Seq | Pattern::Interleaved { .. } => (0..blocks).map(|b| b * bs).collect(),
        Pattern::Reverse => (0..blocks).rev().map(|b| b * bs).collect(),
        Pattern::Stride { gap } => (0..size.saturating_sub(bs - 1))
            .step_by((bs + gap) as usize)
            .collect(),
        Pattern::Random => {
            // Each block once, in random order (fio's randread, aio-stress).
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut v: Vec<u64> = (0..blocks).map(|b| b * bs).collect();
            rng.shuffle(&mut v);
            v
        }
        Pattern::RandomRepeat => {
            // Blocks drawn independently: some twice, some never.
            let mut rng = fastrand::Rng::with_seed(seed);
            (0..blocks)
                .map(|_| rng.u64(0..blocks.max(1)) * bs)
                .collect()
        }
    }
}

/// Runs `w` on `path` through `engine`.
pub fn run(path: &Path, engine: &Engine, w: &Workload) -> crate::Result<Measurement> {
    if let Some(url) = path.to_str().filter(|s| ahead::remote::is_url(s)) {
        return run_url(url, engine, w);
    }
    let size = prepare(path, w)?;
    let (parts, streams) = parts_for(w, size);
    match engine {
        Engine::Kernel | Engine::KernelDirect => {
            let direct = matches!(engine, Engine::KernelDirect);
            let fd = Arc::new(
                ahead::testdata::open_read(path, direct)
                    .map_err(|e| crate::Error::msg(format!("open {}: {e}", path.display())))?,
            );
            let parts = split_for_depth(parts, w.depth);
            if w.warm {
                for p in &parts {
                    kernel_reads(&fd, direct, w.bs, p, None)?;
                }
            }
            timed_threads(parts, w.latency, |offs, lat| {
                kernel_reads(&fd, direct, w.bs, offs, lat)
            })
            .map(|m| Measurement { direct, ..m })
        }
        Engine::Ahead {
            config,
            zero_copy,
            mode,
        } => {
            let eng = AheadEngine::new(config.clone()).map_err(|e| e.to_string())?;
            read_with(&eng, path, *mode, parts, streams, w, *zero_copy)
        }
        Engine::DeviceLimit => {
            let all: Vec<u64> = parts.into_iter().flatten().collect();
            device_limit(path, w.bs, &all, w.depth.max(1))
        }
    }
}

/// Runs `w` on `path` through an engine the caller keeps from run to run,
/// as a long-running process keeps its cache (Direct, Buffered or Uncached
/// as `mode` says; the file is opened, read and closed).
pub fn run_kept(
    path: &Path,
    eng: &AheadEngine,
    mode: ahead::Mode,
    w: &Workload,
) -> crate::Result<Measurement> {
    let size = prepare(path, w)?;
    let (parts, streams) = parts_for(w, size);
    read_with(eng, path, mode, parts, streams, w, false)
}

/// Opens `path` in `eng` and runs the readers of `parts`.
fn read_with(
    eng: &AheadEngine,
    path: &Path,
    mode: ahead::Mode,
    parts: Vec<Vec<u64>>,
    streams: usize,
    w: &Workload,
    zero_copy: bool,
) -> crate::Result<Measurement> {
    let file = eng
        .open_with(path, &ahead::OpenOptions::new().mode(mode))
        .map_err(|e| e.to_string())?;
    measure_ahead(eng, &file, parts, streams, w, zero_copy)
}

/// The offsets each reader of `w` reads in a file of `size` bytes, and
/// how many streams read them.
fn parts_for(w: &Workload, size: u64) -> (Vec<Vec<u64>>, usize) {
    let mut offs = offsets(w.pattern, size, w.bs, w.seed);
    if w.bytes > 0 && !matches!(w.pattern, Pattern::Interleaved { .. }) {
        offs.truncate(w.bytes.div_ceil(w.bs) as usize);
    }
    let streams = match w.pattern {
        Pattern::Interleaved { n } => n,
        _ => 1,
    };
    // For interleaved streams: stream k reads the k-th part of the bytes
    // read, forward, each part to its end. (With the parts spread over the
    // whole file and cut short, as `--bytes` once did, every stream's last
    // windows read past where it stopped: `--quick` read 1.76 device bytes
    // per requested byte, in the kernel and in ahead alike, a measure of
    // where the run was cut rather than of the streams.)
    let parts: Vec<Vec<u64>> = if streams > 1 {
        let span =
            (if w.bytes > 0 { w.bytes.min(size) } else { size }) / streams as u64 / w.bs * w.bs;
        (0..streams as u64)
            .map(|k| (0..span / w.bs).map(|i| k * span + i * w.bs).collect())
            .collect()
    } else {
        vec![offs]
    };
    (parts, streams)
}

/// Runs the readers of `parts` through ahead's `file`.
fn measure_ahead(
    eng: &AheadEngine,
    file: &ahead::File,
    parts: Vec<Vec<u64>>,
    streams: usize,
    w: &Workload,
    zero_copy: bool,
) -> crate::Result<Measurement> {
    if w.warm {
        for p in &parts {
            ahead_reads(file, false, w.bs, p, None)?;
        }
    }
    let mut m = if w.depth > 1 && streams == 1 {
        let mut all = parts.into_iter().next().unwrap();
        ahead_at_depth(file, w.bs, &mut all, w.depth, w.latency)?
    } else {
        timed_threads(parts, w.latency, |offs, lat| {
            ahead_reads(file, zero_copy, w.bs, offs, lat)
        })?
    };
    ahead_counters(&mut m, eng, file);
    Ok(m)
}

/// What ahead's engine and file counted, into a measurement of them.
fn ahead_counters(m: &mut Measurement, eng: &AheadEngine, file: &ahead::File) {
    m.stats = Some(if file.mode() == ahead::Mode::Direct {
        // The file's own first, which counts the first uses the lock-free
        // hit path left for its policy's next look (`Engine::stats`).
        let _ = file.stats();
        eng.stats()
    } else {
        file.stats()
    });
    m.direct = file.is_direct();
    m.fixed_reads = Some(eng.fixed_reads());
    m.device_cost = eng.device_cost();
    m.readahead_tuning = eng.readahead_tuning();
    m.huge_pages = Some(eng.huge_pages());
    m.remote = file.remote_stats();
}

/// Spreads one stream over `depth` threads (round-robin), so that the
/// kernel's synchronous paths keep `depth` requests in flight.
fn split_for_depth(parts: Vec<Vec<u64>>, depth: usize) -> Vec<Vec<u64>> {
    if parts.len() != 1 || depth <= 1 {
        return parts;
    }
    let all = parts.into_iter().next().unwrap();
    let mut out = vec![Vec::new(); depth];
    for (i, o) in all.into_iter().enumerate() {
        out[i % depth].push(o);
    }
    out
}

/// Runs `body` on one thread per part and measures the whole.
fn timed_threads<F>(parts: Vec<Vec<u64>>, latency: bool, body: F) -> crate::Result<Measurement>
where
    F: Fn(&[u64], Option<&mut Vec<f64>>) -> crate::Result<u64> + Sync,
{
    let start = Clock::start();
    let results: Vec<crate::Result<(u64, Vec<f64>)>> = if parts.len() == 1 {
        let mut lat = Vec::new();
        vec![body(&parts[0], latency.then_some(&mut lat)).map(|b| (b, lat))]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .iter()
                .map(|p| {
                    let body = &body;
                    s.spawn(move || {
                        let mut lat = Vec::new();
                        body(p, latency.then_some(&mut lat)).map(|b| (b, lat))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("reader thread"))
                .collect()
        })
    };
    let (seconds, cpu_s) = start.finish();
    let cycles = start.cycles();
    let mut bytes = 0;
    let mut lat = Vec::new();
    for r in results {
        let (b, l) = r?;
        bytes += b;
        lat.extend(l);
    }
    Ok(Measurement {
        cycles,
        ..timed(bytes, seconds, cpu_s, &mut lat)
    })
}

/// Wall time and the process's CPU time (getrusage, all threads) from a
/// start.
struct Clock {
    wall: Instant,
    cpu: Option<f64>,
    cycles: Option<cycles::Cycles>,
}

/// The process's user + system CPU seconds so far.
pub fn process_cpu_s() -> Option<f64> {
    // SAFETY: getrusage writes the struct it is given, which is ours.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Some(t(ru.ru_utime) + t(ru.ru_stime))
}

impl Clock {
    fn start() -> Clock {
        Clock {
            cycles: cycles::Cycles::start(),
            cpu: process_cpu_s(),
            wall: Instant::now(),
        }
    }
    /// (wall seconds, CPU seconds) since the start.
    fn finish(&self) -> (f64, Option<f64>) {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = match (self.cpu, process_cpu_s()) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        (wall, cpu)
    }
    /// The process's CPU cycles since the start, read now (see
    /// [`cycles`]: call it once the run's threads have ended).
    fn cycles(&self) -> Option<u64> {
        self.cycles.as_ref()?.read()
    }
}

/// A measurement of `bytes` in `seconds`, with the median and 99th
/// percentile of the request latencies, if any were timed.
fn timed(bytes: u64, seconds: f64, cpu_s: Option<f64>, lat: &mut [f64]) -> Measurement {
    let (p50_us, p99_us) = percentiles(lat);
    Measurement {
        bytes,
        seconds,
        cpu_s,
        p50_us,
        p99_us,
        ..Measurement::default()
    }
}

fn percentiles(lat: &mut [f64]) -> (Option<f64>, Option<f64>) {
    use crate::report::percentile;
    (percentile(lat, 0.5), percentile(lat, 0.99))
}

/// Serves each offset with `read` (which returns the bytes it got),
/// timing each request when `lat` is given; returns the bytes in all.
fn timed_reads(
    offs: &[u64],
    mut lat: Option<&mut Vec<f64>>,
    mut read: impl FnMut(u64) -> crate::Result<usize>,
) -> crate::Result<u64> {
    let mut bytes = 0;
    for &o in offs {
        let t = Instant::now();
        let n = read(o)?;
        if let Some(l) = lat.as_deref_mut() {
            l.push(t.elapsed().as_secs_f64() * 1e6);
        }
        bytes += n as u64;
    }
    Ok(bytes)
}

fn kernel_reads(
    fd: &std::os::fd::OwnedFd,
    direct: bool,
    bs: u64,
    offs: &[u64],
    lat: Option<&mut Vec<f64>>,
) -> crate::Result<u64> {
    let file = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?);
    let mut aligned = AlignedBuf::new(bs as usize, 4096);
    let mut plain = vec![0u8; bs as usize];
    timed_reads(offs, lat, |o| {
        let buf = if direct {
            &mut aligned.as_mut_slice()[..bs as usize]
        } else {
            &mut plain[..]
        };
        let n = file
            .read_at(buf, o)
            .map_err(|e| crate::Error::msg(format!("pread at {o}: {e}")))?;
        std::hint::black_box(touch(&buf[..n]));
        Ok(n)
    })
}

/// Reads every byte of `b` (a sum of its 8-byte words), as a reader of
/// the data would: every engine's row times reading the bytes, not only
/// receiving them (zero-copy rows once timed bytes they never touched).
pub fn touch(b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(8);
    let mut sum = 0u64;
    for w in &mut words {
        sum = sum.wrapping_add(u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])));
    }
    for &x in words.remainder() {
        sum = sum.wrapping_add(x as u64);
    }
    sum
}

fn ahead_reads(
    file: &ahead::File,
    zero_copy: bool,
    bs: u64,
    offs: &[u64],
    lat: Option<&mut Vec<f64>>,
) -> crate::Result<u64> {
    let mut buf = vec![0u8; bs as usize];
    timed_reads(offs, lat, |o| {
        if zero_copy {
            let pages = file.read_pages(o, bs as usize).map_err(|e| e.to_string())?;
            let mut sum = 0u64;
            for c in pages.chunks() {
                sum = sum.wrapping_add(touch(c));
            }
            std::hint::black_box(sum);
            Ok(pages.len())
        } else {
            let n = file.read_at(&mut buf, o).map_err(|e| e.to_string())?;
            std::hint::black_box(touch(&buf[..n]));
            Ok(n)
        }
    })
}

fn ahead_at_depth(
    file: &ahead::File,
    bs: u64,
    offs: &mut [u64],
    depth: usize,
    latency: bool,
) -> crate::Result<Measurement> {
    let mut bufs: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; bs as usize]).collect();
    let start = Clock::start();
    let mut bytes = 0;
    let mut lat = Vec::new();
    for batch in offs.chunks(depth) {
        let t = Instant::now();
        let mut reqs: Vec<(u64, &mut [u8])> = batch
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&o, b)| (o, b.as_mut_slice()))
            .collect();
        for r in file.read_many(&mut reqs) {
            bytes += r.map_err(|e| e.to_string())? as u64;
        }
        if latency {
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let (seconds, cpu_s) = start.finish();
    Ok(Measurement {
        cycles: start.cycles(),
        ..timed(bytes, seconds, cpu_s, &mut lat)
    })
}

/// Reads `offs` (each `bs` bytes) with O_DIRECT through io_uring, `depth`
/// in flight.
fn device_limit(path: &Path, bs: u64, offs: &[u64], depth: usize) -> crate::Result<Measurement> {
    let fd = Arc::new(
        ahead::testdata::open_read(path, true)
            .map_err(|e| crate::Error::msg(format!("open {}: {e}", path.display())))?,
    );
    let ring =
        ahead::io::Uring::new(depth).map_err(|e| crate::Error::msg(format!("io_uring: {e}")))?;
    type Done = (ReadOp, std::io::Result<usize>);
    let (tx, rx) = std::sync::mpsc::channel::<Done>();
    // Buffers are recycled: allocating a zeroed buffer per read would cost
    // more than the read at these sizes.
    let mut free: Vec<IoBuf> = Vec::new();
    let mut bytes = 0u64;
    let mut pending = 0usize;
    let mut error = None;
    let mut take = |(op, r): Done, free: &mut Vec<IoBuf>| {
        free.push(op.buf);
        match r {
            Ok(n) => bytes += n as u64,
            Err(e) => error = Some(e),
        }
    };
    let start = Clock::start();
    for &o in offs {
        let tx = tx.clone();
        let buf = free
            .pop()
            .unwrap_or_else(|| IoBuf::Owned(AlignedBuf::new(bs as usize, 4096)));
        ring.submit(
            ReadOp {
                source: fd.clone(),
                offset: o,
                len: bs as usize,
                buf,
                flags: 0,
                known_miss: false,
            },
            Box::new(move |op, r| {
                let _ = tx.send((op, r));
            }),
        );
        pending += 1;
        while let Ok(d) = rx.try_recv() {
            pending -= 1;
            take(d, &mut free);
        }
    }
    while pending > 0 {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(d) => take(d, &mut free),
            Err(_) => return Err("device-limit reads did not complete".into()),
        }
        pending -= 1;
    }
    let (seconds, cpu_s) = start.finish();
    let cycles = start.cycles();
    if let Some(e) = error {
        return Err(format!("read {}: {e}", path.display()).into());
    }
    Ok(Measurement {
        bytes,
        seconds,
        cpu_s,
        cycles,
        direct: true,
        ..Measurement::default()
    })
}
