//! `ahead bench remote`'s rows as a table and as a chart.

use super::{RemoteConfig, RemoteRow};
use crate::report::Table;

/// The rows as a table.
pub fn table(rows: &[RemoteRow], cfg: &RemoteConfig) -> String {
    let mut t = Table::new(&[
        "pattern",
        "engine",
        "MB/s",
        "÷ oracle",
        "fetched÷asked",
        "p50 µs",
        "p99 µs",
        "peak RSS MiB",
        "CPU s",
    ]);
    for r in rows {
        let oracle = r.engine == "oracle";
        let blank = |s: String| if oracle { String::new() } else { s };
        t.row(vec![
            r.pattern.clone(),
            r.engine.clone(),
            format!("{:.1}", r.mb_s),
            blank(format!("{:.2}", r.oracle_ratio)),
            blank(format!("{:.2}", r.fetched_ratio)),
            blank(format!("{:.0}", r.p50_us)),
            blank(format!("{:.0}", r.p99_us)),
            blank(format!("{:.0}", r.peak_rss_mib)),
            blank(format!("{:.2}", r.cpu_s)),
        ]);
    }
    let p = cfg.profile;
    format!(
        "{}server: {}; network: {} ({} ms first byte, {:.0} MB/s per connection, {:.0} MB/s in all, {} GET/s); \
         object {}; {} s at most per run, {} repetition(s), medians; ahead: cache {}, window {}, GETs up to {}\n",
        t.render(),
        cfg.server,
        p.name,
        p.first_byte.as_millis(),
        p.per_conn as f64 / 1e6,
        p.total as f64 / 1e6,
        p.max_rps,
        ahead::units::format_size(cfg.object_size),
        cfg.seconds,
        cfg.reps,
        ahead::units::format_size(cfg.cache_bytes),
        ahead::units::format_size(cfg.max_readahead),
        ahead::units::format_size(cfg.max_io),
    )
}

/// The rows as a bar chart (SVG): MB/s per pattern, one bar per engine
/// and the oracle.
pub fn plot(rows: &[RemoteRow], cfg: &RemoteConfig) -> String {
    let mut patterns: Vec<String> = Vec::new();
    let mut engines: Vec<String> = Vec::new();
    for r in rows {
        if !patterns.contains(&r.pattern) {
            patterns.push(r.pattern.clone());
        }
        if !engines.contains(&r.engine) {
            engines.push(r.engine.clone());
        }
    }
    let values: Vec<Vec<f64>> = engines
        .iter()
        .map(|e| {
            patterns
                .iter()
                .map(|p| {
                    rows.iter()
                        .find(|r| &r.engine == e && &r.pattern == p)
                        .map_or(0.0, |r| r.mb_s)
                })
                .collect()
        })
        .collect();
    let title = format!(
        "ahead bench remote: {} profile, {} (medians of {})",
        cfg.profile.name, cfg.server, cfg.reps
    );
    crate::report::bar_chart(&title, "MB/s", &patterns, &engines, &values)
}
