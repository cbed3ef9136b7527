//! The read benchmark's suite: its cases (pattern × engines), the
//! repetitions run in rotated order, the rows with their medians, the
//! table, the JSON rows and the plot. `ahead bench` parses its arguments,
//! sets up the file and the device, calls [`run_cases`] and prints.

use std::collections::BTreeMap;
use std::path::Path;

use ahead::units::format_size;
use ahead::Mode;

use crate::device::Profile;
use crate::report::{bar_chart, Table};
use crate::workload::{self, Engine, Measurement, Pattern, Workload};

/// One benchmark case: a named pattern and the engines that run it.
pub struct Case {
    /// The pattern's name in the table.
    pub name: &'static str,
    /// What is read.
    pub workload: Workload,
    /// Who reads it.
    pub engines: Vec<Engine>,
}

/// One row of results.
pub struct Row {
    /// The case's name.
    pub pattern: &'static str,
    /// The engine's name.
    pub engine: &'static str,
    /// Request size.
    pub bs: u64,
    /// Every repetition's measurement.
    pub runs: Vec<Measurement>,
    /// Largest peak resident set of one run (ahead's engines only).
    pub peak_rss: Option<u64>,
    /// The device profile's best for this pattern, MB/s (cold rows on a
    /// capped device only).
    pub oracle_mb_s: Option<f64>,
}

impl Row {
    /// The median of a figure over the repetitions.
    pub fn median(&self, f: impl Fn(&Measurement) -> Option<f64>) -> Option<f64> {
        crate::report::median(self.runs.iter().filter_map(f).collect())
    }
    /// Median throughput.
    pub fn mb_s(&self) -> f64 {
        self.median(|m| Some(m.mb_s())).unwrap_or(0.0)
    }
    /// CPU seconds per GiB read (median).
    pub fn cpu_per_gib(&self) -> Option<f64> {
        self.median(|m| Some(m.cpu_s? / (m.bytes.max(1) as f64 / (1u64 << 30) as f64)))
    }
}

/// The cases of a run over a file of `size` bytes (`quick`: fewer bytes
/// each), ahead configured as `ahead`, in the given modes.
pub fn cases(size: u64, quick: bool, ahead: &ahead::EngineConfig, modes: &[Mode]) -> Vec<Case> {
    let k = |q: u64, full: u64| if quick { q } else { full };
    let with = |mode: Mode| Engine::Ahead {
        config: ahead.clone(),
        zero_copy: false,
        mode,
    };
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
    v.extend(cached_cases(size, quick, ahead, modes));
    v
}

/// The cached cases: a region larger than the CPU caches but well inside
/// ahead's budget, read once to warm, then random 4 KiB and 16 KiB reads,
/// every byte read by the caller; the kernel, ahead's modes (not
/// Uncached) and Direct mode's zero-copy reads.
fn cached_cases(size: u64, quick: bool, ahead: &ahead::EngineConfig, modes: &[Mode]) -> Vec<Case> {
    let k = |q: u64, full: u64| if quick { q } else { full };
    let region = (ahead.cache_bytes / 2).min(size).min(128 << 20);
    let mut v = Vec::new();
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
                v.extend(
                    modes
                        .iter()
                        .filter(|&&m| m != Mode::Uncached)
                        .map(|&m| Engine::Ahead {
                            config: ahead.clone(),
                            zero_copy: false,
                            mode: m,
                        }),
                );
                if modes.contains(&Mode::Direct) {
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

/// Slices of a cached case, each read by every engine in turn
/// ([`workload::run_alternated`]): 16, so that each slice of `--quick`'s
/// 256 MiB of 16 KiB reads is about 1,000 reads, a few milliseconds.
pub const CACHED_SLICES: usize = 16;

/// Runs every case `reps` times over `path`, the engines' order rotated
/// each repetition (so that none always runs first: the virtual disk here
/// is faster on data the host read recently), and gathers the rows. Each
/// run's line (and any warning) goes to `progress`. `profile`: the capped
/// device, for the oracle column.
pub fn run_cases(
    path: &Path,
    cases: &[Case],
    reps: usize,
    profile: Option<Profile>,
    mut progress: impl FnMut(&str),
) -> crate::Result<Vec<Row>> {
    let mut rows: Vec<Row> = Vec::new();
    for rep in 0..reps {
        for case in cases {
            // Rotate the engines' order each repetition, so that none always
            // runs first (the virtual disk here is faster on data the host
            // read recently).
            let mut order: Vec<&Engine> = case.engines.iter().collect();
            let n = order.len();
            order.rotate_left(rep % n);
            // Cached cases: every engine in alternated slices, all open
            // at once (so no one engine's peak resident set).
            let mut alternated =
                workload::run_alternated(path, &order, &case.workload, CACHED_SLICES)?
                    .map(|ms| ms.into_iter());
            for engine in order {
                let (m, rss) = match alternated.as_mut().and_then(|ms| ms.next()) {
                    Some(m) => (m, None),
                    None => {
                        let is_ahead = matches!(engine, Engine::Ahead { .. });
                        let baseline = rss_now().filter(|_| is_ahead && reset_peak_rss());
                        let m = workload::run(path, engine, &case.workload)?;
                        (
                            m,
                            baseline.and_then(|b| Some(peak_rss()?.saturating_sub(b))),
                        )
                    }
                };
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
                    progress(&format!(
                        "ahead: warning: {}: O_DIRECT refused; {} read through the kernel cache",
                        path.display(),
                        engine.name()
                    ));
                }
                progress(&format!(
                    "  rep {}/{reps} {:<16} {:<16} {:>9.1} MB/s",
                    rep + 1,
                    case.name,
                    engine.name(),
                    m.mb_s()
                ));
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
    Ok(rows)
}

fn find<'a>(rows: &'a [Row], pattern: &str, engine: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.pattern == pattern && r.engine == engine)
}

/// The rows as a text table, with ratios to the kernel, the device limit
/// and the oracle.
pub fn table(rows: &[Row]) -> String {
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
pub(crate) fn reset_peak_rss() -> bool {
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

/// The process's peak resident set, bytes.
pub fn peak_rss() -> Option<u64> {
    status_kb("VmHWM:")
}

fn rss_now() -> Option<u64> {
    status_kb("VmRSS:")
}

/// One row as JSON (the interface for scripts: see docs/bench.md).
pub fn row_json(r: &Row) -> serde_json::Value {
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

/// The rows as an SVG bar chart.
pub fn plot(rows: &[Row]) -> String {
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
