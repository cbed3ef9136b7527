//! `ahead sim`: runs the simulator and prints a table, JSON or a plot.

use ahead::units::parse_size;
use ahead_bench::report::{bar_chart, line_chart, Table};
use ahead_sim::device::DeviceKind;
use ahead_sim::scenario::{self, Scenario, SimOptions, SimResult};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `ahead sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Scenario: iozone, aio-random, interleaved, thrash, remote (bench
    /// remote's patterns on one object), or replay FILE.
    scenario: String,
    /// Trace file, for `replay`: one read per line, `offset length [stream-id]`.
    trace: Option<PathBuf>,
    /// Policies to compare, comma-separated: legacy, ondemand and ahead
    /// (the library's, reading for the engine), and run (`ahead run`: the
    /// kernel's ondemand reads, the preload's hints on top).
    #[arg(long, default_value = "legacy,ondemand,ahead")]
    policy: String,
    /// Device model: hdd, ssd, net, s3 (bench remote's network profile),
    /// cloud, small-cloud, fast, or BPS,IOPS.
    #[arg(long, default_value = "hdd")]
    device: String,
    /// Cache budget (e.g. 2g, 128m); default depends on the scenario.
    #[arg(long)]
    memory: Option<String>,
    /// Record (request) size (e.g. 64k, 4k); default depends on the scenario.
    #[arg(long)]
    record: Option<String>,
    /// Maximum readahead window (e.g. 128k, 1m); default depends on the scenario.
    #[arg(long = "max-readahead")]
    max_readahead: Option<String>,
    /// File size (e.g. 4g); default depends on the scenario.
    #[arg(long = "file-size")]
    file_size: Option<String>,
    /// `replay` of an `ahead trace` file: only the reads of this file (its
    /// id in the trace, its path, or its name).
    #[arg(long = "trace-file", value_name = "ID|PATH")]
    trace_file: Option<String>,
    /// Seed of the random workloads.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run ondemand without context readahead, as the on-demand RFC's kernel
    /// (2.6.21-rc7-mm1) had it; mainline added it in 2.6.31.
    #[arg(long = "no-context-readahead")]
    no_context_readahead: bool,
    /// `replay`: one reader per thread of the traced program, each asking
    /// for its reads one after another with the time the program took
    /// between them (from the trace's `tid=` and `t=`; record it warm), so
    /// that the kernel's readahead overlaps the program's computing as it
    /// does in a real run. Without it each stream's reads follow one
    /// another with no time between, all streams at once. `--timed=F`
    /// scales the program's times by F (below 1 to take off what tracing
    /// added: the traced run's span less its extra time, over its span).
    #[arg(long, value_name = "F", num_args = 0..=1, default_missing_value = "1", require_equals = true)]
    timed: Option<f64>,
    /// The kernel reads ahead in large folios, as ext4 does on this
    /// machine's 6.18: after a lookahead mark its windows are read in
    /// folios two orders above the one hit, marked whole, so a reader that
    /// steps over pages still meets the next mark. The kernel's page cache
    /// only: the `ahead` policy's own cache keeps 4 KiB pages.
    #[arg(long = "large-folios")]
    large_folios: bool,
    /// Print one JSON array of results on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn size(opt: &Option<String>, what: &str) -> Result<Option<u64>> {
    opt.as_deref()
        .map(|s| parse_size(s).with_context(|| format!("--{what}")))
        .transpose()
}

/// Runs `ahead sim`.
pub fn run(args: SimArgs) -> Result<()> {
    if let (Some(trace), false) = (&args.trace, args.scenario == "replay") {
        bail!(
            "unexpected argument '{}': only replay takes a trace file",
            trace.display()
        );
    }
    let scenario = Scenario::parse(&args.scenario, args.trace.clone())?;
    let mut policies = Vec::new();
    for p in args.policy.split(',').filter(|s| !s.trim().is_empty()) {
        let kind: ahead_sim::engine::SimPolicy = p.parse().map_err(anyhow::Error::msg)?;
        if !policies.contains(&kind) {
            policies.push(kind);
        }
    }
    if policies.is_empty() {
        bail!("--policy: no policy given (expected legacy, ondemand, ahead or run)");
    }
    let device: DeviceKind = args.device.parse().map_err(anyhow::Error::msg)?;
    let opts = SimOptions {
        policies,
        device,
        memory: size(&args.memory, "memory")?,
        record: size(&args.record, "record")?,
        max_readahead: size(&args.max_readahead, "max-readahead")?,
        file_size: size(&args.file_size, "file-size")?,
        trace_file: args.trace_file.clone(),
        seed: args.seed,
        context_readahead: !args.no_context_readahead,
        timed: args.timed,
        large_folios: args.large_folios,
    };
    let started = Instant::now();
    let rows = scenario::run(&scenario, &opts)?;
    let wall = started.elapsed();
    if let Some(path) = &args.plot {
        let svg = plot(&scenario, &rows);
        std::fs::write(path, svg).with_context(|| format!("writing plot {}", path.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    outln!(
        "{} on {} ({}), simulated in {:.1} s",
        scenario.name(),
        device,
        device.build().describe(),
        wall.as_secs_f64()
    );
    if let Some(kib) = rows.iter().find_map(|r| r.max_readahead_kib) {
        // Given, else the trace's `# readahead` line, else 128 KiB.
        outln!(
            "the kernel's largest readahead window: {}",
            ahead::units::format_size(kib << 10)
        );
    }
    if let Some(span) = rows.iter().find_map(|r| r.program_s) {
        outln!(
            "timed: the traced program's reads spanned {span:.3} s; each policy's time: {}",
            rows.iter()
                .map(|r| format!("{} {:.3} s", r.policy, r.seconds))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if args.no_context_readahead {
        outln!("ondemand runs without context readahead (as in Linux 2.6.21)");
    }
    out!("{}", table(&rows).render());
    if let Some(path) = &args.plot {
        outln!("plot written to {}", path.display());
    }
    Ok(())
}

fn table(rows: &[SimResult]) -> Table {
    let thrash = rows.iter().any(|r| r.peak_throughput_mb_s.is_some());
    let mut header = vec![
        "workload",
        "policy",
        "rec KiB",
        "MB/s",
        "avg IO KiB",
        "hit",
        "waste",
        "evicted unused",
        "late",
        "dev/req",
    ];
    if thrash {
        header.extend(["peak MB/s", "min IO KiB"]);
    }
    let mut t = Table::new(&header);
    for r in rows {
        let mut cells = vec![
            r.workload.clone(),
            r.policy.clone(),
            format!("{:.0}", r.record_kib),
            format!("{:.1}", r.throughput_mb_s),
            format!("{:.0}", r.avg_io_kib),
            format!("{:.3}", r.hit_ratio),
            format!("{:.3}", r.waste_ratio),
            r.evicted_before_use_pages.to_string(),
            r.late_prefetches.to_string(),
            format!("{:.2}", r.read_amplification),
        ];
        if let (Some(p), Some(m)) = (r.peak_throughput_mb_s, r.min_avg_io_kib) {
            cells.push(format!("{p:.1}"));
            cells.push(format!("{m:.0}"));
        }
        t.row(cells);
    }
    t
}

fn plot(scenario: &Scenario, rows: &[SimResult]) -> String {
    let mut policies: Vec<String> = Vec::new();
    let mut workloads: Vec<String> = Vec::new();
    for r in rows {
        if !policies.contains(&r.policy) {
            policies.push(r.policy.clone());
        }
        if !workloads.contains(&r.workload) {
            workloads.push(r.workload.clone());
        }
    }
    if let Scenario::Thrash = scenario {
        let values: Vec<Vec<f64>> = policies
            .iter()
            .map(|p| {
                rows.iter()
                    .find(|r| &r.policy == p)
                    .and_then(|r| r.timeline_mb_s.clone())
                    .unwrap_or_default()
            })
            .collect();
        return line_chart(
            "readahead thrashing: a 100 KB/s reader started every second",
            "seconds",
            "delivered MB/s",
            &policies,
            &values,
        );
    }
    let values: Vec<Vec<f64>> = policies
        .iter()
        .map(|p| {
            workloads
                .iter()
                .map(|w| {
                    rows.iter()
                        .find(|r| &r.policy == p && &r.workload == w)
                        .map(|r| r.throughput_mb_s)
                        .unwrap_or(0.0)
                })
                .collect()
        })
        .collect();
    bar_chart(
        &format!("{}: throughput per policy", scenario.name()),
        "MB/s",
        &workloads,
        &policies,
        &values,
    )
}
