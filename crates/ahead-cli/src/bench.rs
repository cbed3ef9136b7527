//! `ahead bench`: every read pattern, cold, through the kernel's buffered
//! pread, the kernel's O_DIRECT pread and ahead, next to what the device can
//! do, in one run; medians of repetitions; a table with ratios, JSON and a
//! plot.

use std::path::PathBuf;
use std::time::Instant;

use ahead::units::{format_size, parse_size};
use ahead::Mode;
use ahead_bench::suite;
use anyhow::{bail, Context, Result};
use clap::Args;

use crate::read::EngineArgs;

/// Arguments of `ahead bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Benchmark this file instead of generating one.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Size of the generated file.
    #[arg(long, default_value = "1g")]
    size: String,
    /// Where to generate the file (default: the system's temporary
    /// directory if it supports O_DIRECT, else the current directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Fewer bytes per pattern and one repetition: about a minute.
    #[arg(long)]
    quick: bool,
    /// Repetitions (medians are reported); default 3, 1 with --quick.
    #[arg(long)]
    reps: Option<usize>,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG bar chart to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Make the device steady: cloud (200 MiB/s, 5000 IOPS), small-cloud
    /// (125 MiB/s, 3000), fast (400 MiB/s, 20000), BPS,IOPS, or none. The
    /// file is read once with O_DIRECT, then reads are capped by a cgroup
    /// (root only). Default: cloud with --quick where it can, else none.
    #[arg(long)]
    device: Option<String>,
    /// Which of ahead's modes run beside the kernel: all, direct, buffered
    /// or uncached.
    #[arg(long, default_value = "all")]
    mode: String,
    #[command(subcommand)]
    what: Option<BenchWhat>,
}

/// Benchmarks other than the read patterns.
#[derive(clap::Subcommand, Debug)]
enum BenchWhat {
    /// `ahead copy` vs `cp && sync` and nbdcopy: half-cached, sparse, kill -9 + resume.
    Copy(ahead_bench::copy_suite::CopyBenchArgs),
    /// The mixed-latency loop of the non-blocking buffered reads series
    /// (docs/references.md): cached, uncached and sequential 16 KiB reads kept
    /// in flight by ahead's Buffered mode, a thread pool, io_uring and blocking
    /// preads.
    Mix(ahead_bench::mix_suite::MixArgs),
    /// Cold sequential 4 KiB and 128 KiB reads on the device as it is (not
    /// capped): the kernel's buffered pread loop and ahead's Direct mode,
    /// alternated, throughput and CPU, the best run of each side.
    Fast(ahead_bench::fast_suite::FastArgs),
    /// Objects in an S3-compatible store behind a network of known latency
    /// and bandwidth: ahead, object_store's BufReader and one GET per read,
    /// beside what the network allows.
    Remote(ahead_bench::remote_suite::RemoteArgs),
    /// The remote benchmark's embedded S3 server (or a one-node Ceph
    /// cluster) behind its network profile, for programs in other
    /// languages (the Python package's tests and benchmark, `bench
    /// mount`'s harness): prints where it is as one JSON line, then
    /// answers `put KEY PATH`, `bytes` and `fail SHARE` on standard input
    /// until it closes.
    #[cfg(feature = "embedded-server")]
    Serve(ahead_bench::remote_suite::ServeArgs),
    /// `ahead mount` beside mountpoint-s3, s3fs-fuse and rclone mount on
    /// the same objects of the embedded server (or a one-node Ceph
    /// cluster) behind a network profile:
    /// mountpoint-s3's fio jobs, backward, strided, interleaved and random
    /// readers, 1,000 open files, a cached re-read, and real programs
    /// (sqlite3, tac, tail, tar, pyarrow, DuckDB); MB/s and ÷ the profile's
    /// oracle, bytes fetched ÷ asked, p50/p99, each daemon's peak RSS, every
    /// program's output compared with a local copy's. Root (mounts,
    /// drop_caches), Python 3; peers not installed are skipped loudly.
    #[cfg(feature = "embedded-server")]
    Mount(ahead_bench::mount_suite::MountBenchArgs),
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.what {
        Some(BenchWhat::Copy(c)) => return Ok(ahead_bench::copy_suite::run(c)?),
        Some(BenchWhat::Mix(m)) => return Ok(ahead_bench::mix_suite::run(m)?),
        Some(BenchWhat::Fast(f)) => {
            return Ok(ahead_bench::fast_suite::run(f, &args.engine.config()?)?)
        }
        Some(BenchWhat::Remote(r)) => return Ok(ahead_bench::remote_suite::main(r).map(|_| ())?),
        #[cfg(feature = "embedded-server")]
        Some(BenchWhat::Serve(s)) => return Ok(ahead_bench::remote_suite::serve(s)?),
        #[cfg(feature = "embedded-server")]
        Some(BenchWhat::Mount(m)) => return Ok(ahead_bench::mount_suite::run(m)?),
        None => {}
    }
    let config = args.engine.config()?;
    ahead::Engine::new(config.clone())?;
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let (path, size, _work) = data_file(&args)?;
    let throttle = steady_device(&args, &path)?;
    let profile = throttle.as_ref().map(|t| t.profile);
    let started = Instant::now();
    let modes: Vec<Mode> = match args.mode.as_str() {
        "all" => vec![Mode::Direct, Mode::Buffered, Mode::Uncached],
        m => vec![m.parse().map_err(anyhow::Error::msg)?],
    };
    let mut cases = suite::cases(size, args.quick, &config, &modes);
    if profile.is_some() {
        // Spend the throttle's start-up burst before each cold run.
        for c in cases.iter_mut().filter(|c| c.workload.cold) {
            c.workload.drain = 64 << 20;
        }
    }
    let rows = ahead_bench::suite::run_cases(&path, &cases, reps, profile, |l| eprintln!("{l}"))
        .map_err(anyhow::Error::msg)?;
    out!("{}", suite::table(&rows));
    outln!(
        "file {} ({}), {reps} repetition(s), medians; device: {}; {:.0} s in all",
        path.display(),
        format_size(size),
        match profile {
            Some(p) => format!(
                "{} ({} MiB/s, {} IOPS, capped by a cgroup over a host-warm file)",
                p.name,
                p.bps >> 20,
                p.iops
            ),
            None => "as it is (not capped: figures swing between runs)".into(),
        },
        started.elapsed().as_secs_f64()
    );
    let mut memory = memory(&rows, config.cache_bytes);
    memory["device"] = serde_json::json!(profile.map(|p| p.name));
    memory["device_bps"] = serde_json::json!(profile.map(|p| p.bps));
    memory["device_iops"] = serde_json::json!(profile.map(|p| p.iops));
    let mut v: Vec<serde_json::Value> = rows.iter().map(suite::row_json).collect();
    if args.quick {
        v.extend(quick_extras(&args)?);
    }
    v.push(memory);
    if let Some(j) = &args.json {
        std::fs::write(j, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("write {}", j.display()))?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(p, suite::plot(&rows)).with_context(|| format!("write {}", p.display()))?;
    }
    Ok(())
}

/// The file to read: `--file`, or one generated in a new private
/// directory (see `private_dir`), removed with everything in it when the
/// bench ends, however it ends. Its path, its size and the directory.
fn data_file(args: &BenchArgs) -> Result<(PathBuf, u64, Option<tempfile::TempDir>)> {
    // --size is only for a generated file.
    let size = match &args.file {
        Some(_) => 0,
        None => parse_size(&args.size).context("--size")?,
    };
    if args.file.is_none() && size < (16 << 20) {
        bail!("--size: at least 16 MiB, to leave the caches behind");
    }
    Ok(ahead_bench::workdir::data_file(
        args.file.as_deref(),
        size,
        args.dir.as_deref(),
        "ahead-bench-",
        16 << 20,
    )?)
}

/// The device: capped by a cgroup where asked (or by default for --quick,
/// where it can be), else as it is (None).
fn steady_device(
    args: &BenchArgs,
    path: &std::path::Path,
) -> Result<Option<ahead_bench::device::Throttle>> {
    let asked = args.device.as_deref();
    let profile = match asked {
        Some(s) => ahead_bench::device::Profile::parse(s).map_err(anyhow::Error::msg)?,
        None if args.quick => Some(ahead_bench::device::Profile::CLOUD),
        None => None,
    };
    let Some(p) = profile else {
        return Ok(None);
    };
    match ahead_bench::device::throttle(p, &[path]) {
        Ok(t) => Ok(Some(t)),
        Err(e) if asked.is_some() => bail!("--device {}: {e}", p.name),
        Err(e) => {
            eprintln!(
                "ahead: warning: no steady device ({e}); measuring the disk as it is, \
                 whose speed swings from run to run"
            );
            Ok(None)
        }
    }
}

/// Prints what each ahead run added to the resident set at its peak (the
/// kernel's peak is reset before the run and the resident set then is
/// subtracted): the engine's cache, its threads and the run's buffers,
/// without what earlier runs of the harness left in the heap; the
/// process's own lifetime peak beside it. Returns the JSON row.
fn memory(rows: &[suite::Row], cache_bytes: u64) -> serde_json::Value {
    let per_run = rows.iter().filter_map(|r| r.peak_rss).max();
    let process = suite::peak_rss();
    let allowance = cache_bytes + (64 << 20);
    match per_run {
        Some(p) => outln!(
            "peak RSS of an ahead run {} (cache budget {} + 64 MiB = {}): {}; whole benchmark process {}",
            format_size(p),
            format_size(cache_bytes),
            format_size(allowance),
            if p <= allowance { "within" } else { "OVER" },
            process.map_or("unknown".into(), format_size)
        ),
        None => outln!(
            "peak RSS per run: unknown (cannot reset the peak here); whole benchmark process {}",
            process.map_or("unknown".into(), format_size)
        ),
    }
    serde_json::json!({
        "pattern": "peak-rss",
        "engine": "ahead",
        "peak_rss_bytes": per_run,
        "process_peak_rss_bytes": process,
        "cache_bytes": cache_bytes,
    })
}

/// The quick run's short extras, printed, and their JSON rows: the
/// mixed-latency loop, and objects on the embedded server behind the s3
/// network profile.
fn quick_extras(args: &BenchArgs) -> Result<Vec<serde_json::Value>> {
    use ahead_bench::remote_suite::{self as remote, RemoteConfig};
    use ahead_bench::shaper::NetProfile;
    outln!();
    let mut m = ahead_bench::mix_suite::MixArgs::quick();
    m.dir = args.dir.clone();
    let mut v: Vec<serde_json::Value> = ahead_bench::mix_suite::measure(&m)?
        .iter()
        .map(ahead_bench::mix_suite::MixRow::json)
        .collect();
    outln!();
    if !cfg!(feature = "embedded-server") {
        outln!("objects: skipped, {}", remote::NO_SERVER);
        return Ok(v);
    }
    let cfg = RemoteConfig::short(NetProfile::S3);
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let work = ahead_bench::workdir::private_dir(&parent, "ahead-bench-remote-")?;
    let rows = remote::run(&cfg, work.path())?;
    out!("{}", remote::table(&rows, &cfg));
    v.extend(rows.iter().map(|r| {
        let mut j = r.json();
        j["remote"] = serde_json::json!(true);
        j
    }));
    Ok(v)
}
