//! The scenarios: the benchmarks of the on-demand RFC and Bhattacharya's AIO
//! readahead patch (docs/references.md), and the ones ahead is built for.
//!
//! | scenario | what runs | defaults |
//! |---|---|---|
//! | `iozone` | iozone's read tests in iozone's order on one file, the cache carried over from test to test: `read`, `re-read`, `reverse`, `stride` (17 records), `random`, `mixed`, `pread` (the on-demand RFC: `iozone -c -t1 -s 4096m -r 64k`) | 4 GiB file, 64 KiB records, 2 GiB memory, 1 MiB max readahead |
//! | `aio-random` | random reads at depth 64, each record once (Bhattacharya's AIO readahead patch: `aio-stress -o3`, 64 KiB, depth 64) | 1 GiB file, 64 KiB, 2 GiB memory, 128 KiB max |
//! | `interleaved` | `single`: one sequential reader; `interleaved-8`: 8 sequential readers on 8 regions of one file, one handle | 1 GiB file, 64 KiB, 2 GiB memory, 4 MiB max |
//! | `thrash` | a 100 KB/s reader started every second on its own file until 200 run (the on-demand RFC's thrashing test) | 200 × 32 MiB files, 4 KiB records, 128 MiB memory, 1 MiB max |
//! | `remote` | `ahead bench remote`'s patterns on one object (`seq`, `seq-64k`, `reverse`, `stride`, `random-4k`, `random-64k` at depth 64, `interleaved-8`), each on a fresh cache, GETs of at most 4 MiB; with `--device s3`, a prediction of that benchmark's `ahead` rows | 1 GiB object, 256 MiB memory, 64 MiB max readahead |
//! | `replay FILE` | a trace, one read per line: `offset length [stream-id]`; each stream a reader | file sized to the trace, 2 GiB memory, 128 KiB max |
//!
//! Before iozone's read tests, the cache holds the file's last `memory`
//! bytes, as iozone's preceding write test leaves it.

use crate::device::DeviceKind;
use crate::engine::{EngineConfig, Op, PhaseStats, ReaderSpec, SimPolicy, Simulator};
use ahead::ra::RaConfig;
use ahead::testdata::column_order;
use ahead::units::{format_size, GIB, KIB, MIB};
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;

mod remote;
mod trace;

pub use trace::{load_trace, parse_trace, Trace, TraceFile, TraceOp};

/// Page size used by the simulator.
pub const PAGE: u64 = 4096;

/// iozone's default stride for the stride-read test, in records
/// (`iozone -j`, default 17).
pub const IOZONE_STRIDE: u64 = 17;

/// The thrashing test's reader rate: 100 KB/s (the on-demand RFC), as 4 KiB
/// reads every 40 ms.
pub const THRASH_INTERVAL: f64 = 0.04;
/// Readers in the thrashing test, one started per second (the on-demand RFC).
pub const THRASH_STREAMS: usize = 200;
/// How long the thrashing test runs: the last reader starts at 199 s and
/// runs for 40 s more.
pub const THRASH_SECONDS: f64 = 240.0;
/// Width of the moving window over which the thrashing test's throughput
/// and I/O size are reported (iostat/vmstat-style sampling), seconds.
pub const THRASH_SAMPLE: usize = 5;

/// Which scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// iozone's read tests.
    Iozone,
    /// aio-stress random reads at depth.
    AioRandom,
    /// One vs eight interleaved sequential readers.
    Interleaved,
    /// The readahead thrashing test.
    Thrash,
    /// `ahead bench remote`'s patterns on one object.
    Remote,
    /// Replay of a trace file.
    Replay(PathBuf),
}

impl Scenario {
    /// Name as typed on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Iozone => "iozone",
            Scenario::AioRandom => "aio-random",
            Scenario::Interleaved => "interleaved",
            Scenario::Thrash => "thrash",
            Scenario::Remote => "remote",
            Scenario::Replay(_) => "replay",
        }
    }

    /// Parses a scenario name (`replay` takes the trace path separately).
    pub fn parse(name: &str, trace: Option<PathBuf>) -> Result<Scenario, SimError> {
        match name {
            "iozone" => Ok(Scenario::Iozone),
            "aio-random" => Ok(Scenario::AioRandom),
            "interleaved" => Ok(Scenario::Interleaved),
            "thrash" => Ok(Scenario::Thrash),
            "remote" => Ok(Scenario::Remote),
            "replay" => trace
                .map(Scenario::Replay)
                .ok_or_else(|| SimError::Usage("replay needs a trace file: ahead sim replay FILE".into())),
            other => Err(SimError::Usage(format!(
                "unknown scenario '{other}' (expected iozone, aio-random, interleaved, thrash, remote or replay FILE)"
            ))),
        }
    }

    fn defaults(&self) -> Defaults {
        match self {
            Scenario::Iozone => Defaults {
                file: 4 * GIB,
                record: 64 * KIB,
                memory: 2 * GIB,
                max_ra: MIB,
            },
            Scenario::AioRandom => Defaults {
                file: GIB,
                record: 64 * KIB,
                memory: 2 * GIB,
                max_ra: 128 * KIB,
            },
            Scenario::Interleaved => Defaults {
                file: GIB,
                record: 64 * KIB,
                memory: 2 * GIB,
                max_ra: 4 * MIB,
            },
            Scenario::Thrash => Defaults {
                file: 32 * MIB,
                record: 4 * KIB,
                memory: 128 * MIB,
                max_ra: MIB,
            },
            Scenario::Remote => Defaults {
                file: GIB,
                record: 64 * KIB,
                memory: 256 * MIB,
                max_ra: 64 * MIB,
            },
            Scenario::Replay(_) => Defaults {
                file: 0,
                record: 0,
                memory: 2 * GIB,
                max_ra: 128 * KIB,
            },
        }
    }
}

struct Defaults {
    file: u64,
    record: u64,
    memory: u64,
    max_ra: u64,
}

/// Options of a simulation run; `None` takes the scenario's default.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Policies to compare.
    pub policies: Vec<SimPolicy>,
    /// Device model.
    pub device: DeviceKind,
    /// Cache budget in bytes.
    pub memory: Option<u64>,
    /// Record (request) size in bytes.
    pub record: Option<u64>,
    /// Maximum readahead window in bytes.
    pub max_readahead: Option<u64>,
    /// File size in bytes.
    pub file_size: Option<u64>,
    /// `replay`: only the reads of this file (its trace id, path or name).
    pub trace_file: Option<String>,
    /// Seed of the random workloads.
    pub seed: u64,
    /// Context readahead in `ondemand` ([`RaConfig::context_readahead`]).
    pub context_readahead: bool,
    /// `replay`: one reader per thread of the traced program, each read
    /// after the program's time since the one before, from the trace's
    /// timestamps, times this factor (`--timed`; below 1 to take off what
    /// tracing added), where the reads of each stream otherwise follow one
    /// another with no time between and the streams run at once (`None`).
    pub timed: Option<f64>,
    /// The kernel reads ahead in large folios (`--large-folios`), as ext4
    /// does on this machine's 6.18 ([`EngineConfig::large_folios`]).
    pub large_folios: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            policies: SimPolicy::ENGINES.to_vec(),
            device: DeviceKind::Hdd,
            memory: None,
            record: None,
            max_readahead: None,
            file_size: None,
            trace_file: None,
            seed: 42,
            context_readahead: true,
            timed: None,
            large_folios: false,
        }
    }
}

/// Errors of the simulator.
#[derive(Debug)]
#[non_exhaustive]
pub enum SimError {
    /// Bad arguments.
    Usage(String),
    /// A trace line that does not parse.
    Trace {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The trace could not be read.
    Io {
        /// The trace file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Usage(m) => f.write_str(m),
            SimError::Trace { path, line, reason } => {
                write!(f, "{}:{}: {}", path.display(), line, reason)
            }
            SimError::Io { path, source } => write!(f, "{}: {}", path.display(), source),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// One (workload, policy) result. The JSON field names are a stable
/// interface for scripts.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimResult {
    /// Scenario name.
    pub scenario: String,
    /// Workload within the scenario.
    pub workload: String,
    /// Readahead policy.
    pub policy: String,
    /// Device model.
    pub device: String,
    /// Request size in KiB (for a trace, the mean).
    pub record_kib: f64,
    /// Bytes delivered to readers per second of virtual time, in MB/s
    /// (10^6 bytes).
    pub throughput_mb_s: f64,
    /// Mean device I/O size in KiB.
    pub avg_io_kib: f64,
    /// Requested pages found cached (read ahead in time, or left by an
    /// earlier workload).
    pub hit_ratio: f64,
    /// Readahead pages never used (evicted before use, or unused at the end)
    /// over readahead pages read.
    pub waste_ratio: f64,
    /// Readahead pages evicted before any reader used them.
    pub evicted_before_use_pages: u64,
    /// Requests that waited for a page readahead had already asked for.
    pub late_prefetches: u64,
    /// Bytes read from the device over bytes requested.
    pub read_amplification: f64,
    /// Bytes requested, in MB.
    pub requested_mb: f64,
    /// Virtual seconds the workload took.
    pub seconds: f64,
    /// Thrash only: the best throughput over any 5 s window, MB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_throughput_mb_s: Option<f64>,
    /// Thrash only: the smallest mean device I/O size over any 5 s window
    /// (after the first 10 s), KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_avg_io_kib: Option<f64>,
    /// Thrash only: delivered MB/s per second of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline_mb_s: Option<Vec<f64>>,
    /// `false` on `ondemand` rows run without context readahead; absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_readahead: Option<bool>,
    /// Replay only: the kernel's largest readahead window, KiB (given, the
    /// trace's `# readahead` line, or the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_readahead_kib: Option<u64>,
    /// Timed replay only: seconds from the trace's first read to its last,
    /// as the traced run took them (its computing and its reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_s: Option<f64>,
}

fn result(
    scenario: &str,
    workload: &str,
    policy: SimPolicy,
    device: DeviceKind,
    record: f64,
    s: &PhaseStats,
) -> SimResult {
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    SimResult {
        scenario: scenario.into(),
        workload: workload.into(),
        policy: policy.name().into(),
        device: device.name().into(),
        record_kib: record / KIB as f64,
        throughput_mb_s: if s.seconds > 0.0 {
            s.bytes_requested as f64 / s.seconds / 1e6
        } else {
            0.0
        },
        avg_io_kib: ratio(s.device_bytes, s.device_ios) / KIB as f64,
        hit_ratio: ratio(s.pages_hit, s.pages_requested),
        waste_ratio: ratio(s.evicted_before_use + s.unused_at_end, s.readahead_pages),
        evicted_before_use_pages: s.evicted_before_use,
        late_prefetches: s.late_prefetches,
        read_amplification: ratio(s.device_bytes, s.bytes_requested),
        requested_mb: s.bytes_requested as f64 / 1e6,
        seconds: s.seconds,
        peak_throughput_mb_s: None,
        min_avg_io_kib: None,
        timeline_mb_s: None,
        context_readahead: None,
        max_readahead_kib: None,
        program_s: None,
    }
}

/// Checked settings of one run.
struct Setup {
    file: u64,
    record: u64,
    memory: u64,
    max_ra_pages: u64,
    /// The replayed files were advised random ([`ahead::ra::RaConfig::random_advice`]).
    random_advice: bool,
}

fn setup(sc: &Scenario, o: &SimOptions) -> Result<Setup, SimError> {
    let d = sc.defaults();
    let file = o.file_size.unwrap_or(d.file);
    let record = o.record.unwrap_or(d.record);
    let memory = o.memory.unwrap_or(d.memory);
    let max_ra = o.max_readahead.unwrap_or(d.max_ra);
    if max_ra < PAGE {
        return Err(SimError::Usage(format!(
            "max readahead {} is smaller than one page ({PAGE} B)",
            format_size(max_ra)
        )));
    }
    // The cache must hold at least a window being read and the one after
    // it, or readahead evicts itself.
    if memory < 2 * max_ra {
        return Err(SimError::Usage(format!(
            "memory budget {} is smaller than two readahead windows of {} (use --memory of at least {})",
            format_size(memory),
            format_size(max_ra),
            format_size(2 * max_ra)
        )));
    }
    if !matches!(sc, Scenario::Replay(_)) {
        if record == 0 {
            return Err(SimError::Usage(
                "record size must be at least 1 byte".into(),
            ));
        }
        if file < record {
            return Err(SimError::Usage(format!(
                "file size {} is smaller than one record of {}",
                format_size(file),
                format_size(record)
            )));
        }
    }
    Ok(Setup {
        file,
        record,
        memory,
        max_ra_pages: max_ra / PAGE,
        random_advice: false,
    })
}

/// Runs `one` for every policy of `o`, each on its own thread (the policies'
/// simulations share nothing), and returns the results in policy order.
/// Every run is deterministic on its own, so the results are the same as
/// one after the other, in a fraction of the wall time.
fn per_policy(o: &SimOptions, one: impl Fn(SimPolicy) -> Vec<SimResult> + Sync) -> Vec<SimResult> {
    let one = &one;
    std::thread::scope(|scope| {
        let runs: Vec<_> = o
            .policies
            .iter()
            .map(|&policy| scope.spawn(move || one(policy)))
            .collect();
        runs.into_iter()
            .flat_map(|r| r.join().expect("a simulation thread panicked"))
            .collect()
    })
}

fn engine(s: &Setup, o: &SimOptions, policy: SimPolicy, files: &[u64], bucket: f64) -> Simulator {
    Simulator::new(engine_config(s, o, policy, bucket), files, o.device.build())
}

fn engine_config(s: &Setup, o: &SimOptions, policy: SimPolicy, bucket: f64) -> EngineConfig {
    // Large folios are the kernel's page cache: not ahead's own (Direct
    // mode's), which keeps 4 KiB pages and marks.
    let folios = o.large_folios && policy != SimPolicy::Engine(ahead::ra::PolicyKind::Ahead);
    EngineConfig {
        page_size: PAGE,
        memory_pages: s.memory / PAGE,
        policy,
        ra: {
            let mut ra = RaConfig::with_max_pages(s.max_ra_pages);
            ra.context_readahead = o.context_readahead;
            ra.random_advice = s.random_advice;
            ra.large_folios = folios;
            ra
        },
        // The kernel splits at the device's max_sectors_kb; 1 MiB is
        // common for SATA and NVMe alike.
        max_io_pages: (MIB / PAGE).max(s.max_ra_pages),
        bucket,
        large_folios: folios,
    }
}

fn reader(file: usize, ops: impl Iterator<Item = (u64, u64)> + 'static) -> ReaderSpec {
    ReaderSpec {
        file,
        start: 0.0,
        interval: 0.0,
        depth: 1,
        ops: Box::new(ops.map(Op::from)),
        page_faults: false,
    }
}

/// Runs a scenario for every policy in the options.
pub fn run(sc: &Scenario, o: &SimOptions) -> Result<Vec<SimResult>, SimError> {
    if o.policies.is_empty() {
        return Err(SimError::Usage("no policy given".into()));
    }
    let mut rows = match sc {
        Scenario::Iozone => iozone(sc, o),
        Scenario::AioRandom => aio_random(sc, o),
        Scenario::Interleaved => interleaved(sc, o),
        Scenario::Thrash => thrash(sc, o),
        Scenario::Remote => remote::remote(sc, o),
        Scenario::Replay(path) => trace::replay(sc, o, path),
    }?;
    if !o.context_readahead {
        for r in rows.iter_mut().filter(|r| r.policy == "ondemand") {
            r.context_readahead = Some(false);
        }
    }
    Ok(rows)
}

fn iozone(sc: &Scenario, o: &SimOptions) -> Result<Vec<SimResult>, SimError> {
    let s = setup(sc, o)?;
    let (file, rec) = (s.file, s.record);
    let records = file / rec;
    let pages = file.div_ceil(PAGE);
    Ok(per_policy(o, |policy| {
        let mut out = Vec::new();
        let mut e = engine(&s, o, policy, &[pages], 0.0);
        // The write test before the reads leaves the file's tail cached.
        let tail = (s.memory / PAGE).min(pages);
        e.prefill(0, pages - tail, pages);
        let seed = o.seed;
        type Gen = Box<dyn Fn() -> Box<dyn Iterator<Item = (u64, u64)>>>;
        let workloads: Vec<(&str, Gen)> = vec![
            (
                "read",
                Box::new(move || Box::new((0..records).map(move |i| (i * rec, rec)))),
            ),
            (
                "re-read",
                Box::new(move || Box::new((0..records).map(move |i| (i * rec, rec)))),
            ),
            (
                "reverse",
                Box::new(move || Box::new((0..records).rev().map(move |i| (i * rec, rec)))),
            ),
            ("stride", Box::new(move || stride_records(records, rec))),
            (
                "random",
                Box::new(move || random_records(seed, records, rec)),
            ),
            (
                "mixed",
                Box::new(move || random_records(seed ^ 0x9e37, records, rec)),
            ),
            (
                "pread",
                Box::new(move || Box::new((0..records).map(move |i| (i * rec, rec)))),
            ),
        ];
        for (name, gen) in workloads {
            let stats = e.run_phase(vec![reader(0, gen())]);
            out.push(result(
                sc.name(),
                name,
                policy,
                o.device,
                rec as f64,
                &stats,
            ));
        }
        out
    }))
}

/// iozone's stride read: the file as rows of 17 records, read column by
/// column ([`ahead::testdata::column_order`]).
fn stride_records(records: u64, rec: u64) -> Box<dyn Iterator<Item = (u64, u64)>> {
    Box::new(column_order(records, IOZONE_STRIDE).map(move |r| (r * rec, rec)))
}

/// As many records as the file holds, each drawn uniformly at random (with
/// replacement, seeded): iozone's random read draws each offset from its
/// random generator.
fn random_records(seed: u64, records: u64, rec: u64) -> Box<dyn Iterator<Item = (u64, u64)>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    Box::new((0..records).map(move |_| (rng.u64(0..records) * rec, rec)))
}

fn aio_random(sc: &Scenario, o: &SimOptions) -> Result<Vec<SimResult>, SimError> {
    let s = setup(sc, o)?;
    let records = s.file / s.record;
    let pages = s.file.div_ceil(PAGE);
    Ok(per_policy(o, |policy| {
        let mut out = Vec::new();
        let mut e = engine(&s, o, policy, &[pages], 0.0);
        // Every record once, in random order (aio-stress's random mode).
        let mut order: Vec<u64> = (0..records).collect();
        fastrand::Rng::with_seed(o.seed).shuffle(&mut order);
        let rec = s.record;
        let stats = e.run_phase(vec![ReaderSpec {
            file: 0,
            start: 0.0,
            interval: 0.0,
            depth: 64,
            ops: Box::new(order.into_iter().map(move |r| (r * rec, rec).into())),
            page_faults: false,
        }]);
        let name = format!("random-{}k", rec / KIB);
        out.push(result(
            sc.name(),
            &name,
            policy,
            o.device,
            rec as f64,
            &stats,
        ));
        out
    }))
}

fn interleaved(sc: &Scenario, o: &SimOptions) -> Result<Vec<SimResult>, SimError> {
    const STREAMS: u64 = 8;
    let s = setup(sc, o)?;
    let rec = s.record;
    let pages = s.file.div_ceil(PAGE);
    let region = s.file / STREAMS / rec * rec;
    if region == 0 {
        return Err(SimError::Usage(
            "file too small for 8 streams of one record".into(),
        ));
    }
    Ok(per_policy(o, |policy| {
        let mut out = Vec::new();
        let mut e = engine(&s, o, policy, &[pages], 0.0);
        let total = region * STREAMS;
        let single = e.run_phase(vec![reader(
            0,
            (0..total / rec).map(move |i| (i * rec, rec)),
        )]);
        out.push(result(
            sc.name(),
            "single",
            policy,
            o.device,
            rec as f64,
            &single,
        ));
        // A fresh cache for the interleaved run.
        let mut e = engine(&s, o, policy, &[pages], 0.0);
        let readers = (0..STREAMS)
            .map(|k| {
                reader(
                    0,
                    (0..region / rec).map(move |i| (k * region + i * rec, rec)),
                )
            })
            .collect();
        let inter = e.run_phase(readers);
        out.push(result(
            sc.name(),
            "interleaved-8",
            policy,
            o.device,
            rec as f64,
            &inter,
        ));
        out
    }))
}

fn thrash(sc: &Scenario, o: &SimOptions) -> Result<Vec<SimResult>, SimError> {
    let s = setup(sc, o)?;
    let rec = s.record;
    let pages = s.file.div_ceil(PAGE);
    let files = vec![pages; THRASH_STREAMS];
    Ok(per_policy(o, |policy| {
        let mut out = Vec::new();
        let mut e = engine(&s, o, policy, &files, 1.0);
        let interval = THRASH_INTERVAL * rec as f64 / (4 * KIB) as f64;
        let readers = (0..THRASH_STREAMS)
            .map(|k| {
                let start = k as f64;
                let n = ((THRASH_SECONDS - start) / interval) as u64;
                let n = n.min(s.file / rec);
                ReaderSpec {
                    file: k,
                    start,
                    interval,
                    depth: 1,
                    ops: Box::new((0..n).map(move |i| (i * rec, rec).into())),
                    page_faults: false,
                }
            })
            .collect();
        let stats = e.run_phase(readers);
        let mut r = result(sc.name(), "thrash", policy, o.device, rec as f64, &stats);
        let tl = &stats.timeline;
        let w = THRASH_SAMPLE;
        let mut peak: f64 = 0.0;
        let mut min_io = f64::INFINITY;
        for i in 0..tl.len().saturating_sub(w - 1) {
            let slice = &tl[i..i + w];
            let delivered: u64 = slice.iter().map(|b| b.0).sum();
            let dev: u64 = slice.iter().map(|b| b.1).sum();
            let ios: u64 = slice.iter().map(|b| b.2).sum();
            peak = peak.max(delivered as f64 / w as f64 / 1e6);
            if i >= 10 && ios > 0 && (i + w) as f64 <= THRASH_SECONDS {
                min_io = min_io.min(dev as f64 / ios as f64 / KIB as f64);
            }
        }
        r.peak_throughput_mb_s = Some(peak);
        r.min_avg_io_kib = Some(if min_io.is_finite() { min_io } else { 0.0 });
        r.timeline_mb_s = Some(tl.iter().map(|b| b.0 as f64 / 1e6).collect());
        out.push(r);
        out
    }))
}

#[cfg(test)]
mod tests;
