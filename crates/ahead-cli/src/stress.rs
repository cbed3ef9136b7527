//! `ahead stress FILE...`: mixed reads from many threads through one small
//! cache, every byte compared with the kernel's (see `ahead_bench::stress`).

use std::path::PathBuf;
use std::time::Duration;

use ahead::units::{format_size, parse_size};
use ahead_bench::stress::{self, Faults, StressConfig};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

/// Arguments of `ahead stress`.
#[derive(Args, Debug)]
pub struct StressArgs {
    /// Files to read (regular files or block devices, not empty).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// How long to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Reader threads.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// The engine's cache budget (much smaller than the files, to make it
    /// evict).
    #[arg(long, default_value = "16m", value_parser = parse_size)]
    cache: u64,
    /// Faults to inject: `eio:P` (EIO on a share P of reads) or
    /// `delay:MS:P` (completions MS late).
    #[arg(long)]
    faults: Option<Faults>,
    /// Seed of the requests and of the faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Runs `ahead stress`; whether it passed.
pub fn run(args: StressArgs) -> Result<bool> {
    if !(args.seconds > 0.0 && args.seconds <= 7.0 * 86400.0) {
        bail!("--seconds: from a moment to a week");
    }
    let cfg = StressConfig {
        files: args.files,
        duration: Duration::from_secs_f64(args.seconds),
        threads: args.threads.into(),
        cache_bytes: args.cache,
        faults: args.faults,
        seed: args.seed,
    };
    let r = stress::run(&cfg).map_err(anyhow::Error::msg)?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bytes_verified": r.bytes_verified,
                "requests": r.requests,
                "mismatches": r.mismatches,
                "errors": r.errors,
                "injected_errors": r.injected_errors,
                "injected_faults": r.injected_faults,
                "peak_cache_bytes": r.peak_cache_bytes,
                "hits": r.hits,
                "lock_free_hits": r.lock_free_hits,
                "cache_budget_bytes": r.cache_budget_bytes,
                "hung": r.hung,
                "seconds": r.seconds,
                "passed": r.passed(),
                "problems": r.problems,
            }))?
        );
    } else {
        outln!(
            "{} in {} requests verified in {:.1} s by {} threads: {} mismatches, {} unexpected errors, \
             {} injected errors ({} faults); cache peak {} of {}; {} pages hit, {} of them lock-free{}",
            format_size(r.bytes_verified),
            r.requests,
            r.seconds,
            cfg.threads,
            r.mismatches,
            r.errors,
            r.injected_errors,
            r.injected_faults,
            format_size(r.peak_cache_bytes),
            format_size(r.cache_budget_bytes),
            r.hits,
            r.lock_free_hits,
            if r.hung { "; HUNG" } else { "" }
        );
        for p in &r.problems {
            eprintln!("ahead: stress: {p}");
        }
    }
    Ok(r.passed())
}
