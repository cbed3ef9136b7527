//! Kernel features ahead uses, probed at run time: each probe says what it
//! found and why, and every feature has a fallback (see `ahead doctor`).

use std::os::fd::AsFd;
use std::sync::OnceLock;

/// A feature found or not, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Whether ahead uses it.
    pub available: bool,
    /// What the probe saw.
    pub why: String,
}

impl Found {
    fn yes(why: impl Into<String>) -> Found {
        Found {
            available: true,
            why: why.into(),
        }
    }
    fn no(why: impl Into<String>) -> Found {
        Found {
            available: false,
            why: why.into(),
        }
    }
}

/// The running kernel's release string (`/proc/sys/kernel/osrelease`).
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The (major, minor) of a release string such as `6.18.0-1-amd64`.
pub fn parse_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The first kernel whose `RWF_NOWAIT` buffered reads ahead trusts. 5.9 and
/// 5.10 answered some reads of uncached data with 0 or one page instead of
/// EAGAIN, which a caller takes for the end of the file; ClickHouse turned
/// its fast path off below 5.11 and tokio reverted its own in 1.6.1 for that
/// reason.
pub const NOWAIT_MIN_KERNEL: (u32, u32) = (5, 11);

/// Whether buffered reads may be tried with `preadv2(RWF_NOWAIT)`, probed
/// once per process: the kernel version, then a call on an invalid
/// descriptor, which must fail with EBADF. EPERM (a seccomp filter), ENOSYS
/// (no preadv2) or EOPNOTSUPP/EINVAL (no RWF_NOWAIT) turn it off. Only
/// EBADF proves the flag reached the descriptor check, as ClickHouse's probe
/// does.
pub fn nowait() -> &'static Found {
    static ONCE: OnceLock<Found> = OnceLock::new();
    ONCE.get_or_init(|| {
        let release = kernel_release().unwrap_or_default();
        match parse_version(&release) {
            Some(v) if v < NOWAIT_MIN_KERNEL => {
                return Found::no(format!(
                    "kernel {release} is older than 5.11, whose RWF_NOWAIT reads may return 0 \
                     for uncached data"
                ))
            }
            None => return Found::no(format!("unknown kernel version '{release}'")),
            Some(_) => {}
        }
        match crate::sys::nowait_probe() {
            Some(libc::EBADF) => Found::yes(format!("kernel {release}, preadv2 probe: EBADF")),
            Some(e) => Found::no(format!(
                "preadv2(RWF_NOWAIT) probe answered {} (a sandbox or an old kernel)",
                std::io::Error::from_raw_os_error(e)
            )),
            None => Found::no("preadv2 probe gave no answer"),
        }
    })
}

/// Whether `RWF_DONTCACHE` reads work on `fd`'s file system: a one-byte
/// read at offset 0 with the flag (a read of nothing returns before the
/// kernel looks at the flags). EOPNOTSUPP (the file system lacks it) or
/// EINVAL (a kernel before 6.14) means no. The byte's page, if this read
/// brought it in, leaves the cache with the read, as the flag says.
pub fn dontcache(fd: impl AsFd) -> Found {
    match crate::sys::pread_flags(fd, &mut [0u8; 1], 0, crate::sys::RWF_DONTCACHE) {
        Ok(_) => Found::yes("preadv2(RWF_DONTCACHE) accepted"),
        Err(e) => Found::no(format!("preadv2(RWF_DONTCACHE): {e}")),
    }
}

/// Whether `RWF_NOWAIT` reads work on `fd`'s file system (the process-wide
/// probe first, then a one-byte read with the flag: EAGAIN, "not cached",
/// is a yes; EOPNOTSUPP a no).
pub fn nowait_on(fd: impl AsFd) -> Found {
    let k = nowait();
    if !k.available {
        return k.clone();
    }
    match crate::sys::pread_flags(fd, &mut [0u8; 1], 0, libc::RWF_NOWAIT) {
        Ok(_) => Found::yes("preadv2(RWF_NOWAIT) accepted"),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            Found::yes("preadv2(RWF_NOWAIT) accepted (EAGAIN: not cached)")
        }
        Err(e) => Found::no(format!("preadv2(RWF_NOWAIT): {e}")),
    }
}

/// io_uring: whether a ring can be made here, and which of the operations
/// ahead could use the kernel supports (IORING_REGISTER_PROBE, 5.6).
pub fn io_uring() -> (Found, Vec<(&'static str, bool)>) {
    use io_uring::{opcode, IoUring, Probe};
    let ring = match IoUring::new(2) {
        Ok(r) => r,
        Err(e) => return (Found::no(format!("io_uring_setup: {e}")), Vec::new()),
    };
    let mut probe = Probe::new();
    if let Err(e) = ring.submitter().register_probe(&mut probe) {
        return (
            Found::yes(format!("a ring was made; the operation probe failed: {e}")),
            Vec::new(),
        );
    }
    let ops = vec![
        ("readv", probe.is_supported(opcode::Readv::CODE)),
        ("read", probe.is_supported(opcode::Read::CODE)),
        ("read_fixed", probe.is_supported(opcode::ReadFixed::CODE)),
        ("readv_fixed", probe.is_supported(opcode::ReadvFixed::CODE)),
        ("fadvise", probe.is_supported(opcode::Fadvise::CODE)),
        ("openat", probe.is_supported(opcode::OpenAt::CODE)),
        ("statx", probe.is_supported(opcode::Statx::CODE)),
    ];
    let readv = ops[0].1;
    let found = if readv {
        Found::yes("a ring was made; readv is supported")
    } else {
        Found::no("a ring was made but readv is not supported")
    };
    (found, ops)
}

/// O_DIRECT on `fd`'s file system: a second open with the flag (EINVAL
/// means no) and its alignment (statx DIOALIGN, 6.1; 4 KiB assumed where
/// the kernel does not say).
pub fn direct_io(fd: impl AsFd) -> (Found, Option<(u32, u32)>) {
    let fd = fd.as_fd();
    match crate::sys::reopen(fd, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECT) {
        Ok(d) => (
            Found::yes("open(O_DIRECT) accepted"),
            crate::sys::dio_alignment(&d),
        ),
        Err(e) => (Found::no(format!("open(O_DIRECT): {e}")), None),
    }
}

/// cachestat(2) on `fd` (6.5): ENOSYS on older kernels, EPERM for files
/// the caller may not see the residency of.
pub fn cachestat(fd: impl AsFd) -> Found {
    match crate::sys::cachestat(fd, 0, 0) {
        Ok(_) => Found::yes("cachestat answered"),
        Err(e) => Found::no(format!("cachestat: {e}")),
    }
}

/// The name of the file system `fd` is on, from statfs's magic number.
pub fn filesystem(fd: impl AsFd) -> String {
    let Ok(s) = rustix::fs::fstatfs(fd) else {
        return "unknown".into();
    };
    // f_type is i64 here but another width on other architectures.
    #[allow(clippy::unnecessary_cast)]
    let magic = s.f_type as i64 & 0xffff_ffff;
    let name = match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x4d44 => "vfat",
        0x5346_544e => "ntfs",
        0xFF53_4D42 => "cifs",
        0x0102_1997 => "9p",
        0x6265_6572 => "sysfs",
        0x9fa0 => "proc",
        _ => return format!("unknown (magic {magic:#x})"),
    };
    name.into()
}

/// The block device under a file system, as sysfs describes its queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    /// The device's name (the whole disk for a partition), e.g. `vda`.
    pub name: String,
    /// The kernel's readahead for the file system's device, in KiB
    /// (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`).
    pub read_ahead_kb: Option<u64>,
    /// Largest request the block layer sends, in KiB.
    pub max_sectors_kb: Option<u64>,
    /// The I/O scheduler in use (the bracketed one).
    pub scheduler: Option<String>,
    /// Whether it says it is rotational (a disk with heads).
    pub rotational: Option<bool>,
}

/// Transparent huge pages as the kernel offers them, and whether it hands
/// free memory back to a host (a virtual machine's free page reporting),
/// which makes a huge page's first touch dear (docs/bench.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HugePageSetting {
    /// The bracketed word of `/sys/kernel/mm/transparent_hugepage/enabled`
    /// (`always`, `madvise` or `never`); `None` without THP.
    pub enabled: Option<String>,
    /// The order of the free blocks reported to a host
    /// (`/sys/module/page_reporting/parameters/page_reporting_order`), if
    /// the kernel reports free pages and has reported some.
    pub reporting_order: Option<u32>,
}

/// What [`HugePageSetting`] says of this machine.
pub fn huge_pages() -> HugePageSetting {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let enabled = read("/sys/kernel/mm/transparent_hugepage/enabled").and_then(|s| {
        s.split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_owned())
    });
    let reported = read("/sys/module/page_reporting/parameters/reported_kib")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let reporting_order = (reported > 0)
        .then(|| read("/sys/module/page_reporting/parameters/page_reporting_order"))
        .flatten()
        .and_then(|s| s.trim().parse().ok());
    HugePageSetting {
        enabled,
        reporting_order,
    }
}

/// The block device a file of device number `dev` lives on; `None` when
/// it has none (tmpfs, NFS, FUSE) or sysfs does not say.
pub fn device_of(dev: u64) -> Option<Device> {
    let (ma, mi) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let mut dir = std::fs::canonicalize(format!("/sys/dev/block/{ma}:{mi}")).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let read = |p: &str| {
        std::fs::read_to_string(dir.join(p))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let num = |s: Option<String>| s.and_then(|s| s.parse::<u64>().ok());
    let scheduler = read("queue/scheduler").map(|s| {
        s.split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_owned())
            .unwrap_or(s)
    });
    Some(Device {
        name: dir.file_name()?.to_string_lossy().into_owned(),
        read_ahead_kb: num(std::fs::read_to_string(format!(
            "/sys/class/bdi/{ma}:{mi}/read_ahead_kb"
        ))
        .ok()
        .map(|s| s.trim().to_owned()))
        .or_else(|| num(read("queue/read_ahead_kb"))),
        max_sectors_kb: num(read("queue/max_sectors_kb")),
        scheduler,
        rotational: read("queue/rotational").map(|s| s == "1"),
    })
}

/// I/O limits the caller's cgroup (or an ancestor) sets: lines of cgroup
/// v2 `io.max` and cgroup v1 `blkio.throttle.*_device`, each prefixed with
/// the file it came from. Empty when there are none.
pub fn cgroup_io_limits() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else {
        return out;
    };
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        let (base, files): (&str, &[&str]) = if controllers.is_empty() {
            ("/sys/fs/cgroup", &["io.max"])
        } else if controllers.split(',').any(|c| c == "blkio") {
            (
                "/sys/fs/cgroup/blkio",
                &[
                    "blkio.throttle.read_bps_device",
                    "blkio.throttle.read_iops_device",
                ],
            )
        } else {
            continue;
        };
        // The cgroup and each ancestor up to the root.
        let mut p = std::path::PathBuf::from(base).join(path.trim_start_matches('/'));
        loop {
            for f in files {
                let file = p.join(f);
                if let Ok(s) = std::fs::read_to_string(&file) {
                    for l in s.lines().filter(|l| !l.trim().is_empty()) {
                        // io.max lines with every limit at "max" limit nothing.
                        let limited = l.split_whitespace().skip(1).any(|kv| !kv.ends_with("=max"));
                        if limited {
                            out.push(format!("{}: {l}", file.display()));
                        }
                    }
                }
            }
            if p == std::path::Path::new(base) || !p.pop() {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_old_kernels_are_below_the_minimum() {
        assert_eq!(parse_version("6.18.0-1-amd64"), Some((6, 18)));
        assert_eq!(parse_version("5.10.0"), Some((5, 10)));
        assert!(parse_version("5.10.0").unwrap() < NOWAIT_MIN_KERNEL);
        assert!(parse_version("5.11.2").unwrap() >= NOWAIT_MIN_KERNEL);
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn probes_answer_on_this_machine() {
        let n = nowait();
        eprintln!("RWF_NOWAIT: {n:?}");
        let dir = tempfile::tempdir_in(crate::testdata::scratch_root()).unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        eprintln!(
            "here: dontcache {:?}, nowait {:?}",
            dontcache(&f),
            nowait_on(&f)
        );
        if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
            let p = shm.path().join("f");
            std::fs::write(&p, b"x").unwrap();
            let f = std::fs::File::open(&p).unwrap();
            eprintln!(
                "tmpfs: dontcache {:?}, nowait {:?}",
                dontcache(&f),
                nowait_on(&f)
            );
        }
    }
}
