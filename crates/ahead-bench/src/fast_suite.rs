//! `ahead bench fast`: cold sequential reads on the device as it is (no
//! cap), the kernel's buffered `pread` loop beside ahead's Direct mode, in 4
//! KiB and 128 KiB requests. Each side is judged by its best run, as
//! docs/measuring.md says for the "fast device": the host holds the file in
//! some runs and not in others, and a side's best run is the one where it
//! did, which is what a user on a real NVMe drive gets every time. Runs
//! alternate (kernel, ahead, kernel, ahead, …) so both sides see the same
//! host. CPU is the whole process's user + system time over the run
//! (getrusage): every thread of the engine counts. Beside it, the CPU
//! cycles of the same span (`workload::cycles`: what the CPU executed,
//! not what the host charged), each side by its fewest.
//!
//! ahead runs twice in each round: with a fresh engine, whose run also
//! pays the first touch of the cache's memory, and with one engine kept
//! from run to run (its memory touched by one untimed read of the file
//! first), as a storage engine or a long-running process keeps its cache.
//! Before each of its runs the engine drops the pages it kept of the file
//! at its last close (`Engine::evict`), so each run of the kept engine is
//! as cold as the fresh one's (checked: the device reads the whole file
//! every run).

use std::path::{Path, PathBuf};

use crate::report::Table;
use crate::workload::{self, Engine, Measurement, Pattern, Workload};
use crate::Result;
use ahead::units::{format_size, parse_size};
use ahead::EngineConfig;
use clap::Args;

/// Arguments of `ahead bench fast`.
#[derive(Args, Debug, Clone)]
pub struct FastArgs {
    /// Read this file (at least 64 MiB) instead of generating one.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Size of the generated file.
    #[arg(long, default_value = "1g", value_parser = parse_size)]
    size: u64,
    /// Where to generate it (default: the system's temporary directory if
    /// it supports O_DIRECT, else the current directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Runs of each side for each request size (the best is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Request sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4k,128k")]
    bs: Vec<String>,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One request size: every run of each side.
pub struct FastRow {
    /// Request size in bytes.
    pub bs: u64,
    /// The kernel's runs, in order.
    pub kernel: Vec<Measurement>,
    /// ahead's runs, a fresh engine each, in order.
    pub ahead: Vec<Measurement>,
    /// ahead's runs through the one engine kept, in order.
    pub kept: Vec<Measurement>,
}

fn best(runs: &[Measurement], f: impl Fn(&Measurement) -> Option<f64>, most: bool) -> f64 {
    let v = runs.iter().filter_map(f);
    let b = if most {
        v.fold(f64::NAN, f64::max)
    } else {
        v.fold(f64::NAN, f64::min)
    };
    if b.is_nan() {
        0.0
    } else {
        b
    }
}

impl FastRow {
    /// (best MB/s, least CPU seconds) of the kernel's runs, of ahead's with
    /// a fresh engine, and of ahead's with the engine kept.
    pub fn bests(&self) -> [(f64, f64); 3] {
        [&self.kernel, &self.ahead, &self.kept].map(|r| {
            (
                best(r, |m| Some(m.mb_s()), true),
                best(r, |m| m.cpu_s, false),
            )
        })
    }

    /// The fewest CPU cycles (in billions) of the kernel's runs, of ahead's
    /// with a fresh engine and of ahead's with the engine kept; 0 where the
    /// CPU's counter was not available.
    pub fn least_gcycles(&self) -> [f64; 3] {
        [&self.kernel, &self.ahead, &self.kept]
            .map(|r| best(r, |m| m.cycles.map(|c| c as f64 / 1e9), false))
    }

    /// The row as JSON.
    pub fn json(&self) -> serde_json::Value {
        let [(k_mb, k_cpu), (a_mb, a_cpu), (e_mb, e_cpu)] = self.bests();
        let [k_cy, a_cy, e_cy] = self.least_gcycles();
        let runs = |r: &[Measurement]| -> Vec<serde_json::Value> {
            r.iter()
                .map(
                    |m| serde_json::json!({"mb_s": m.mb_s(), "cpu_s": m.cpu_s, "cycles": m.cycles}),
                )
                .collect()
        };
        serde_json::json!({
            "pattern": "seq",
            "bs": self.bs,
            "device": "as it is (not capped)",
            "kernel": {"best_mb_s": k_mb, "best_cpu_s": k_cpu, "least_gcycles": k_cy,
                       "runs": runs(&self.kernel)},
            "ahead": {"best_mb_s": a_mb, "best_cpu_s": a_cpu, "least_gcycles": a_cy,
                      "runs": runs(&self.ahead)},
            "throughput_ratio": ratio(a_mb, k_mb),
            "cpu_ratio": ratio(a_cpu, k_cpu),
            "cycles_ratio": ratio(a_cy, k_cy),
            "ahead_kept": {"best_mb_s": e_mb, "best_cpu_s": e_cpu, "least_gcycles": e_cy,
                           "runs": runs(&self.kept)},
            "kept_throughput_ratio": ratio(e_mb, k_mb),
            "kept_cpu_ratio": ratio(e_cpu, k_cpu),
            "kept_cycles_ratio": ratio(e_cy, k_cy),
        })
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && b > 0.0).then(|| a / b)
}

/// Measures every request size on `path`, alternating the three sides
/// (the kernel, ahead with a fresh engine, ahead with the engine kept), and
/// returns the rows; `progress` gets a line per run.
pub fn measure(
    path: &Path,
    config: &EngineConfig,
    sizes: &[u64],
    reps: usize,
    mut progress: impl FnMut(String),
) -> Result<Vec<FastRow>> {
    let ahead = Engine::Ahead {
        config: config.clone(),
        zero_copy: false,
        mode: ahead::Mode::Direct,
    };
    let kept = ahead::Engine::new(config.clone()).map_err(|e| e.to_string())?;
    let size = std::fs::metadata(path)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", path.display())))?
        .len();
    let kept_run = |w: &Workload| -> Result<Measurement> {
        // The pages the engine kept of the file at its last close go too.
        kept.evict(path).map_err(|e| e.to_string())?;
        let before = kept.stats().device_bytes;
        let m = workload::run_kept(path, &kept, ahead::Mode::Direct, w)?;
        let read = kept.stats().device_bytes - before;
        if read < size {
            return Err(format!(
                "the kept engine read {read} of {size} bytes from the device: \
                 it still had the file's pages, and the run was not cold"
            )
            .into());
        }
        Ok(m)
    };
    // Its memory touched once, untimed, as a process that has run a while.
    if let Some(&bs) = sizes.first() {
        kept_run(&Workload::new(Pattern::Seq, bs))?;
    }
    let mut rows = Vec::new();
    for &bs in sizes {
        let w = Workload::new(Pattern::Seq, bs);
        let mut row = FastRow {
            bs,
            kernel: Vec::new(),
            ahead: Vec::new(),
            kept: Vec::new(),
        };
        for rep in 0..reps.max(1) {
            for side in 0..3 {
                let (m, name) = match side {
                    0 => (workload::run(path, &Engine::Kernel, &w)?, "kernel"),
                    1 => (workload::run(path, &ahead, &w)?, "ahead, fresh engine"),
                    _ => (kept_run(&w)?, "ahead, engine kept"),
                };
                let huge = match m.huge_pages {
                    Some(h) if h.huge => ", cache in huge pages",
                    Some(h) if h.probe_ns.is_some() => ", cache in small pages (probed)",
                    _ => "",
                };
                progress(format!(
                    "seq {} run {}: {:<19} {:>8.1} MB/s, CPU {}, {} cycles{huge}",
                    format_size(bs),
                    rep + 1,
                    name,
                    m.mb_s(),
                    m.cpu_s.map_or("?".into(), |c| format!("{c:.3} s")),
                    m.cycles
                        .map_or("?".into(), |c| format!("{:.3} G", c as f64 / 1e9)),
                ));
                [&mut row.kernel, &mut row.ahead, &mut row.kept][side].push(m);
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The table of best figures and ratios: for each request size, ahead with
/// a fresh engine and with the engine kept, each beside the kernel.
pub fn table(rows: &[FastRow]) -> String {
    let mut t = Table::new(&[
        "pattern",
        "bs",
        "ahead engine",
        "kernel MB/s",
        "ahead MB/s",
        "ratio",
        "kernel CPU s",
        "ahead CPU s",
        "CPU ratio",
        "cycles ratio",
    ]);
    let x = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}x"));
    for r in rows {
        let [(k_mb, k_cpu), fresh, kept] = r.bests();
        let [k_cy, fresh_cy, kept_cy] = r.least_gcycles();
        for (name, (a_mb, a_cpu), a_cy) in [("fresh", fresh, fresh_cy), ("kept", kept, kept_cy)] {
            t.row(vec![
                "seq, cold".into(),
                format_size(r.bs),
                name.into(),
                format!("{k_mb:.1}"),
                format!("{a_mb:.1}"),
                x(ratio(a_mb, k_mb)),
                format!("{k_cpu:.3}"),
                format!("{a_cpu:.3}"),
                x(ratio(a_cpu, k_cpu)),
                x(ratio(a_cy, k_cy)),
            ]);
        }
    }
    t.render()
}

/// `ahead bench fast`.
pub fn run(args: FastArgs, config: &EngineConfig) -> Result<()> {
    let mut sizes = Vec::new();
    for s in &args.bs {
        let bs = parse_size(s).map_err(|e| crate::Error::msg(format!("--bs {s}: {e}")))?;
        if bs == 0 || bs % 4096 != 0 {
            return Err(format!("--bs {s}: a multiple of 4 KiB").into());
        }
        sizes.push(bs);
    }
    let (path, size, _work) = crate::workdir::data_file(
        args.file.as_deref(),
        args.size,
        args.dir.as_deref(),
        "ahead-bench-fast-",
        64 << 20,
    )?;
    let rows = measure(&path, config, &sizes, args.reps, |l| eprintln!("{l}"))?;
    print!("{}", table(&rows));
    println!(
        "file {} ({}), cold (evicted before each run), the device as it is (not capped), \
         {} alternated run(s) per side, best of each side",
        path.display(),
        format_size(size),
        args.reps.max(1)
    );
    if let Some(j) = &args.json {
        let v: Vec<serde_json::Value> = rows.iter().map(FastRow::json).collect();
        std::fs::write(j, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| crate::Error::msg(format!("{}: {e}", j.display())))?;
    }
    Ok(())
}
