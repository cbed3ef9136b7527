//! The scenarios: the seeds' benchmarks, and the ones ahead is built for.
//!
//! | scenario | what runs | defaults |
//! |---|---|---|
//! | `iozone` | iozone's read tests in iozone's order on one file, the cache carried over from test to test: `read`, `re-read`, `reverse`, `stride` (17 records), `random`, `mixed`, `pread` (seed 000: `iozone -c -t1 -s 4096m -r 64k`) | 4 GiB file, 64 KiB records, 2 GiB memory, 1 MiB max readahead |
//! | `aio-random` | random reads at depth 64, each record once (seed 001: `aio-stress -o3`, 64 KiB, depth 64) | 1 GiB file, 64 KiB, 2 GiB memory, 128 KiB max |
//! | `interleaved` | `single`: one sequential reader; `interleaved-8`: 8 sequential readers on 8 regions of one file, one handle | 1 GiB file, 64 KiB, 2 GiB memory, 4 MiB max |
//! | `thrash` | a 100 KB/s reader started every second on its own file until 200 run (seed 000's thrashing test) | 200 × 32 MiB files, 4 KiB records, 128 MiB memory, 1 MiB max |
//! | `replay FILE` | a trace, one read per line: `offset length [stream-id]`; each stream a reader | file sized to the trace, 2 GiB memory, 128 KiB max |
//!
//! Before iozone's read tests, the cache holds the file's last `memory`
//! bytes, as iozone's preceding write test leaves it.

use crate::device::DeviceKind;
use crate::engine::{EngineConfig, PhaseStats, ReaderSpec, Simulator};
use ahead::ra::{PolicyKind, RaConfig};
use ahead::testdata::column_order;
use ahead::units::{format_size, GIB, KIB, MIB};
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;

/// Page size used by the simulator.
pub const PAGE: u64 = 4096;

/// iozone's default stride for the stride-read test, in records
/// (`iozone -j`, default 17).
pub const IOZONE_STRIDE: u64 = 17;

/// The thrashing test's reader rate: 100 KB/s (seed 000), as 4 KiB reads
/// every 40 ms.
pub const THRASH_INTERVAL: f64 = 0.04;
/// Readers in the thrashing test, one started per second (seed 000).
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
            "replay" => trace
                .map(Scenario::Replay)
                .ok_or_else(|| SimError::Usage("replay needs a trace file: ahead sim replay FILE".into())),
            other => Err(SimError::Usage(format!(
                "unknown scenario '{other}' (expected iozone, aio-random, interleaved, thrash or replay FILE)"
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
    pub policies: Vec<PolicyKind>,
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
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            policies: PolicyKind::ALL.to_vec(),
            device: DeviceKind::Hdd,
            memory: None,
            record: None,
            max_readahead: None,
            file_size: None,
            trace_file: None,
            seed: 42,
            context_readahead: true,
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
}

fn result(
    scenario: &str,
    workload: &str,
    policy: PolicyKind,
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
    }
}

/// Checked settings of one run.
struct Setup {
    file: u64,
    record: u64,
    memory: u64,
    max_ra_pages: u64,
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
    })
}

/// Runs `one` for every policy of `o`, each on its own thread (the policies'
/// simulations share nothing), and returns the results in policy order.
/// Every run is deterministic on its own, so the results are the same as
/// one after the other, in a fraction of the wall time.
fn per_policy(o: &SimOptions, one: impl Fn(PolicyKind) -> Vec<SimResult> + Sync) -> Vec<SimResult> {
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

fn engine(s: &Setup, o: &SimOptions, policy: PolicyKind, files: &[u64], bucket: f64) -> Simulator {
    Simulator::new(
        EngineConfig {
            page_size: PAGE,
            memory_pages: s.memory / PAGE,
            policy,
            ra: {
                let mut ra = RaConfig::with_max_pages(s.max_ra_pages);
                ra.context_readahead = o.context_readahead;
                ra
            },
            // The kernel splits at the device's max_sectors_kb; 1 MiB is
            // common for SATA and NVMe alike.
            max_io_pages: (MIB / PAGE).max(s.max_ra_pages),
            bucket,
        },
        files,
        o.device.build(),
    )
}

fn reader(file: usize, ops: impl Iterator<Item = (u64, u64)> + 'static) -> ReaderSpec {
    ReaderSpec {
        file,
        start: 0.0,
        interval: 0.0,
        depth: 1,
        ops: Box::new(ops),
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
        Scenario::Replay(path) => replay(sc, o, path),
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
            ops: Box::new(order.into_iter().map(move |r| (r * rec, rec))),
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
                    ops: Box::new((0..n).map(move |i| (i * rec, rec))),
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

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOp {
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub len: u64,
    /// Stream id (0 if the line has none).
    pub stream: u64,
    /// Index of the op's file in [`Trace::files`] (0 for a trace without
    /// `file=` fields).
    pub file: usize,
}

/// A file a trace reads.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TraceFile {
    /// The id of its `file=` fields ("" for a trace without them).
    pub id: String,
    /// Its size, from a `# file ID SIZE PATH` line.
    pub size: Option<u64>,
    /// Its path, from the same line.
    pub path: Option<String>,
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The reads, in order.
    pub ops: Vec<TraceOp>,
    /// The files, in order of first mention.
    pub files: Vec<TraceFile>,
}

impl Trace {
    fn file_index(&mut self, id: &str) -> usize {
        match self.files.iter().position(|f| f.id == id) {
            Some(i) => i,
            None => {
                self.files.push(TraceFile {
                    id: id.to_string(),
                    ..TraceFile::default()
                });
                self.files.len() - 1
            }
        }
    }

    /// Keeps the ops of the files whose id or path is `which` (a path
    /// matches whole or by its last component).
    pub fn only(&mut self, which: &str) -> Result<(), String> {
        let keep: Vec<usize> = self
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                f.id == which
                    || f.path.as_deref().is_some_and(|p| {
                        p == which
                            || std::path::Path::new(p)
                                .file_name()
                                .is_some_and(|n| n == which)
                    })
            })
            .map(|(i, _)| i)
            .collect();
        if keep.is_empty() {
            let names: Vec<String> = self
                .files
                .iter()
                .map(|f| format!("{} {}", f.id, f.path.as_deref().unwrap_or("")))
                .collect();
            return Err(format!(
                "no file '{which}' in the trace (it has: {})",
                names.join(", ")
            ));
        }
        self.ops.retain(|op| keep.contains(&op.file));
        Ok(())
    }
}

/// Parses a trace: one read per line, `offset length [stream-id]
/// [file=ID] [tid=N] [t=NS]`, sizes in bytes or with units (`64k`); blank
/// lines and `#` comments are skipped, except `# file ID SIZE PATH`,
/// which names a file (`ahead trace` writes both).
pub fn parse_trace(text: &str, path: &std::path::Path) -> Result<Trace, SimError> {
    let mut trace = Trace::default();
    // A trace without file= fields reads one file.
    let plain = !text.contains("file=");
    if plain {
        trace.file_index("");
    }
    for (n, raw) in text.lines().enumerate() {
        let bad = |reason: String| SimError::Trace {
            path: path.to_path_buf(),
            line: n + 1,
            reason,
        };
        if let Some(rest) = raw.trim_start().strip_prefix("# file ") {
            let mut f = rest.splitn(3, ' ');
            let (Some(id), Some(size)) = (f.next(), f.next()) else {
                return Err(bad(format!(
                    "expected '# file ID SIZE PATH', found '{raw}'"
                )));
            };
            let size = size
                .parse::<u64>()
                .map_err(|_| bad(format!("file size '{size}' is not a whole number")))?;
            if !plain {
                let i = trace.file_index(id);
                trace.files[i].size = Some(size);
                trace.files[i].path = f.next().map(str::to_string);
            }
            continue;
        }
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut positional: Vec<&str> = Vec::new();
        let mut file = 0;
        for field in line.split_whitespace() {
            match field.split_once('=') {
                Some(("file", id)) => file = trace.file_index(id),
                Some(("tid", _)) | Some(("t", _)) => {}
                Some((key, _)) => {
                    return Err(bad(format!(
                        "unknown field '{key}=' (known: file=, tid=, t=)"
                    )))
                }
                None => positional.push(field),
            }
        }
        if positional.len() < 2 || positional.len() > 3 {
            return Err(bad(format!(
                "expected 'offset length [stream-id]', found {} field(s): '{line}'",
                positional.len()
            )));
        }
        let offset =
            ahead::units::parse_size(positional[0]).map_err(|e| bad(format!("offset: {e}")))?;
        let len =
            ahead::units::parse_size(positional[1]).map_err(|e| bad(format!("length: {e}")))?;
        if len == 0 {
            return Err(bad("length must be at least 1 byte".into()));
        }
        let stream = match positional.get(2) {
            Some(s) => s
                .parse::<u64>()
                .map_err(|_| bad(format!("stream id '{s}' is not a whole number")))?,
            None => 0,
        };
        trace.ops.push(TraceOp {
            offset,
            len,
            stream,
            file,
        });
    }
    if trace.ops.is_empty() {
        return Err(SimError::Usage(format!(
            "{}: the trace has no reads",
            path.display()
        )));
    }
    Ok(trace)
}

/// Reads and parses a trace file (gzip-compressed if its name ends in
/// `.gz`, as the corpus's are), keeping one file's reads if asked.
pub fn load_trace(path: &std::path::Path, which: Option<&str>) -> Result<Trace, SimError> {
    let io = |source| SimError::Io {
        path: path.to_path_buf(),
        source,
    };
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let f = std::fs::File::open(path).map_err(io)?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(f), &mut text)
            .map_err(io)?;
        text
    } else {
        std::fs::read_to_string(path).map_err(io)?
    };
    let mut trace = parse_trace(&text, path)?;
    if let Some(w) = which {
        trace.only(w).map_err(SimError::Usage)?;
    }
    Ok(trace)
}

fn replay(
    sc: &Scenario,
    o: &SimOptions,
    path: &std::path::Path,
) -> Result<Vec<SimResult>, SimError> {
    let trace = load_trace(path, o.trace_file.as_deref())?;
    let ops = &trace.ops;
    let mut s = setup(sc, o)?;
    // Each file sized to the larger of its recorded size and its reads
    // (the simulated file is the first file when there is one).
    let sizes: Vec<u64> = (0..trace.files.len())
        .map(|i| {
            let end = ops
                .iter()
                .filter(|op| op.file == i)
                .map(|op| op.offset + op.len)
                .max()
                .unwrap_or(0);
            let recorded = trace.files[i].size.unwrap_or(0);
            o.file_size.unwrap_or(0).max(end).max(recorded).max(PAGE)
        })
        .collect();
    s.file = sizes.iter().copied().max().unwrap_or(PAGE);
    let pages: Vec<u64> = sizes.iter().map(|b| b.div_ceil(PAGE)).collect();
    let mut streams: Vec<(usize, u64)> = ops.iter().map(|op| (op.file, op.stream)).collect();
    streams.sort_unstable();
    streams.dedup();
    let mean = ops.iter().map(|op| op.len).sum::<u64>() as f64 / ops.len() as f64;
    Ok(per_policy(o, |policy| {
        let mut out = Vec::new();
        let mut e = engine(&s, o, policy, &pages, 0.0);
        let readers = streams
            .iter()
            .map(|&(file, id)| {
                let mine: Vec<(u64, u64)> = ops
                    .iter()
                    .filter(|op| op.stream == id && op.file == file)
                    .map(|op| (op.offset, op.len))
                    .collect();
                reader(file, mine.into_iter())
            })
            .collect();
        let stats = e.run_phase(readers);
        out.push(result(sc.name(), "replay", policy, o.device, mean, &stats));
        out
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn trace_errors_name_the_line() {
        let p = Path::new("t.trace");
        let err = parse_trace("0 4096\n# c\n\n8192 x 1\n", p)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.trace:4: length"), "{err}");
        let err = parse_trace("1 2 3 4\n", p).unwrap_err().to_string();
        assert!(err.contains(":1:"), "{err}");
        let err = parse_trace("0 4k s\n", p).unwrap_err().to_string();
        assert!(err.contains("stream id"), "{err}");
        let t = parse_trace("0 4k\n4096 4096 7 # x\n", p).unwrap();
        assert_eq!(
            t.ops[1],
            TraceOp {
                offset: 4096,
                len: 4096,
                stream: 7,
                file: 0
            }
        );
        let err = parse_trace("0 4k 3 color=red\n", p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field 'color='"), "{err}");
    }

    #[test]
    fn ahead_trace_lines_name_their_files() {
        let p = Path::new("t.trace");
        let text = "# ahead trace\n# file 7:1 65536 /d/a.db\n# file 7:2 8192 /d/b\n\
                    0 100 3 file=7:1 tid=7 t=1\n4096 4096 4 file=7:2 tid=8 t=2\n8192 4096 3 file=7:1 tid=7 t=3\n";
        let mut t = parse_trace(text, p).unwrap();
        assert_eq!(t.files.len(), 2);
        assert_eq!(t.files[0].size, Some(65536));
        assert_eq!(t.files[1].path.as_deref(), Some("/d/b"));
        assert_eq!(t.ops[1].file, 1);
        assert_eq!(t.ops[2].stream, 3);
        t.only("a.db").unwrap();
        assert_eq!(t.ops.len(), 2);
        assert!(t.only("nope").unwrap_err().contains("7:1 /d/a.db"));
    }

    #[test]
    fn memory_smaller_than_a_window_is_refused() {
        let o = SimOptions {
            memory: Some(64 * KIB),
            ..SimOptions::default()
        };
        let err = run(&Scenario::Iozone, &o).unwrap_err().to_string();
        assert!(err.contains("smaller than two readahead windows"), "{err}");
    }

    #[test]
    fn unknown_scenario() {
        let err = Scenario::parse("bogus", None).unwrap_err().to_string();
        assert!(err.contains("unknown scenario 'bogus'"), "{err}");
    }

    #[test]
    fn stride_follows_iozone_column_by_column() {
        let recs: Vec<u64> = stride_records(1700, 1).map(|(r, _)| r).collect();
        assert_eq!(recs.len(), 1700);
        assert_eq!(&recs[..3], &[0, 17, 34]);
        // Each pass p starts at record p, right after the previous pass
        // reached the last rows.
        let starts: Vec<u64> = recs
            .windows(2)
            .filter(|w| w[1] < w[0])
            .map(|w| w[1])
            .collect();
        assert_eq!(starts, (1..=17).collect::<Vec<u64>>());
        // Every record is read once, except that the passes starting at 15
        // and 16 wrap one row short (iozone wraps when the next record
        // would reach the last one), and the reads left over begin another
        // pass at 17: as many reads as the file has records.
        let mut seen = vec![0u32; 1700];
        for &r in &recs {
            seen[r as usize] += 1;
        }
        let never: Vec<usize> = (0..1700).filter(|&r| seen[r] == 0).collect();
        let twice: Vec<usize> = (0..1700).filter(|&r| seen[r] == 2).collect();
        assert_eq!(never, vec![1698, 1699]);
        assert_eq!(twice, vec![17, 34]);
    }

    #[test]
    fn small_iozone_runs_every_workload_for_every_policy() {
        let o = SimOptions {
            file_size: Some(64 * MIB),
            memory: Some(32 * MIB),
            ..SimOptions::default()
        };
        let r = run(&Scenario::Iozone, &o).unwrap();
        assert_eq!(r.len(), 7 * 3);
        for row in &r {
            assert!(row.throughput_mb_s > 0.0, "{row:?}");
            assert!((row.requested_mb - 64.0 * 1.048576).abs() < 0.01, "{row:?}");
        }
    }
}
