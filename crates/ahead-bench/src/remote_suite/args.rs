//! `ahead bench remote`'s arguments and its entry point.

use serde_json::Value;

use super::{plot, run, table, RemoteConfig, RemoteRow, PATTERNS};
use crate::shaper::NetProfile;
use crate::{Error, Result};

/// Arguments of `ahead bench remote`.
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// The network: s3 (30 ms first byte, 90 MB/s per connection, 250
    /// MB/s in all), lan (1 ms, 1 GB/s), or LATENCY_MS,PER_CONN_MBPS,TOTAL_MBPS.
    #[arg(long, default_value = "s3")]
    pub profile: String,
    /// A 256 MiB object, 32 objects of 4 MiB, 2 s per run, one repetition.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions (medians are reported); default 3, 1 with --quick.
    #[arg(long)]
    pub reps: Option<usize>,
    /// Longest time per engine and pattern, in seconds.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Patterns, comma-separated (default: all).
    #[arg(long)]
    pub patterns: Option<String>,
    /// Where the embedded server keeps its objects (default: the system's
    /// temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Write a bar chart (SVG) of MB/s per pattern and engine to this file.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// ahead's largest readahead window.
    #[arg(long)]
    pub window: Option<String>,
    /// ahead's largest single request (GET).
    #[arg(long)]
    pub max_io: Option<String>,
    /// The server: `embedded` (an S3 server in this process), or `ceph` (a
    /// one-node Ceph cluster and its RADOS Gateway, brought up for the run
    /// by the repository's scripts/ceph-s3 and down after; needs Debian's
    /// ceph-mon, ceph-osd, ceph-mgr and radosgw).
    #[arg(
        long,
        value_enum,
        default_value = "embedded",
        conflicts_with = "endpoint"
    )]
    pub server: ServerKind,
    /// An S3 endpoint already running (http://HOST:PORT; MinIO, a Ceph
    /// gateway, …) instead of the embedded server; credentials from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    #[arg(long, requires = "bucket")]
    pub endpoint: Option<String>,
    /// The bucket at --endpoint to write the benchmark's objects in.
    #[arg(long, requires = "endpoint")]
    pub bucket: Option<String>,
}

impl RemoteArgs {
    /// The run these arguments ask for.
    pub fn config(&self) -> Result<RemoteConfig> {
        let profile = NetProfile::parse(&self.profile)?;
        let mut cfg = if self.quick {
            RemoteConfig::quick(profile)
        } else {
            RemoteConfig::full(profile)
        };
        if let Some(r) = self.reps {
            cfg.reps = r.max(1);
        }
        if let Some(s) = self.seconds {
            if !(s > 0.0 && s.is_finite()) {
                return Err(Error::msg("--seconds must be positive"));
            }
            cfg.seconds = s;
        }
        let size =
            |s: &str| ahead::units::parse_size(s).map_err(|e| Error::msg(format!("{s}: {e}")));
        if let (Some(e), Some(b)) = (&self.endpoint, &self.bucket) {
            cfg.endpoint = Some((e.clone(), b.clone()));
            cfg.server = format!("{e}, bucket {b}");
        }
        if let Some(w) = &self.window {
            cfg.max_readahead = size(w)?;
        }
        if let Some(m) = &self.max_io {
            cfg.max_io = size(m)?;
        }
        if let Some(p) = &self.patterns {
            cfg.patterns = p.split(',').map(|s| s.trim().to_string()).collect();
            for p in &cfg.patterns {
                if !PATTERNS.contains(&p.as_str()) {
                    return Err(Error::msg(format!(
                        "unknown pattern '{p}' (one of {})",
                        PATTERNS.join(", ")
                    )));
                }
            }
        }
        Ok(cfg)
    }
}

/// Where `ahead bench remote` keeps its objects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// An S3 server in this process (s3s-fs).
    Embedded,
    /// A one-node Ceph cluster brought up for the run.
    Ceph,
}

/// Runs `ahead bench remote`: the table on stdout, JSON where asked.
pub fn main(args: RemoteArgs) -> Result<Vec<RemoteRow>> {
    #[cfg_attr(not(feature = "embedded-server"), allow(unused_mut))]
    let mut cfg = args.config()?;
    let parent = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    let work = crate::workdir::private_dir(&parent, "ahead-bench-remote-")?;
    // The cluster, if one was brought up: it stops when dropped.
    let _ceph: Option<Box<dyn std::any::Any>> = match args.server {
        ServerKind::Embedded => None,
        #[cfg(not(feature = "embedded-server"))]
        ServerKind::Ceph => return Err(Error::msg(super::NO_SERVER)),
        #[cfg(feature = "embedded-server")]
        ServerKind::Ceph => {
            // The OSD keeps the objects in memory: room for all of them
            // and a gigabyte more.
            let bytes = cfg.object_size + cfg.many.0 as u64 * cfg.many.1 + (1 << 30);
            eprintln!("bringing up a Ceph cluster (scripts/ceph-s3) ...");
            let c = ahead_testkit::ceph::Cluster::up(&work.path().join("ceph"), bytes)
                .map_err(|e| Error::from(e).context("--server ceph"))?;
            cfg.endpoint = Some((c.endpoint.clone(), ahead_testkit::ceph::BUCKET.into()));
            cfg.credentials = Some((c.key.clone(), c.secret.clone()));
            cfg.server = "ceph (one node, memstore OSD, radosgw; scripts/ceph-s3)".into();
            Some(Box::new(c))
        }
    };
    let rows = run(&cfg, work.path())?;
    print!("{}", table(&rows, &cfg));
    if let Some(j) = &args.json {
        let v: Vec<Value> = rows.iter().map(RemoteRow::json).collect();
        std::fs::write(j, serde_json::to_string_pretty(&v)? + "\n")
            .map_err(|e| Error::from(e).context(format!("write {}", j.display())))?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(p, plot(&rows, &cfg))
            .map_err(|e| Error::from(e).context(format!("write {}", p.display())))?;
    }
    Ok(rows)
}
