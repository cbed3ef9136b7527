//! Thin wrappers over the system calls the engine needs, each with the man
//! page it follows. Kernel features are probed here, at run time, and every
//! probe has an answer that works when the feature is missing.
//!
//! References: open(2), statx(2) (`STATX_DIOALIGN`, Linux 6.1),
//! posix_fadvise(2).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Advice, Mode, OFlags, StatxFlags};

/// Alignment O_DIRECT asks for when the kernel does not say (one 4 KiB page
/// is enough for every block device of the last decade; 512 bytes is the
/// smallest sector).
pub const FALLBACK_DIO_ALIGN: u32 = 4096;

/// Opens `path` read-only, with O_DIRECT when `direct` (open(2)).
pub fn open_read(path: &Path, direct: bool) -> io::Result<OwnedFd> {
    let mut flags = OFlags::RDONLY | OFlags::CLOEXEC;
    if direct {
        flags |= OFlags::DIRECT;
    }
    Ok(rustix::fs::open(path, flags, Mode::empty())?)
}

/// O_DIRECT's alignment for `fd`: (memory alignment, offset alignment), from
/// statx(2) `STATX_DIOALIGN`, or [`FALLBACK_DIO_ALIGN`] for both on kernels
/// and file systems that do not report it. `None` if the file system says it
/// does not support O_DIRECT at all.
pub fn dio_alignment(fd: impl AsFd) -> Option<(u32, u32)> {
    match rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        StatxFlags::DIOALIGN,
    ) {
        Ok(st) if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::DIOALIGN) => {
            if st.stx_dio_mem_align == 0 || st.stx_dio_offset_align == 0 {
                None
            } else {
                Some((st.stx_dio_mem_align, st.stx_dio_offset_align))
            }
        }
        _ => Some((FALLBACK_DIO_ALIGN, FALLBACK_DIO_ALIGN)),
    }
}

/// Drops the kernel's cached pages of the whole file
/// (posix_fadvise(2) `POSIX_FADV_DONTNEED`; dirty pages are kept).
pub fn evict(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::fs::fadvise(fd, 0, None, Advice::DontNeed)?)
}

/// Tells the kernel how `fd` will be read (posix_fadvise(2)).
pub fn fadvise(fd: impl AsFd, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    Ok(rustix::fs::fadvise(
        fd,
        offset,
        std::num::NonZeroU64::new(len),
        advice,
    )?)
}
