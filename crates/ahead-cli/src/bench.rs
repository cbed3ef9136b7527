//! `ahead bench`: every read pattern, cold, through the kernel's buffered
//! pread, the kernel's O_DIRECT pread and ahead, next to what the device can
//! do, in one run; medians of repetitions; a table with ratios, JSON and a
//! plot.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use ahead::units::{format_size, parse_size};
use ahead::Mode;
use ahead_bench::report::{bar_chart, Table};
use ahead_bench::workload::{self, Engine, Measurement, Pattern, Workload};
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
    Copy(crate::bench_copy::CopyBenchArgs),
    /// Seed 004's mixed-latency loop: cached, uncached and sequential 16 KiB
    /// reads kept in flight by ahead's Buffered mode, a thread pool,
    /// io_uring and blocking preads.
    Mix(crate::bench_mix::MixArgs),
}

/// One benchmark case: a named pattern and the engines that run it.
struct Case {
    name: &'static str,
    workload: Workload,
    engines: Vec<Engine>,
}

/// One row of results.
struct Row {
    pattern: &'static str,
    engine: &'static str,
    bs: u64,
    runs: Vec<Measurement>,
    /// Largest peak resident set of one run (ahead's engines only).
    peak_rss: Option<u64>,
    /// The device profile's best for this pattern, MB/s (cold rows on a
    /// capped device only).
    oracle_mb_s: Option<f64>,
}

impl Row {
    fn median(&self, f: impl Fn(&Measurement) -> Option<f64>) -> Option<f64> {
        ahead_bench::report::median(self.runs.iter().filter_map(f).collect())
    }
    fn mb_s(&self) -> f64 {
        self.median(|m| Some(m.mb_s())).unwrap_or(0.0)
    }
    /// CPU seconds per GiB read (median).
    fn cpu_per_gib(&self) -> Option<f64> {
        self.median(|m| Some(m.cpu_s? / (m.bytes.max(1) as f64 / (1u64 << 30) as f64)))
    }
}

fn cases(size: u64, quick: bool, ahead: &ahead::EngineConfig, modes: &[Mode]) -> Vec<Case> {
    let k = |q: u64, full: u64| if quick { q } else { full };
    let with = |mode: Mode| Engine::Ahead {
        config: ahead.clone(),
        zero_copy: false,
        mode,
    };
    let has = |m: Mode| modes.contains(&m);
    // ahead's engines for the selected modes; Uncached only where a cold
    // read is measured (it is a cold-read mode).
    let aheads = |uncached: bool| -> Vec<Engine> {
        modes
            .iter()
            .filter(|&&m| uncached || m != Mode::Uncached)
            .map(|&m| with(m))
            .collect()
    };
    let kernels = || {
        let mut v = vec![Engine::Kernel, Engine::KernelDirect];
        v.extend(aheads(false));
        v
    };
    let mut v = vec![
        Case {
            name: "seq",
            workload: Workload {
                bytes: k(64 << 20, 0),
                ..Workload::new(Pattern::Seq, 4096)
            },
            engines: {
                let mut v = vec![Engine::Kernel, Engine::KernelDirect];
                v.extend(aheads(true));
                v
            },
        },
        Case {
            name: "seq",
            workload: Workload {
                depth: 32,
                ..Workload::new(Pattern::Seq, 1 << 20)
            },
            engines: vec![Engine::DeviceLimit],
        },
        Case {
            name: "reverse",
            workload: Workload {
                bytes: k(64 << 20, 256 << 20),
                ..Workload::new(Pattern::Reverse, 4096)
            },
            engines: kernels(),
        },
        Case {
            name: "stride",
            workload: Workload {
                bytes: k(64 << 20, 256 << 20),
                ..Workload::new(Pattern::Stride { gap: 12 << 10 }, 4096)
            },
            engines: kernels(),
        },
        Case {
            name: "interleaved-8",
            workload: Workload {
                bytes: k(64 << 20, size),
                ..Workload::new(Pattern::Interleaved { n: 8 }, 4096)
            },
            engines: kernels(),
        },
        Case {
            name: "random-64k-qd64",
            workload: Workload {
                depth: 64,
                bytes: k(256 << 20, 1 << 30),
                ..Workload::new(Pattern::Random, 64 << 10)
            },
            engines: {
                let mut v = vec![Engine::Kernel, Engine::KernelDirect];
                v.extend(aheads(false));
                v.push(Engine::DeviceLimit);
                v
            },
        },
        Case {
            name: "random-4k",
            workload: Workload {
                bytes: k(24 << 20, 32 << 20),
                latency: true,
                ..Workload::new(Pattern::Random, 4096)
            },
            engines: kernels(),
        },
    ];
    // Cached reads: a region larger than the CPU caches but well inside
    // ahead's budget, read once to warm, then random 4 KiB and 16 KiB
    // reads, every byte read by the caller.
    let region = (ahead.cache_bytes / 2).min(size).min(128 << 20);
    for (name, bs) in [("cached-4k", 4096u64), ("cached-16k", 16 << 10)] {
        v.push(Case {
            name,
            workload: Workload {
                cold: false,
                warm: true,
                span: region,
                latency: true,
                bytes: k(256 << 20, 1 << 30),
                ..Workload::new(Pattern::Random, bs)
            },
            engines: {
                let mut v = vec![Engine::Kernel];
                v.extend(aheads(false));
                if has(Mode::Direct) {
                    v.push(Engine::Ahead {
                        config: ahead.clone(),
                        zero_copy: true,
                        mode: Mode::Direct,
                    });
                }
                v
            },
        });
    }
    v
}

/// Runs `ahead bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.what {
        Some(BenchWhat::Copy(c)) => return crate::bench_copy::run(c),
        Some(BenchWhat::Mix(m)) => return crate::bench_mix::run(m),
        None => {}
    }
    let config = args.engine.config()?;
    ahead::Engine::new(config.clone())?;
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let (path, _work) = match &args.file {
        Some(f) => (f.clone(), None),
        None => {
            let size = parse_size(&args.size).context("--size")?;
            if size < (16 << 20) {
                bail!("--size: at least 16 MiB, to leave the caches behind");
            }
            let dir = match &args.dir {
                Some(d) => d.clone(),
                None => default_dir()?,
            };
            // In a new private directory (see `private_dir`), removed with
            // everything in it when the bench ends, however it ends.
            let work = crate::private_dir(&dir, "ahead-bench-")?;
            let path = work.path().join("data");
            eprintln!(
                "generating {} test file {} ...",
                format_size(size),
                path.display()
            );
            ahead::testdata::write_file(&path, size)
                .with_context(|| format!("write {}", path.display()))?;
            (path, Some(work))
        }
    };
    let size = std::fs::metadata(&path)
        .with_context(|| format!("{}", path.display()))?
        .len();
    if size < (16 << 20) {
        bail!("{}: at least 16 MiB needed", path.display());
    }
    // The device: capped by a cgroup where asked (or by default for
    // --quick, where it can be), else as it is.
    let asked = args.device.as_deref();
    let profile = match asked {
        Some(s) => ahead_bench::device::Profile::parse(s).map_err(anyhow::Error::msg)?,
        None if args.quick => Some(ahead_bench::device::Profile::CLOUD),
        None => None,
    };
    let _throttle = match profile {
        Some(p) => match ahead_bench::device::throttle(p, &[path.as_path()]) {
            Ok(t) => Some(t),
            Err(e) if asked.is_some() => bail!("--device {}: {e}", p.name),
            Err(e) => {
                eprintln!(
                    "ahead: warning: no steady device ({e}); measuring the disk as it is, \
                     whose speed swings from run to run"
                );
                None
            }
        },
        None => None,
    };
    let profile = _throttle.as_ref().map(|t| t.profile);
    let started = Instant::now();
    let mut rows: Vec<Row> = Vec::new();
    let modes: Vec<Mode> = match args.mode.as_str() {
        "all" => vec![Mode::Direct, Mode::Buffered, Mode::Uncached],
        m => vec![m.parse().map_err(anyhow::Error::msg)?],
    };
    let mut cases = cases(size, args.quick, &config, &modes);
    if profile.is_some() {
        // Spend the throttle's start-up burst before each cold run.
        for c in cases.iter_mut().filter(|c| c.workload.cold) {
            c.workload.drain = 64 << 20;
        }
    }
    for rep in 0..reps {
        for case in &cases {
            // Rotate the engines' order each repetition, so that none always
            // runs first (the virtual disk here is faster on data the host
            // read recently).
            let mut order: Vec<&Engine> = case.engines.iter().collect();
            let n = order.len();
            order.rotate_left(rep % n);
            for engine in order {
                let is_ahead = matches!(engine, Engine::Ahead { .. });
                let baseline = rss_now().filter(|_| is_ahead && reset_peak_rss());
                let m = workload::run(&path, engine, &case.workload).map_err(anyhow::Error::msg)?;
                let rss = baseline.and_then(|b| Some(peak_rss()?.saturating_sub(b)));
                // Only the engines meant to read with O_DIRECT can be
                // refused it (the kernel modes read through the cache).
                let wants_direct = matches!(
                    engine,
                    Engine::KernelDirect
                        | Engine::DeviceLimit
                        | Engine::Ahead {
                            mode: ahead::Mode::Direct,
                            ..
                        }
                );
                if rep == 0 && !m.direct && wants_direct {
                    eprintln!(
                        "ahead: warning: {}: O_DIRECT refused; {} read through the kernel cache",
                        path.display(),
                        engine.name()
                    );
                }
                eprintln!(
                    "  rep {}/{reps} {:<16} {:<16} {:>9.1} MB/s",
                    rep + 1,
                    case.name,
                    engine.name(),
                    m.mb_s()
                );
                match rows
                    .iter_mut()
                    .find(|r| r.pattern == case.name && r.engine == engine.name())
                {
                    Some(r) => {
                        r.runs.push(m);
                        r.peak_rss = r.peak_rss.max(rss);
                    }
                    None => rows.push(Row {
                        pattern: case.name,
                        engine: engine.name(),
                        bs: case.workload.bs,
                        runs: vec![m],
                        peak_rss: rss,
                        oracle_mb_s: profile
                            .filter(|_| case.workload.cold)
                            .map(|p| p.oracle(&case.workload.pattern, case.workload.bs) / 1e6),
                    }),
                }
            }
        }
    }
    print!("{}", table(&rows));
    println!(
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
    // Memory: what each ahead run added to the resident set at its peak
    // (the kernel's peak is reset before the run and the resident set then
    // is subtracted): the engine's cache, its threads and the run's buffers,
    // without what earlier runs of the harness left in the heap. The
    // process's own lifetime peak is printed beside it.
    let per_run = rows.iter().filter_map(|r| r.peak_rss).max();
    let process = peak_rss();
    let allowance = config.cache_bytes + (64 << 20);
    match per_run {
        Some(p) => println!(
            "peak RSS of an ahead run {} (cache budget {} + 64 MiB = {}): {}; whole benchmark process {}",
            format_size(p),
            format_size(config.cache_bytes),
            format_size(allowance),
            if p <= allowance { "within" } else { "OVER" },
            process.map_or("unknown".into(), format_size)
        ),
        None => println!(
            "peak RSS per run: unknown (cannot reset the peak here); whole benchmark process {}",
            process.map_or("unknown".into(), format_size)
        ),
    }
    let peak = per_run;
    // The mixed-latency loop, short, in the quick run.
    let mix_rows = if args.quick {
        println!();
        let mut m = crate::bench_mix::MixArgs::quick();
        m.dir = args.dir.clone();
        crate::bench_mix::measure(&m)?
    } else {
        Vec::new()
    };
    if let Some(j) = &args.json {
        let mut v: Vec<serde_json::Value> = rows.iter().map(row_json).collect();
        v.extend(mix_rows.iter().map(crate::bench_mix::MixRow::json));
        v.push(serde_json::json!({
            "pattern": "peak-rss",
            "engine": "ahead",
            "peak_rss_bytes": peak,
            "process_peak_rss_bytes": process,
            "cache_bytes": config.cache_bytes,
            "device": profile.map(|p| p.name),
            "device_bps": profile.map(|p| p.bps),
            "device_iops": profile.map(|p| p.iops),
        }));
        std::fs::write(j, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("write {}", j.display()))?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(p, plot(&rows)).with_context(|| format!("write {}", p.display()))?;
    }
    Ok(())
}

pub(crate) fn default_dir() -> Result<PathBuf> {
    let tmp = std::env::temp_dir();
    if ahead::testdata::supports_direct(&tmp) {
        return Ok(tmp);
    }
    let cwd = std::env::current_dir()?;
    if ahead::testdata::supports_direct(&cwd) {
        eprintln!(
            "{} does not support O_DIRECT; using the current directory",
            tmp.display()
        );
        return Ok(cwd);
    }
    bail!(
        "neither {} nor the current directory supports O_DIRECT; pass --dir or --file",
        tmp.display()
    )
}

fn find<'a>(rows: &'a [Row], pattern: &str, engine: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.pattern == pattern && r.engine == engine)
}

fn table(rows: &[Row]) -> String {
    let mut t = Table::new(&[
        "pattern",
        "engine",
        "bs",
        "MB/s",
        "p50 µs",
        "p99 µs",
        "÷ kernel",
        "÷ device",
        "÷ oracle",
        "CPU s/GiB",
        "dev/req",
    ]);
    let us = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
    for r in rows {
        let ratio = |other: Option<&Row>| {
            other
                .filter(|o| !std::ptr::eq(*o, r) && o.mb_s() > 0.0)
                .map_or(String::new(), |o| format!("{:.2}", r.mb_s() / o.mb_s()))
        };
        let is_ahead = r.engine.starts_with("ahead");
        let dev = if is_ahead {
            ratio(find(rows, r.pattern, "device-limit"))
        } else {
            String::new()
        };
        let k = if is_ahead {
            ratio(find(rows, r.pattern, "kernel"))
        } else {
            String::new()
        };
        let amp = r
            .runs
            .last()
            .filter(|m| m.stats.is_some() && !r.pattern.starts_with("cached"))
            // The kernel modes read through the kernel's cache: ahead does
            // not see their device bytes.
            .and_then(|m| m.stats.filter(|s| s.device_reads > 0))
            .and_then(|s| r.runs.last().map(|m| (s.device_bytes, m.bytes)))
            .filter(|&(_, b)| b > 0)
            .map_or(String::new(), |(d, b)| {
                format!("{:.2}", d as f64 / b as f64)
            });
        t.row(vec![
            r.pattern.into(),
            r.engine.into(),
            format_size(r.bs),
            format!("{:.1}", r.mb_s()),
            us(r.median(|m| m.p50_us)),
            us(r.median(|m| m.p99_us)),
            k,
            dev,
            match r.oracle_mb_s {
                Some(o) if is_ahead && o > 0.0 => format!("{:.2}", r.mb_s() / o),
                _ => String::new(),
            },
            r.cpu_per_gib().map_or(String::new(), |c| format!("{c:.2}")),
            amp,
        ]);
    }
    t.render()
}

/// Resets the process's peak resident set to its current one (writing 5 to
/// /proc/self/clear_refs, Linux 4.0); false where that is not allowed.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A line of /proc/self/status in bytes (`VmHWM`: peak resident set,
/// `VmRSS`: the current one).
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb << 10)
}

fn peak_rss() -> Option<u64> {
    status_kb("VmHWM:")
}

fn rss_now() -> Option<u64> {
    status_kb("VmRSS:")
}

fn row_json(r: &Row) -> serde_json::Value {
    let mut o = serde_json::json!({
        "pattern": r.pattern,
        "engine": r.engine,
        "bs": r.bs,
        "mb_s": r.mb_s(),
        "reps": r.runs.len(),
    });
    if let Some(v) = r.median(|m| m.p50_us) {
        o["p50_us"] = v.into();
    }
    if let Some(v) = r.median(|m| m.p99_us) {
        o["p99_us"] = v.into();
    }
    if let Some(v) = r.median(|m| m.cpu_s) {
        o["cpu_s"] = v.into();
    }
    if let Some(v) = r.oracle_mb_s {
        o["oracle_mb_s"] = v.into();
    }
    if let Some(m) = r.runs.last() {
        o["bytes"] = m.bytes.into();
        if let Some(p) = r.peak_rss {
            o["peak_rss_bytes"] = p.into();
        }
        if let Some(s) = &m.stats {
            o["device_bytes"] = s.device_bytes.into();
            o["avg_io_bytes"] = s.avg_io_bytes().into();
            o["readahead_wasted"] = s.readahead_wasted.into();
            o["late"] = s.late.into();
        }
    }
    o
}

fn plot(rows: &[Row]) -> String {
    let mut patterns: Vec<&str> = Vec::new();
    let mut engines: BTreeMap<&str, ()> = BTreeMap::new();
    for r in rows {
        if !patterns.contains(&r.pattern) {
            patterns.push(r.pattern);
        }
        engines.insert(r.engine, ());
    }
    let series: Vec<String> = engines.keys().map(|s| s.to_string()).collect();
    let values: Vec<Vec<f64>> = series
        .iter()
        .map(|e| {
            patterns
                .iter()
                .map(|p| find(rows, p, e).map_or(0.0, |r| r.mb_s()))
                .collect()
        })
        .collect();
    let cats: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
    bar_chart(
        "ahead bench: kernel vs ahead (cold, medians)",
        "MB/s",
        &cats,
        &series,
        &values,
    )
}
