//! A steady device for benchmarks: the file is first read once with
//! O_DIRECT (so that the host, whose page cache backs a virtual disk, holds
//! it), then the benchmark process moves into a cgroup whose reads from the
//! file's disk are capped — blkio throttling on cgroup v1, `io.max` on v2.
//! The cap, not the host's mood, sets the pace (docs/measuring.md in the
//! repository).
//! Root only.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A device profile: a read cap in bytes per second and I/O per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// Name in reports (`cloud`, `small-cloud`, `fast`, or `BPS,IOPS`).
    pub name: &'static str,
    /// Bytes per second.
    pub bps: u64,
    /// Requests per second.
    pub iops: u64,
}

impl Profile {
    /// A provisioned cloud SSD volume: 200 MiB/s, 5000 IOPS.
    pub const CLOUD: Profile = Profile {
        name: "cloud",
        bps: 200 << 20,
        iops: 5000,
    };
    /// The smallest cloud volumes: 125 MiB/s, 3000 IOPS.
    pub const SMALL_CLOUD: Profile = Profile {
        name: "small-cloud",
        bps: 125 << 20,
        iops: 3000,
    };
    /// A fast volume: 400 MiB/s, 20000 IOPS.
    pub const FAST: Profile = Profile {
        name: "fast",
        bps: 400 << 20,
        iops: 20000,
    };

    /// Parses `cloud`, `small-cloud`, `fast`, `BPS,IOPS` (sizes like `200m`)
    /// or `none` (`Ok(None)`).
    pub fn parse(s: &str) -> crate::Result<Option<Profile>> {
        match s {
            "none" => Ok(None),
            "cloud" => Ok(Some(Profile::CLOUD)),
            "small-cloud" => Ok(Some(Profile::SMALL_CLOUD)),
            "fast" => Ok(Some(Profile::FAST)),
            _ => {
                let bad = || {
                    format!(
                        "unknown device profile '{s}' (cloud, small-cloud, fast, BPS,IOPS, none)"
                    )
                };
                let (b, i) = s.split_once(',').ok_or_else(bad)?;
                let bps = ahead::units::parse_size(b).map_err(|_| bad())?;
                let iops = i.trim().parse::<u64>().map_err(|_| bad())?;
                if bps == 0 || iops == 0 {
                    return Err(bad().into());
                }
                Ok(Some(Profile {
                    name: "custom",
                    bps,
                    iops,
                }))
            }
        }
    }

    /// The best throughput (bytes per second) a reader of `bs`-byte
    /// requests can get from this device for a pattern: a stream is
    /// bandwidth-bound; a read-`bs`-skip-`gap` stride is the better of
    /// reading through the gaps and one I/O per run; single random
    /// requests are bounded by IOPS × bs.
    pub fn oracle(&self, pattern: &crate::workload::Pattern, bs: u64) -> f64 {
        use crate::workload::Pattern;
        let bps = self.bps as f64;
        let iops = self.iops as f64;
        match *pattern {
            Pattern::Seq | Pattern::Reverse | Pattern::Interleaved { .. } => bps,
            Pattern::Stride { gap } => {
                let through = bps * bs as f64 / (bs + gap) as f64;
                through.max((iops * bs as f64).min(bps))
            }
            Pattern::Random | Pattern::RandomRepeat => (iops * bs as f64).min(bps),
        }
    }
}

/// The cgroup the process was moved into; moving back and removing it
/// happen on drop.
pub struct Throttle {
    dir: PathBuf,
    home: PathBuf,
    /// What the cap is, for reports.
    pub profile: Profile,
}

impl Drop for Throttle {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.home.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The whole disk under `path` as `MAJ:MIN` (a partition's disk).
fn disk_of(path: &Path) -> crate::Result<String> {
    let dev = std::fs::metadata(path)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", path.display())))?
        .dev();
    let (ma, mi) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let mut dir = std::fs::canonicalize(format!("/sys/dev/block/{ma}:{mi}"))
        .map_err(|_| format!("{}: not on a block device (tmpfs, NFS?)", path.display()))?;
    if dir.join("partition").exists() {
        dir.pop();
    }
    std::fs::read_to_string(dir.join("dev"))
        .map(|s| s.trim().to_owned())
        .map_err(|e| crate::Error::msg(format!("{}: {e}", dir.display())))
}

/// Reads `path` once with O_DIRECT (the host then holds it).
pub fn host_warm(path: &Path) -> crate::Result<()> {
    let fd = ahead::testdata::open_read(path, true)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", path.display())))?;
    let mut buf = ahead::io::AlignedBuf::new(4 << 20, 4096);
    let mut at = 0u64;
    loop {
        let n = rustix::io::pread(&fd, buf.as_mut_slice(), at)
            .map_err(|e| crate::Error::msg(format!("{}: {e}", path.display())))?;
        if n == 0 {
            return Ok(());
        }
        at += n as u64;
    }
}

/// The process's own cgroup directory for `controller` (v1) or the unified
/// hierarchy (v2, `controller` empty).
fn own_cgroup(v1: bool) -> crate::Result<PathBuf> {
    let s = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    for line in s.lines() {
        let mut p = line.splitn(3, ':');
        let (_, ctl, path) = match (p.next(), p.next(), p.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        let rel = path.trim_start_matches('/');
        if v1 && ctl.split(',').any(|c| c == "blkio") {
            return Ok(Path::new("/sys/fs/cgroup/blkio").join(rel));
        }
        if !v1 && ctl.is_empty() {
            return Ok(Path::new("/sys/fs/cgroup").join(rel));
        }
    }
    Err("no cgroup for block I/O found in /proc/self/cgroup".into())
}

/// Host-warms `files`, then moves this process into a cgroup that caps its
/// reads from their disk at `profile`. A clear error where that cannot be
/// done (not root, no cgroup I/O controller, a file not on a block device).
pub fn throttle(profile: Profile, files: &[&Path]) -> crate::Result<Throttle> {
    if !rustix::process::geteuid().is_root() {
        return Err("--device needs root (it caps reads with a cgroup); use --device none".into());
    }
    let first = files.first().ok_or("no file to throttle")?;
    let dev = disk_of(first)?;
    for f in files {
        host_warm(f)?;
    }
    let v1 = Path::new("/sys/fs/cgroup/blkio").is_dir();
    let home = own_cgroup(v1)?;
    let base = if v1 {
        PathBuf::from("/sys/fs/cgroup/blkio")
    } else {
        PathBuf::from("/sys/fs/cgroup")
    };
    let dir = base.join(format!(
        "ahead-bench-{}-{}-{}",
        profile.bps,
        profile.iops,
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", dir.display())))?;
    let t = Throttle {
        dir: dir.clone(),
        home,
        profile,
    };
    let write = |file: &str, v: String| {
        std::fs::write(dir.join(file), &v)
            .map_err(|e| crate::Error::msg(format!("{}: {e}", dir.join(file).display())))
    };
    if v1 {
        write(
            "blkio.throttle.read_bps_device",
            format!("{dev} {}", profile.bps),
        )?;
        write(
            "blkio.throttle.read_iops_device",
            format!("{dev} {}", profile.iops),
        )?;
    } else {
        write(
            "io.max",
            format!("{dev} rbps={} riops={}", profile.bps, profile.iops),
        )?;
    }
    write("cgroup.procs", std::process::id().to_string())?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Pattern;

    #[test]
    fn profiles_parse_and_oracles_follow_measuring_md() {
        assert_eq!(Profile::parse("cloud").unwrap(), Some(Profile::CLOUD));
        assert_eq!(Profile::parse("none").unwrap(), None);
        let p = Profile::parse("100m,2000").unwrap().unwrap();
        assert_eq!((p.bps, p.iops), (100 << 20, 2000));
        assert!(Profile::parse("fastest").is_err());
        assert!(Profile::parse("0,5").is_err());
        let c = Profile::CLOUD;
        let mb = |v: f64| (v / 1e6 * 10.0).round() / 10.0;
        assert_eq!(mb(c.oracle(&Pattern::Seq, 4096)), 209.7);
        // 4 KiB every 16 KiB: through the gaps 52.4 MB/s beats 5000 × 4 KiB.
        assert_eq!(mb(c.oracle(&Pattern::Stride { gap: 12 << 10 }, 4096)), 52.4);
        assert_eq!(mb(c.oracle(&Pattern::Random, 4096)), 20.5);
        assert_eq!(mb(c.oracle(&Pattern::Random, 64 << 10)), 209.7);
    }
}
