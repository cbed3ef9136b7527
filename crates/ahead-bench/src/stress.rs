//! `ahead stress`: many threads read files through one engine whose cache is
//! much smaller than the data, with every pattern the engine knows —
//! forward, backward, strided and random streams, requests of 1 byte to
//! 1 MiB — and every byte is compared with what the kernel returns on a
//! separate descriptor. A watchdog fails the run when a thread makes no
//! progress for [`HANG_AFTER`]. With faults injected (`io::fault`), an
//! injected error must come back as an error, never as wrong bytes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahead::io::fault::{Fault, FaultKind, FaultPath, Rule};
use ahead::{Engine, EngineConfig};

/// A thread that has not finished a request for this long is hung.
pub const HANG_AFTER: Duration = Duration::from_secs(10);
/// Largest request.
const MAX_REQUEST: u64 = 1 << 20;

/// Faults to inject.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Faults {
    /// EIO on this share of reads (both paths).
    Eio(f64),
    /// Completions delayed by this long on this share of backend reads.
    Delay(Duration, f64),
}

impl std::str::FromStr for Faults {
    type Err = crate::Error;
    /// `eio:P` or `delay:MS:P`, P a probability in (0, 1].
    fn from_str(s: &str) -> crate::Result<Faults> {
        let prob = |p: &str| -> crate::Result<f64> {
            let v: f64 = p
                .parse()
                .map_err(|_| format!("'{p}' is not a probability"))?;
            if v > 0.0 && v <= 1.0 {
                Ok(v)
            } else {
                Err(format!("probability {v} is not in (0, 1]").into())
            }
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["eio", p] => Ok(Faults::Eio(prob(p)?)),
            ["delay", ms, p] => {
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("'{ms}' is not milliseconds"))?;
                Ok(Faults::Delay(Duration::from_millis(ms), prob(p)?))
            }
            _ => Err(format!("unknown fault spec '{s}' (eio:P or delay:MS:P)").into()),
        }
    }
}

/// How to stress.
#[derive(Clone, Debug)]
pub struct StressConfig {
    /// Files to read (at least one, none empty).
    pub files: Vec<PathBuf>,
    /// How long.
    pub duration: Duration,
    /// Reader threads.
    pub threads: usize,
    /// The engine's cache budget.
    pub cache_bytes: u64,
    /// Faults to inject, if any.
    pub faults: Option<Faults>,
    /// Seed of the request generator (and of the fault injector).
    pub seed: u64,
}

/// What a stress run found.
#[derive(Clone, Debug, Default)]
pub struct StressReport {
    /// Bytes returned by the engine and found equal to the kernel's.
    pub bytes_verified: u64,
    /// Requests made.
    pub requests: u64,
    /// Requests whose bytes or length differed from the kernel's.
    pub mismatches: u64,
    /// Errors that no fault explains.
    pub errors: u64,
    /// Errors that an injected fault explains.
    pub injected_errors: u64,
    /// Faults the injector applied.
    pub injected_faults: u64,
    /// Pages found cached, and how many of them the lock-free hit path
    /// served.
    pub hits: u64,
    /// See `hits`.
    pub lock_free_hits: u64,
    /// Most cache memory seen in use (sampled).
    pub peak_cache_bytes: u64,
    /// The budget.
    pub cache_budget_bytes: u64,
    /// Whether a thread stopped making progress.
    pub hung: bool,
    /// Wall time.
    pub seconds: f64,
    /// The first few problems, described.
    pub problems: Vec<String>,
}

impl StressReport {
    /// Whether the run passed: no mismatch, no unexplained error, no hang.
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && self.errors == 0 && !self.hung
    }
}

/// A request pattern one thread follows for a while.
#[derive(Clone, Copy, Debug)]
enum Stream {
    Forward,
    Backward,
    /// Runs of the request size every `gap` bytes.
    Strided(u64),
    Random,
}

/// Runs the stress test. Errors: the files cannot be opened, or the engine
/// not made.
pub fn run(cfg: &StressConfig) -> crate::Result<StressReport> {
    if cfg.files.is_empty() || cfg.threads == 0 {
        return Err("stress needs at least one file and one thread".into());
    }
    let max_readahead = (cfg.cache_bytes / 4).clamp(4096, 4 << 20);
    let config = EngineConfig::default()
        .with_cache_bytes(cfg.cache_bytes)
        .with_max_readahead(max_readahead);
    let inner = ahead::io::new_backend(config.backend, config.depth).map_err(|e| e.to_string())?;
    let fault = Fault::new(inner, cfg.seed);
    match cfg.faults {
        Some(Faults::Eio(p)) => fault.add(Rule {
            range: 0..u64::MAX,
            kind: FaultKind::Error(libc::EIO),
            path: FaultPath::Both,
            probability: p,
            times: None,
        }),
        Some(Faults::Delay(d, p)) => fault.add(Rule {
            range: 0..u64::MAX,
            kind: FaultKind::Delay(d),
            path: FaultPath::Backend,
            probability: p,
            times: None,
        }),
        None => {}
    }
    let engine = Engine::with_backend(config, fault.clone()).map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    for p in &cfg.files {
        let f = engine.open(p).map_err(|e| e.to_string())?;
        let reference =
            File::open(p).map_err(|e| crate::Error::msg(format!("{}: {e}", p.display())))?;
        if f.is_empty() {
            return Err(format!("{}: empty", p.display()).into());
        }
        files.push((f, reference));
    }
    let files = Arc::new(files);
    let stop = Arc::new(AtomicBool::new(false));
    let beats: Arc<Vec<AtomicU64>> =
        Arc::new((0..cfg.threads).map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let counts = Arc::new(Counts::default());
    let workers: Vec<_> = (0..cfg.threads)
        .map(|t| {
            let (files, stop, beats, counts) =
                (files.clone(), stop.clone(), beats.clone(), counts.clone());
            let seed = cfg.seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let faults = cfg.faults.is_some();
            std::thread::spawn(move || {
                reader(&files, &stop, &beats[t], &counts, seed, faults, started)
            })
        })
        .collect();
    // The watchdog: progress of every thread, and the cache's occupancy.
    let mut hung = false;
    let mut peak = 0;
    let deadline = started + cfg.duration;
    let mut last: Vec<(u64, Instant)> = vec![(0, started); cfg.threads];
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        peak = peak.max(engine.cached_bytes());
        for (t, beat) in beats.iter().enumerate() {
            let b = beat.load(Ordering::Relaxed);
            if b != last[t].0 {
                last[t] = (b, Instant::now());
            } else if last[t].1.elapsed() > HANG_AFTER {
                hung = true;
            }
        }
        if hung {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    if hung {
        // A hung thread cannot be joined; report now.
        let mut r = counts.report();
        r.hung = true;
        r.problems
            .push(format!("a reader made no progress for {HANG_AFTER:?}"));
        r.peak_cache_bytes = peak;
        r.cache_budget_bytes = cfg.cache_bytes;
        r.injected_faults = fault.injected();
        r.seconds = started.elapsed().as_secs_f64();
        return Ok(r);
    }
    for w in workers {
        if w.join().is_err() {
            counts.problem("a reader thread panicked".into(), &counts.errors);
        }
    }
    let mut r = counts.report();
    r.peak_cache_bytes = peak.max(engine.cached_bytes());
    let stats = engine.stats();
    r.hits = stats.hits;
    r.lock_free_hits = stats.lock_free_hits;
    r.cache_budget_bytes = cfg.cache_bytes;
    r.injected_faults = fault.injected();
    r.seconds = started.elapsed().as_secs_f64();
    Ok(r)
}

#[derive(Default)]
struct Counts {
    bytes: AtomicU64,
    requests: AtomicU64,
    mismatches: AtomicU64,
    errors: AtomicU64,
    injected: AtomicU64,
    problems: std::sync::Mutex<Vec<String>>,
}

impl Counts {
    fn problem(&self, what: String, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
        let mut p = self.problems.lock().unwrap_or_else(|p| p.into_inner());
        if p.len() < 10 {
            p.push(what);
        }
    }

    fn report(&self) -> StressReport {
        StressReport {
            bytes_verified: self.bytes.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            mismatches: self.mismatches.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            injected_errors: self.injected.load(Ordering::Relaxed),
            problems: self
                .problems
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            ..StressReport::default()
        }
    }
}

/// One reader thread: streams of 8–64 requests, each stream a pattern, a
/// file and a request size drawn anew.
fn reader(
    files: &[(ahead::File, File)],
    stop: &AtomicBool,
    beat: &AtomicU64,
    counts: &Counts,
    seed: u64,
    faults: bool,
    started: Instant,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut buf = vec![0u8; MAX_REQUEST as usize];
    let mut want = vec![0u8; MAX_REQUEST as usize];
    while !stop.load(Ordering::Relaxed) {
        let (file, reference) = &files[rng.usize(..files.len())];
        let size = file.len();
        // Log-uniform request sizes: 1 B to 1 MiB.
        let len = (1u64 << rng.u32(0..=20)).min(size).max(1);
        let len = rng.u64(len / 2 + 1..=len).min(MAX_REQUEST);
        let stream = match rng.u32(0..4) {
            0 => Stream::Forward,
            1 => Stream::Backward,
            2 => Stream::Strided(len * rng.u64(2..8)),
            _ => Stream::Random,
        };
        let mut at = rng.u64(0..size);
        for _ in 0..rng.u32(8..64) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let off = match stream {
                Stream::Random => rng.u64(0..size),
                _ => at,
            };
            let n = len as usize;
            match file.read_at(&mut buf[..n], off) {
                Ok(got) => {
                    let expect = read_full(reference, &mut want[..n], off);
                    match expect {
                        Ok(k) if k == got && buf[..got] == want[..got] => {
                            counts.bytes.fetch_add(got as u64, Ordering::Relaxed);
                        }
                        Ok(k) => counts.problem(
                            format!(
                                "{}: {n} bytes at {off}: ahead returned {got} bytes, the kernel {k}{}",
                                file.path().display(),
                                if k == got { ", with other bytes" } else { "" }
                            ),
                            &counts.mismatches,
                        ),
                        Err(e) => counts.problem(
                            format!("{}: the kernel's read at {off}: {e}", file.path().display()),
                            &counts.errors,
                        ),
                    }
                }
                Err(e) if faults && e.raw_os_error() == Some(libc::EIO) => {
                    counts.injected.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => counts.problem(format!("{e}"), &counts.errors),
            }
            counts.requests.fetch_add(1, Ordering::Relaxed);
            beat.store(started.elapsed().as_nanos() as u64 | 1, Ordering::Relaxed);
            at = match stream {
                Stream::Forward => (off + len) % size,
                Stream::Backward => off.checked_sub(len).unwrap_or(size.saturating_sub(len)),
                Stream::Strided(gap) => (off + gap) % size,
                Stream::Random => off,
            };
        }
    }
}

/// Reads `buf.len()` bytes at `offset` with pread, short only at the end.
fn read_full(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_specs_parse_and_bad_ones_are_refused() {
        assert_eq!("eio:0.5".parse::<Faults>(), Ok(Faults::Eio(0.5)));
        assert_eq!(
            "delay:20:1".parse::<Faults>(),
            Ok(Faults::Delay(Duration::from_millis(20), 1.0))
        );
        for bad in ["eio", "eio:0", "eio:2", "delay:x:0.5", "nope:1"] {
            assert!(bad.parse::<Faults>().is_err(), "{bad}");
        }
    }
}
