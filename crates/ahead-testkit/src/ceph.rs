//! A one-node Ceph cluster with its RADOS Gateway, for tests and
//! benchmarks against a real object store: the repository's
//! `scripts/ceph-s3` (built into the library, so it runs wherever the
//! binary does), brought up in a directory of the caller's and down again
//! when dropped. Needs Debian's `ceph-mon ceph-osd ceph-mgr radosgw`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The script, as the repository has it.
const SCRIPT: &str = include_str!("../../../scripts/ceph-s3");

/// The bucket the cluster starts with.
pub const BUCKET: &str = "ahead";

/// A running cluster.
pub struct Cluster {
    script: PathBuf,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT`, the gateway.
    pub endpoint: String,
    /// The access key of its user.
    pub key: String,
    /// That user's secret.
    pub secret: String,
}

/// Whether the packages the cluster needs are installed.
pub fn installed() -> bool {
    Command::new("sh")
        .args([
            "-c",
            "command -v radosgw && command -v ceph-osd && command -v ceph-mon",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Cluster {
    /// Brings a cluster up under `dir` (made if missing) whose OSD keeps
    /// `bytes` in memory, its gateway on a free port of 127.0.0.1.
    pub fn up(dir: &Path, bytes: u64) -> std::io::Result<Cluster> {
        if !installed() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "Ceph is not installed (apt-get install ceph-mon ceph-osd ceph-mgr radosgw ceph-common)",
            ));
        }
        std::fs::create_dir_all(dir)?;
        let script = dir.join("ceph-s3");
        std::fs::write(&script, SCRIPT)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let cluster_dir = dir.join("cluster");
        let o = Command::new("bash")
            .arg(&script)
            .arg("up")
            .env("CEPH_S3_DIR", &cluster_dir)
            .env("CEPH_S3_PORT", port.to_string())
            .env("CEPH_S3_BYTES", bytes.to_string())
            .env("CEPH_S3_BUCKET", BUCKET)
            .output()?;
        let out = String::from_utf8_lossy(&o.stdout);
        let get = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("export {k}=")))
                .unwrap_or_default()
                .to_string()
        };
        let cluster = Cluster {
            script,
            dir: cluster_dir,
            endpoint: get("AWS_ENDPOINT_URL"),
            key: get("AWS_ACCESS_KEY_ID"),
            secret: get("AWS_SECRET_ACCESS_KEY"),
        };
        if !o.status.success() || cluster.endpoint.is_empty() {
            return Err(std::io::Error::other(format!(
                "scripts/ceph-s3 up failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Ok(cluster)
    }

    /// A client of `bucket` in it.
    pub fn client(
        &self,
        bucket: &str,
    ) -> std::io::Result<std::sync::Arc<dyn object_store::ObjectStore>> {
        crate::s3::client_as(&self.endpoint, bucket, &self.key, &self.secret)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("down")
            .env("CEPH_S3_DIR", &self.dir)
            .output();
    }
}
