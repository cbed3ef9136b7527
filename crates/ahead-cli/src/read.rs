//! `ahead read`: reads a file with an access pattern through ahead or the
//! kernel, and reports throughput and counters.

use std::path::PathBuf;

use ahead::io::BackendKind;
use ahead::ra::PolicyKind;
use ahead::units::{format_size, parse_size};
use ahead::EngineConfig;
use ahead_bench::workload::{self, Engine, Measurement, Pattern, Workload};
use anyhow::{bail, Context, Result};
use clap::Args;

/// Largest request `read` makes (its buffer is allocated whole).
const MAX_BS: u64 = 1 << 30;

/// Engine settings shared by `read` and `bench`.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// Readahead policy of ahead: ahead, ondemand or legacy.
    #[arg(long, default_value = "ahead")]
    pub policy: String,
    /// ahead's cache budget (e.g. 256m, 1g).
    #[arg(long, default_value = "256m")]
    pub cache: String,
    /// ahead's largest readahead window [default: 4m; 16m for mount].
    #[arg(long = "max-readahead")]
    pub max_readahead: Option<String>,
    /// Grow Direct mode's windows past --max-readahead while readers wait
    /// for readahead and doubling them does not read slower (`--stats`
    /// says to what; `ahead doctor FILE` shows it for a device).
    #[arg(long = "tune-readahead")]
    pub tune_readahead: bool,
    /// Direct mode's readahead decides by the device's costs as learned
    /// from its reads (`--stats` prints them): on, or off for the
    /// policies' measured defaults [default: off].
    #[arg(long = "learned-costs", value_parser = ["on", "off"])]
    pub learned_costs: Option<String>,
    /// ahead's largest single read, a ranged GET for an object (e.g. 1m)
    /// [default: 256k].
    #[arg(long = "max-io")]
    pub max_io: Option<String>,
    /// ahead's most reads in flight at once (fio's iodepth); for objects
    /// the GETs in flight to begin with, grown to up to 4 times as many
    /// where the measured bandwidth-delay product asks [default: 64].
    #[arg(long = "io-depth")]
    pub io_depth: Option<usize>,
    /// ahead's I/O backend: auto, uring or pool.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Do not register ahead's cache with io_uring (fixed buffers): the
    /// kernel then pins each read's pages, as before.
    #[arg(long)]
    pub no_registered_buffers: bool,
    /// ahead's cache in transparent huge pages: off, on, or auto (timed
    /// as the cache fills: kept while each costs less to touch than 512
    /// small pages; docs/bench.md).
    #[arg(long = "huge-pages", default_value = "auto")]
    pub huge_pages: String,
    /// Objects: keep what is fetched in a disk tier in this directory
    /// (made 0700; yours alone), shared with every process that names
    /// it, and read it from there the next time.
    #[arg(long = "cache-dir", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The disk tier's bound (e.g. 20g) [default: half the space free
    /// under --cache-dir].
    #[arg(long = "cache-dir-size", value_name = "SIZE", requires = "cache_dir")]
    pub cache_dir_size: Option<String>,
}

impl EngineArgs {
    /// The engine configuration these arguments describe.
    pub fn config(&self) -> Result<EngineConfig> {
        let policy: PolicyKind = self.policy.parse().map_err(anyhow::Error::msg)?;
        let backend: BackendKind = self.backend.parse().map_err(anyhow::Error::msg)?;
        let config = EngineConfig::default()
            .with_policy(policy)
            .with_backend(backend)
            .with_cache_bytes(parse_size(&self.cache).context("--cache")?)
            .with_registered_buffers(!self.no_registered_buffers)
            .with_huge_pages(self.huge_pages.parse().map_err(anyhow::Error::msg)?);
        let mut config = config;
        if let Some(m) = &self.max_readahead {
            config = config.with_max_readahead(parse_size(m).context("--max-readahead")?);
        }
        config = config.with_readahead_tuning(self.tune_readahead);
        if let Some(v) = &self.learned_costs {
            config = config.with_learned_costs(v == "on");
        }
        if let Some(d) = self.io_depth {
            if d == 0 {
                anyhow::bail!("--io-depth: at least 1");
            }
            config = config.with_depth(d);
        }
        if let Some(m) = &self.max_io {
            config = config.with_max_io(parse_size(m).context("--max-io")?);
        }
        if let Some(dir) = &self.cache_dir {
            config = config.with_cache_dir(dir);
        }
        if let Some(s) = &self.cache_dir_size {
            config = config.with_cache_dir_bytes(parse_size(s).context("--cache-dir-size")?);
        }
        Ok(config)
    }
}

/// Arguments of `ahead read`.
#[derive(Args, Debug)]
pub struct ReadArgs {
    /// The file to read, or an object (`s3://bucket/key`,
    /// `http(s)://…`, with the AWS_* environment).
    file: PathBuf,
    /// Access pattern: seq, reverse, stride:GAP, random, interleaved:N.
    #[arg(long, default_value = "seq")]
    pattern: String,
    /// Request size.
    #[arg(long, default_value = "4k")]
    bs: String,
    /// Requests in flight (threads for the kernel, read_many batches for ahead).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Stop after this many bytes (default: the whole pattern).
    #[arg(long)]
    bytes: Option<String>,
    /// Who reads: ahead in direct, buffered or uncached mode; or the
    /// kernel: kernel (buffered pread), kernel-direct (O_DIRECT pread).
    #[arg(long, default_value = "direct")]
    mode: String,
    #[command(flatten)]
    engine: EngineArgs,
    /// Drop the file from the kernel's cache first.
    #[arg(long)]
    cold: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Print ahead's counters.
    #[arg(long)]
    stats: bool,
}

/// Runs `ahead read`.
pub fn run(args: ReadArgs) -> Result<()> {
    let pattern: Pattern = args.pattern.parse().map_err(anyhow::Error::msg)?;
    let bs = parse_size(&args.bs).context("--bs")?;
    if bs == 0 || bs > MAX_BS {
        bail!(
            "--bs {}: must be from 1 byte to {}",
            args.bs,
            format_size(MAX_BS)
        );
    }
    let bytes = match &args.bytes {
        Some(b) => parse_size(b).context("--bytes")?,
        None => 0,
    };
    let engine = match args.mode.as_str() {
        "kernel" => Engine::Kernel,
        "kernel-direct" => Engine::KernelDirect,
        m => Engine::Ahead {
            config: args.engine.config()?,
            zero_copy: false,
            mode: if m == "ahead" { "direct" } else { m }.parse().map_err(
                |e: ahead::ParseError| {
                    anyhow::anyhow!("--mode: {e}; or the kernel's: kernel, kernel-direct")
                },
            )?,
        },
    };
    let w = Workload {
        depth: args.depth.max(1),
        bytes,
        cold: args.cold,
        latency: pattern == Pattern::Random,
        ..Workload::new(pattern, bs)
    };
    let m = workload::run(&args.file, &engine, &w).map_err(anyhow::Error::msg)?;
    if !m.direct
        && matches!(
            engine,
            Engine::Ahead {
                mode: ahead::Mode::Direct,
                ..
            }
        )
        && !args.json
    {
        warn_not_direct(&args.file);
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string(&json(&args.pattern, engine.name(), bs, &m))?
        );
    } else {
        out!("{}", text(&args.pattern, engine.name(), bs, &m, args.stats));
    }
    Ok(())
}

/// One measurement as a JSON object.
pub fn json(pattern: &str, engine: &str, bs: u64, m: &Measurement) -> serde_json::Value {
    let mut o = serde_json::json!({
        "pattern": pattern,
        "engine": engine,
        "bs": bs,
        "bytes": m.bytes,
        "seconds": m.seconds,
        "mb_s": m.mb_s(),
        "direct": m.direct,
    });
    if let Some(c) = m.cpu_s {
        o["cpu_s"] = c.into();
    }
    if let Some(f) = m.fixed_reads {
        o["fixed_reads"] = f.into();
    }
    if let Some(p) = m.p50_us {
        o["p50_us"] = p.into();
    }
    if let Some(p) = m.p99_us {
        o["p99_us"] = p.into();
    }
    if let Some(s) = &m.stats {
        for (k, v) in s.fields() {
            o[k] = v.into();
        }
    }
    if let Some(t) = &m.readahead_tuning {
        o["readahead_window"] = t.window.into();
        o["readahead_tuning"] = t
            .steps
            .iter()
            .map(|s| {
                serde_json::json!({"window": s.window, "mb_s": s.bytes_per_sec / 1e6,
                    "against_mb_s": s.against / 1e6, "late_per_window": s.late, "kept": s.kept})
            })
            .collect::<Vec<_>>()
            .into();
    }
    if let Some(c) = m.device_cost {
        o["device_request_pages"] = c.request_pages.into();
        o["device_latency_pages"] = c.latency_pages.into();
        o["device_parallelism"] = c.parallelism.into();
    }
    if let Some(h) = m.huge_pages {
        o["huge_pages"] = h.huge.into();
        if let Some((big, small)) = h.probe_ns {
            o["huge_probe_ns"] = big.into();
            o["small_probe_ns"] = small.into();
        }
        if let Some(at) = h.gave_up_at {
            o["huge_pages_given_up_at"] = at.into();
        }
    }
    if let Some(r) = m.remote {
        o["remote_requests"] = r.requests.into();
        o["remote_bytes_fetched"] = r.bytes_fetched.into();
        o["tier_bytes"] = r.tier_bytes.into();
        o["tier_chunks_hit"] = r.tier_chunks_hit.into();
        o["tier_chunks_missed"] = r.tier_chunks_missed.into();
    }
    o
}

fn text(pattern: &str, engine: &str, bs: u64, m: &Measurement, stats: bool) -> String {
    let mut out = format!(
        "{engine}: {pattern} {} requests: {} in {:.3} s = {:.1} MB/s",
        format_size(bs),
        format_size(m.bytes),
        m.seconds,
        m.mb_s()
    );
    if let (Some(a), Some(b)) = (m.p50_us, m.p99_us) {
        out += &format!(", latency p50 {a:.1} µs p99 {b:.1} µs");
    }
    out.push('\n');
    if let (true, Some(s)) = (stats, &m.stats) {
        for (k, v) in s.fields() {
            out += &format!("  {k:<20} {v}\n");
        }
        if let Some(t) = &m.readahead_tuning {
            out += &format!("  readahead window     {}\n", tuning_text(t));
        }
        if let Some(c) = m.device_cost {
            out += &format!(
                "  device cost (learned): a request {} pages, latency {} pages, {} in parallel\n",
                c.request_pages, c.latency_pages, c.parallelism
            );
        }
        if let Some(h) = m.huge_pages {
            out += &format!(
                "  huge pages           {}",
                if h.huge { "yes" } else { "no" }
            );
            if let Some((big, small)) = h.probe_ns {
                out += &format!(
                    " (probe: one huge page {:.2} ms, 512 small pages {:.2} ms",
                    big as f64 / 1e6,
                    small as f64 / 1e6
                );
                if let Some(at) = h.gave_up_at {
                    out += &format!("; given up at {}", format_size(at));
                }
                out.push(')');
            }
            out.push('\n');
        }
        if let Some(r) = m.remote {
            out += &format!(
                "  object: {} requests, {} fetched; disk tier: {} read, {} chunks found, {} missed\n",
                r.requests,
                format_size(r.bytes_fetched),
                format_size(r.tier_bytes),
                r.tier_chunks_hit,
                r.tier_chunks_missed
            );
        }
    }
    out
}

/// The warning printed when a file is read through the kernel's cache
/// because its file system refuses O_DIRECT (tmpfs).
pub fn warn_not_direct(path: &std::path::Path) {
    eprintln!(
        "ahead: warning: {}: the file system refuses O_DIRECT; read through the kernel's cache instead",
        path.display()
    );
}

/// What the window tuner chose and why, on one line: the window, then each
/// sample (`ahead read --stats`, `ahead doctor`).
pub fn tuning_text(t: &ahead::ReadaheadTuning) -> String {
    let mut out = format!(
        "{} (started at {}, may grow to {}{})",
        format_size(t.window),
        format_size(t.start),
        format_size(t.ceiling),
        if t.settled {
            "; settled"
        } else {
            "; still measuring"
        }
    );
    for s in &t.steps {
        out += &format!(
            "; {} at {:.0} MB/s, {:.2} waits a window",
            format_size(s.window),
            s.bytes_per_sec / 1e6,
            s.late
        );
        if s.against > 0.0 {
            out += &format!(
                " against {:.0} ({})",
                s.against / 1e6,
                if s.kept { "kept" } else { "not kept" }
            );
        }
    }
    out
}
