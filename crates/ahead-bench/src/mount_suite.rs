//! `ahead bench mount`: `ahead mount` beside mountpoint-s3, s3fs-fuse and
//! rclone mount, on the same objects of the embedded server (or a
//! one-node Ceph cluster, `--server ceph`) behind a network profile, in
//! one run.
//!
//! The harness drives other programs (four FUSE daemons, fio, sqlite3,
//! tac, tail, tar, pyarrow, DuckDB), mounts and unmounts, drops the
//! kernel's caches and compares each program's output with the same
//! program on a local copy. It is written in Python
//! (`scripts/bench-mount` in the repository), which those readers need
//! anyway; the binary carries it and runs it with `python3`, giving it
//! this binary as the `ahead` to mount with and to serve the objects
//! (`ahead bench serve`).

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use crate::{Error, Result};

/// The harness, as in the repository.
const HARNESS: &str = include_str!("../../../scripts/bench-mount");

/// Arguments of `ahead bench mount`.
#[derive(clap::Args, Debug, Clone)]
pub struct MountBenchArgs {
    /// The network in front of the embedded server: s3 (30 ms to the first
    /// byte, 90 MB/s per connection, 250 MB/s in all), lan, or
    /// LATENCY_MS,PER_CONN_MBPS,TOTAL_MBPS.
    #[arg(long, default_value = "s3")]
    pub profile: String,
    /// The store behind the profile: embedded (an S3 server in this
    /// process), or ceph (a one-node Ceph cluster and its RADOS Gateway,
    /// brought up for the run and down after; needs Debian's ceph-mon,
    /// ceph-osd, ceph-mgr and radosgw).
    #[arg(long, value_enum, default_value = "embedded")]
    pub server: crate::remote_suite::ServerKind,
    /// Repetitions of each job on each mount (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Seconds after which a job is stopped and reported as not done.
    #[arg(long, default_value_t = 60)]
    pub timeout: u32,
    /// MiB of the large object (the log, database and Parquet file are
    /// sized from it).
    #[arg(long, default_value_t = 128)]
    pub size: u32,
    /// The mounts to run, comma-separated: ahead, s3fs, rclone,
    /// mountpoint-s3 (default: every one installed; the others are skipped
    /// with a message).
    #[arg(long, default_value = "")]
    pub only: String,
    /// The jobs, comma-separated, or all: cat, tac, back-64k, stride,
    /// random-4k, interleaved-8, sqlite-desc, many-open, reread; fio-seq,
    /// fio-random, fio-random-4t, fio-random-small, fio-skip, ttfb
    /// (mountpoint-s3's fio jobs); tail, tar-x, parquet, duckdb.
    #[arg(long, default_value = "all")]
    pub jobs: String,
    /// More flags for `ahead mount`, e.g. '--metadata-ttl 60'.
    #[arg(long, default_value = "")]
    pub ahead_args: String,
    /// The Python that runs the harness and the parquet and duckdb jobs
    /// (those two need pyarrow and duckdb; skipped loudly without).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Seconds of the time-based fio job (fio-random-small).
    #[arg(long, default_value_t = 5)]
    pub fio_runtime: u32,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs the harness with this binary as `ahead`; its exit status is the
/// result.
pub fn run(args: MountBenchArgs) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = tempfile::Builder::new()
        .prefix("ahead-bench-mount-")
        .tempdir()?;
    let script = dir.path().join("bench-mount");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&script)?;
    f.write_all(HARNESS.as_bytes())?;
    drop(f);
    let mut cmd = Command::new(&args.python);
    cmd.arg(&script)
        .arg("--ahead")
        .arg(&me)
        .args(["--profile", &args.profile])
        .args([
            "--server",
            match args.server {
                crate::remote_suite::ServerKind::Embedded => "embedded",
                crate::remote_suite::ServerKind::Ceph => "ceph",
            },
        ])
        .args(["--reps", &args.reps.to_string()])
        .args(["--timeout", &args.timeout.to_string()])
        .args(["--size", &args.size.to_string()])
        .args(["--jobs", &args.jobs])
        .args(["--python", &args.python])
        .args(["--fio-runtime", &args.fio_runtime.to_string()]);
    if !args.only.is_empty() {
        cmd.args(["--only", &args.only]);
    }
    if !args.ahead_args.is_empty() {
        cmd.arg(format!("--ahead-args={}", args.ahead_args));
    }
    if let Some(j) = &args.json {
        cmd.arg("--json").arg(j);
    }
    let status = cmd.status().map_err(|e| {
        Error::msg(format!(
            "bench mount runs its harness with {}: {e} (install Python 3, or give --python)",
            args.python
        ))
    })?;
    if !status.success() {
        return Err(Error::msg(format!(
            "bench mount: the harness failed ({status})"
        )));
    }
    Ok(())
}
