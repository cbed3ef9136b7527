//! `ahead bench mix`: the mixed-latency workload of the non-blocking
//! buffered reads series (docs/references.md) — a server's event
//! loop keeping 16 KiB reads in flight over a cached file (f1, 73%, Zipf),
//! an uncached one (f2, 18%, uniform) and a sequential one (f3, 9%) — run by
//! ahead's Buffered mode, a thread pool, io_uring and blocking preads.

use std::path::PathBuf;

use crate::mix::{self, ClassResult, MixConfig, MixEngine, MixFiles};
use crate::report::{bar_chart, Table};
use crate::{Error, Result};
use ahead::units::{format_size, parse_size};
use clap::Args;

/// Arguments of `ahead bench mix`.
#[derive(Args, Debug, Clone)]
pub struct MixArgs {
    /// Seconds each engine runs the loop.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Requests in flight (and threads for pool-only and pread).
    #[arg(long, default_value_t = 32)]
    inflight: usize,
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Size of f1, the cached file.
    #[arg(long, default_value = "256m", value_parser = parse_size)]
    f1_size: u64,
    /// Size of f2 and f3, the uncached files.
    #[arg(long, default_value = "2g", value_parser = parse_size)]
    big_size: u64,
    /// Where to put the files (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Small files (64 MiB and 256 MiB), at most 2 s per run, one
    /// repetition: a smoke test, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG of the latency percentiles to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Where ahead-buffered sends its misses: auto, uring or pool.
    #[arg(long, default_value = "pool")]
    ahead_backend: String,
    /// No kernel readahead hints from ahead-buffered.
    #[arg(long)]
    no_hints: bool,
    /// Threads of ahead-buffered's miss backend (default: --inflight).
    #[arg(long, default_value_t = 0)]
    ahead_depth: usize,
    /// Only these engines (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
}

impl MixArgs {
    /// The short form `ahead bench --quick` runs.
    pub fn quick() -> MixArgs {
        MixArgs {
            seconds: 1.0,
            inflight: 32,
            reps: 1,
            f1_size: 64 << 20,
            big_size: 256 << 20,
            dir: None,
            quick: true,
            json: None,
            plot: None,
            ahead_backend: "pool".into(),
            no_hints: false,
            ahead_depth: 0,
            engines: Vec::new(),
        }
    }
}

/// One reported row: an engine on a class, medians over the repetitions.
pub struct MixRow {
    /// The engine.
    pub engine: &'static str,
    /// `mix-f1`, `mix-f2`, `mix-f3` or `mix-f1-alone`.
    pub pattern: &'static str,
    /// Each repetition's figures.
    pub runs: Vec<ClassResult>,
}

impl MixRow {
    fn median(&self, f: impl Fn(&ClassResult) -> f64) -> f64 {
        crate::report::median(self.runs.iter().map(f).collect()).unwrap_or(0.0)
    }
    /// The row as JSON.
    pub fn json(&self) -> serde_json::Value {
        let mut o = serde_json::json!({
            "engine": self.engine,
            "pattern": self.pattern,
            "bs": mix::BS,
            "reps": self.runs.len(),
            "requests": self.median(|r| r.requests as f64),
            "p50_us": self.median(|r| r.p50_us),
            "p90_us": self.median(|r| r.p90_us),
            "p99_us": self.median(|r| r.p99_us),
            "p999_us": self.median(|r| r.p999_us),
            "mb_s": self.median(|r| r.mb_s),
        });
        if self.runs.iter().all(|r| r.inline_share.is_some()) {
            o["inline_share"] = self.median(|r| r.inline_share.unwrap_or(0.0)).into();
        }
        o
    }
}

const PATTERNS: [&str; 3] = ["mix-f1", "mix-f2", "mix-f3"];

/// Runs the benchmark and returns its rows (printing the table).
pub fn measure(args: &MixArgs) -> Result<Vec<MixRow>> {
    let (seconds, reps, f1_size, big) = if args.quick {
        (args.seconds.min(2.0), 1, 64 << 20, 256 << 20)
    } else {
        (args.seconds, args.reps.max(1), args.f1_size, args.big_size)
    };
    if seconds <= 0.0 || args.inflight == 0 || args.inflight > 1024 {
        return Err(Error::msg(
            "--seconds must be positive and --inflight from 1 to 1024",
        ));
    }
    if f1_size < mix::BS || big < mix::BS {
        return Err(Error::msg("files must hold at least one 16 KiB request"));
    }
    let backend: ahead::io::BackendKind = args.ahead_backend.parse()?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => crate::workdir::default_dir()?,
    };
    let work = crate::workdir::private_dir(&dir, "ahead-mix-")?;
    let files = MixFiles {
        f1: work.path().join("f1"),
        f2: work.path().join("f2"),
        f3: work.path().join("f3"),
    };
    eprintln!(
        "generating {} + 2 × {} in {} ...",
        format_size(f1_size),
        format_size(big),
        work.path().display()
    );
    for (p, s) in [(&files.f1, f1_size), (&files.f2, big), (&files.f3, big)] {
        ahead::testdata::write_file(p, s)
            .map_err(|e| Error::from(e).context(format!("write {}", p.display())))?;
    }
    let mut rows: Vec<MixRow> = Vec::new();
    let mut push = |engine: &'static str, pattern: &'static str, r: ClassResult| match rows
        .iter_mut()
        .find(|x| x.engine == engine && x.pattern == pattern)
    {
        Some(x) => x.runs.push(r),
        None => rows.push(MixRow {
            engine,
            pattern,
            runs: vec![r],
        }),
    };
    for rep in 0..reps {
        let mut order: Vec<MixEngine> = MixEngine::ALL
            .into_iter()
            .filter(|e| args.engines.is_empty() || args.engines.iter().any(|n| n == e.name()))
            .collect();
        if order.is_empty() {
            return Err(Error::msg(
                "--engines: none of ahead-buffered, pool-only, io_uring, pread",
            ));
        }
        let n = order.len();
        order.rotate_left(rep % n);
        for engine in order {
            for alone in [false, true] {
                mix::prepare(&files)?;
                let cfg = MixConfig {
                    seconds,
                    inflight: args.inflight,
                    seed: 42 + rep as u64,
                    f1_alone: alone,
                    ahead_backend: backend,
                    hints: !args.no_hints,
                    ahead_depth: args.ahead_depth,
                };
                let r = mix::run(&files, engine, &cfg)
                    .map_err(|e| Error::msg(format!("{}: {e}", engine.name())))?;
                for (c, res) in r.into_iter().enumerate() {
                    let Some(res) = res else { continue };
                    let pattern = if alone { "mix-f1-alone" } else { PATTERNS[c] };
                    eprintln!(
                        "  rep {}/{reps} {:<15} {:<13} p50 {:>9.1} µs p99 {:>9.1} µs {:>8.1} MB/s",
                        rep + 1,
                        engine.name(),
                        pattern,
                        res.p50_us,
                        res.p99_us,
                        res.mb_s
                    );
                    push(engine.name(), pattern, res);
                }
            }
        }
    }
    print!(
        "{}",
        table(
            &rows,
            reps,
            seconds,
            args.inflight,
            mix::ahead_backend(backend)
        )
    );
    Ok(rows)
}

fn table(rows: &[MixRow], reps: usize, seconds: f64, inflight: usize, backend: &str) -> String {
    let mut t = Table::new(&[
        "engine",
        "class",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "MB/s",
        "inline",
    ]);
    for r in rows {
        let j = r.json();
        let f = |k: &str| format!("{:.1}", j[k].as_f64().unwrap_or(0.0));
        t.row(vec![
            r.engine.into(),
            r.pattern.into(),
            f("p50_us"),
            f("p90_us"),
            f("p99_us"),
            f("p999_us"),
            f("mb_s"),
            j["inline_share"]
                .as_f64()
                .map_or("—".into(), |s| format!("{:.0}%", s * 100.0)),
        ]);
    }
    let mut out = t.render();
    let get = |e: &str, p: &str, k: &str| {
        rows.iter()
            .find(|r| r.engine == e && r.pattern == p)
            .and_then(|r| r.json()[k].as_f64())
    };
    let total = |e: &str| -> f64 { PATTERNS.iter().filter_map(|p| get(e, p, "mb_s")).sum() };
    if let (Some(a), Some(p), Some(u)) = (
        get("ahead-buffered", "mix-f1", "p50_us"),
        get("pool-only", "mix-f1", "p50_us"),
        get("io_uring", "mix-f1", "p50_us"),
    ) {
        out += &format!(
            "f1 p50: pool-only / ahead-buffered = {:.1}×; ahead-buffered / io_uring = {:.2}×\n",
            p / a,
            a / u
        );
    }
    if let (Some(m), Some(s)) = (
        get("ahead-buffered", "mix-f1", "p99_us"),
        get("ahead-buffered", "mix-f1-alone", "p99_us"),
    ) {
        out += &format!("ahead-buffered f1 p99 in the mix / alone = {:.2}×\n", m / s);
    }
    if total("ahead-buffered") > 0.0 && total("pool-only") > 0.0 {
        out += &format!(
            "total MB/s: ahead-buffered / pool-only = {:.2}×\n",
            total("ahead-buffered") / total("pool-only")
        );
    }
    out += &format!(
        "16 KiB reads, {inflight} in flight, {seconds} s per run, {reps} repetition(s), medians; \
         misses of ahead-buffered go to its {backend} backend\n"
    );
    out
}

/// Runs `ahead bench mix`.
pub fn run(args: MixArgs) -> Result<()> {
    let rows = measure(&args)?;
    if let Some(j) = &args.json {
        let v: Vec<serde_json::Value> = rows.iter().map(MixRow::json).collect();
        std::fs::write(j, serde_json::to_string_pretty(&v)?)
            .map_err(|e| Error::from(e).context(format!("write {}", j.display())))?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(p, plot(&rows))
            .map_err(|e| Error::from(e).context(format!("write {}", p.display())))?;
    }
    Ok(())
}

/// Latency percentiles of every class, one bar per engine, on a log scale.
pub fn plot(rows: &[MixRow]) -> String {
    let engines: Vec<String> = MixEngine::ALL.iter().map(|e| e.name().into()).collect();
    let mut cats = Vec::new();
    let mut values = vec![Vec::new(); engines.len()];
    for p in ["mix-f1", "mix-f1-alone", "mix-f2", "mix-f3"] {
        for (q, k) in [("p50", "p50_us"), ("p99", "p99_us"), ("p99.9", "p999_us")] {
            cats.push(format!("{} {q}", p.trim_start_matches("mix-")));
            for (s, e) in engines.iter().enumerate() {
                let v = rows
                    .iter()
                    .find(|r| r.engine == e && r.pattern == p)
                    .and_then(|r| r.json()[k].as_f64())
                    .unwrap_or(0.0);
                values[s].push(if v > 0.0 { (v.max(1.0)).log10() } else { 0.0 });
            }
        }
    }
    bar_chart(
        "bench mix: latency of 16 KiB reads by class",
        "log10 µs",
        &cats,
        &engines,
        &values,
    )
}
