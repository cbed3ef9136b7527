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
        let mut b = [0u8; 1];
        let iov = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: preadv2 on descriptor -1 fails before touching the iovec,
        // which points to a live local buffer anyway.
        let rc = unsafe { libc::preadv2(-1, &iov, 1, 0, libc::RWF_NOWAIT) };
        let err = std::io::Error::last_os_error();
        match (rc, err.raw_os_error()) {
            (-1, Some(libc::EBADF)) => {
                Found::yes(format!("kernel {release}, preadv2 probe: EBADF"))
            }
            (_, Some(e)) => Found::no(format!(
                "preadv2(RWF_NOWAIT) probe answered {} (a sandbox or an old kernel)",
                std::io::Error::from_raw_os_error(e)
            )),
            _ => Found::no("preadv2 probe gave no answer"),
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
