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
    /// ahead's I/O backend: auto, uring or pool.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Do not register ahead's cache with io_uring (fixed buffers): the
    /// kernel then pins each read's pages, as before.
    #[arg(long)]
    pub no_registered_buffers: bool,
}

impl EngineArgs {
    /// The engine configuration these arguments describe.
    pub fn config(&self) -> Result<EngineConfig> {
        let policy: PolicyKind = self.policy.parse().map_err(anyhow::Error::msg)?;
        let backend: BackendKind = self.backend.parse().map_err(anyhow::Error::msg)?;
        Ok(EngineConfig::default()
            .with_policy(policy)
            .with_backend(backend)
            .with_cache_bytes(parse_size(&self.cache).context("--cache")?)
            .with_max_readahead(
                parse_size(self.max_readahead.as_deref().unwrap_or("4m"))
                    .context("--max-readahead")?,
            )
            .with_registered_buffers(!self.no_registered_buffers))
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
    if let Some(c) = m.device_cost {
        o["device_request_pages"] = c.request_pages.into();
        o["device_latency_pages"] = c.latency_pages.into();
        o["device_parallelism"] = c.parallelism.into();
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
        if let Some(c) = m.device_cost {
            out += &format!(
                "  device cost (learned): a request {} pages, latency {} pages, {} in parallel\n",
                c.request_pages, c.latency_pages, c.parallelism
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
