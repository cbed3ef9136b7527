//! `ahead bench serve`: the remote benchmark's server and network for a
//! program in another language (the Python package's tests,
//! `python -m ahead.bench`, `ahead bench mount`'s harness): the embedded
//! S3 server, or a one-node Ceph cluster brought up for the purpose
//! (`--server ceph`), behind the shaper with a profile of `ahead bench
//! remote`, until its standard input closes.
//!
//! It prints one JSON line on standard output — where the shaped and the
//! unshaped endpoints are, the bucket, the credentials and the profile —
//! then answers commands, one line each, with one JSON line:
//!
//! * `put KEY PATH`: uploads the local file `PATH` as `KEY` (by ahead's
//!   own upload, on the unshaped endpoint); `{"bytes": …}`.
//! * `bytes`: `{"bytes_down": N, "lists": L, "heads": H}`, the bytes the
//!   server has sent through the shaper so far (what the clients fetched),
//!   and the list pages and HEADs it has answered (the embedded server
//!   only; 0 for Ceph).
//! * `fail SHARE`: answers that share of GETs with 503 from now on (0
//!   stops); `{"fail": SHARE}` (the embedded server only).
//!
//! A command that fails answers `{"error": "…"}` and the server goes on.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::args::ServerKind;
use crate::shaper::{NetProfile, Shaper};
use crate::{Error, Result};

/// Arguments of `ahead bench serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where the server keeps its objects (made if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// The bucket to make (a Ceph cluster has its own, named in the
    /// first line).
    #[arg(long, default_value = "bench")]
    pub bucket: String,
    /// The store: embedded (an S3 server in this process, s3s-fs, its
    /// objects under --dir), or ceph (a one-node Ceph cluster and its RADOS
    /// Gateway brought up under --dir for as long as this runs, and down
    /// after; needs Debian's ceph-mon, ceph-osd, ceph-mgr and radosgw).
    #[arg(long, value_enum, default_value = "embedded")]
    pub server: ServerKind,
    /// The network in front of it: s3, lan, LATENCY_MS,PER_CONN_MBPS,TOTAL_MBPS,
    /// or none (the server's own endpoint only).
    #[arg(long, default_value = "s3")]
    pub profile: String,
}

/// Runs the server until standard input closes.
pub fn main(args: ServeArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    let profile = match args.profile.as_str() {
        "none" => None,
        p => Some(NetProfile::parse(p)?),
    };
    let server = Store::start(&args)?;
    let shaper = profile.map(|p| Shaper::start(server.addr, p)).transpose()?;
    let endpoint = shaper
        .as_ref()
        .map_or_else(|| server.endpoint.clone(), Shaper::endpoint);
    let hello = json!({
        "endpoint": endpoint,
        "direct": server.endpoint,
        "bucket": server.bucket,
        "server": server.name(),
        "access_key": server.key,
        "secret_key": server.secret,
        "region": "us-east-1",
        "profile": profile.map(|p| json!({
            "name": p.name,
            "first_byte_ms": p.first_byte.as_secs_f64() * 1e3,
            "per_conn_bps": p.per_conn,
            "total_bps": p.total,
            "max_rps": p.max_rps,
        })),
    });
    let stdout = std::io::stdout();
    let say = |v: Value| -> Result<()> {
        let mut out = stdout.lock();
        writeln!(out, "{v}")?;
        out.flush()?;
        Ok(())
    };
    say(hello)?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let answer = command(&server, shaper.as_ref(), line.trim())
            .unwrap_or_else(|e| json!({ "error": e.to_string() }));
        say(answer)?;
    }
    Ok(())
}

/// The store behind the shaper, and how to reach it unshaped.
struct Store {
    embedded: Option<ahead_testkit::s3::Server>,
    /// Brought down when dropped.
    ceph: Option<ahead_testkit::ceph::Cluster>,
    addr: std::net::SocketAddr,
    endpoint: String,
    bucket: String,
    key: String,
    secret: String,
}

impl Store {
    fn start(args: &ServeArgs) -> Result<Store> {
        match args.server {
            ServerKind::Embedded => {
                let s = ahead_testkit::s3::Server::start(&args.dir, &[args.bucket.as_str()])?;
                Ok(Store {
                    addr: s.addr(),
                    endpoint: s.endpoint(),
                    bucket: args.bucket.clone(),
                    key: ahead_testkit::s3::ACCESS_KEY.into(),
                    secret: ahead_testkit::s3::SECRET_KEY.into(),
                    embedded: Some(s),
                    ceph: None,
                })
            }
            ServerKind::Ceph => {
                // The OSD keeps the objects in memory: 4 GiB, scripts/ceph-s3's
                // default, ten times what `bench mount` puts.
                let c = ahead_testkit::ceph::Cluster::up(&args.dir.join("ceph"), 4 << 30)
                    .map_err(|e| Error::from(e).context("--server ceph"))?;
                let addr = super::endpoint_addr(&c.endpoint)?;
                Ok(Store {
                    addr,
                    endpoint: c.endpoint.clone(),
                    bucket: ahead_testkit::ceph::BUCKET.into(),
                    key: c.key.clone(),
                    secret: c.secret.clone(),
                    embedded: None,
                    ceph: Some(c),
                })
            }
        }
    }

    fn name(&self) -> &'static str {
        if self.ceph.is_some() {
            "ceph"
        } else {
            "embedded"
        }
    }
}

fn command(server: &Store, shaper: Option<&Shaper>, line: &str) -> Result<Value> {
    let mut words = line.splitn(3, ' ');
    let bucket = server.bucket.as_str();
    match (words.next(), words.next(), words.next()) {
        (Some("put"), Some(key), Some(path)) => {
            let store = ahead_testkit::client::client_as(
                &server.endpoint,
                bucket,
                &server.key,
                &server.secret,
            )?;
            let opts = ahead::copy::CopyOptions::default();
            let name = format!("s3://{bucket}/{key}");
            let r = ahead::copy::upload_object(
                std::path::Path::new(path),
                store,
                object_store::path::Path::from(key),
                &name,
                &opts,
                &|_| {},
            )?;
            Ok(json!({ "bytes": r.totals.bytes }))
        }
        (Some("bytes"), None, None) => {
            let faults = server.embedded.as_ref().map(|e| e.faults());
            let count = |f: fn(&ahead_testkit::s3::Faults) -> &std::sync::atomic::AtomicU64| {
                faults.map_or(0, |x| f(x).load(Ordering::Relaxed))
            };
            Ok(json!({
                "bytes_down": shaper.map_or(0, |s| s.bytes_down().load(Ordering::Relaxed)),
                "lists": count(|x| &x.lists),
                "heads": count(|x| &x.heads),
            }))
        }
        (Some("fail"), Some(share), None) => {
            let share: f64 = share
                .parse()
                .ok()
                .filter(|s| (0.0..=1.0).contains(s))
                .ok_or_else(|| Error::msg(format!("fail {share}: a share from 0 to 1")))?;
            let embedded = server.embedded.as_ref().ok_or_else(|| {
                Error::msg("fail: faults are injected by the embedded server only")
            })?;
            embedded.faults().fail_share(share);
            Ok(json!({ "fail": share }))
        }
        _ => Err(Error::msg(format!(
            "'{line}': put KEY PATH, bytes, or fail SHARE"
        ))),
    }
}
