//! Thin wrappers over the system calls the engine needs, each with the man
//! page it follows. Kernel features are probed here, at run time, and every
//! probe has an answer that works when the feature is missing.
//!
//! References: open(2), statx(2) (`STATX_DIOALIGN`, Linux 6.1),
//! posix_fadvise(2).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

pub use rustix::fs::Advice;
use rustix::fs::{Mode, OFlags, StatxFlags};

/// Alignment O_DIRECT asks for when the kernel does not say (one 4 KiB page
/// is enough for every block device of the last decade; 512 bytes is the
/// smallest sector).
pub const FALLBACK_DIO_ALIGN: u32 = 4096;

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

/// Tells the kernel how `fd` will be read (posix_fadvise(2)).
pub fn fadvise(fd: impl AsFd, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    Ok(rustix::fs::fadvise(
        fd,
        offset,
        std::num::NonZeroU64::new(len),
        advice,
    )?)
}

/// The kernel's page-cache counters for a byte range of a file, as
/// cachestat(2) (Linux 6.5) reports them, in pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages in the page cache.
    pub cached: u64,
    /// Cached pages that are dirty.
    pub dirty: u64,
    /// Cached pages under writeback.
    pub writeback: u64,
    /// Pages evicted from the cache (shadow entries still held).
    pub evicted: u64,
    /// Evicted pages that would still be in memory had the cache been a
    /// little larger (the kernel's workingset "refault distance" test).
    pub recently_evicted: u64,
}

/// cachestat's system call number: one number on every architecture that
/// uses the generic table (alpha, the exception, gets ENOSYS from the probe).
const SYS_CACHESTAT: libc::c_long = 451;

/// cachestat(2) on `len` bytes at `offset` (`len` 0 means to the end of the
/// file). ENOSYS on kernels before 6.5, EPERM where the caller may not see
/// the file's residency (Linux 6.14+ asks for write access or ownership, as
/// mincore does), EOPNOTSUPP on hugetlbfs.
pub fn cachestat(fd: impl AsFd, offset: u64, len: u64) -> io::Result<CacheStat> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let range = Range { off: offset, len };
    let mut out = Stat::default();
    // SAFETY: cachestat reads `range` and writes `out`, both live and laid out
    // as <linux/mman.h> declares them; the fd is borrowed for the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_fd().as_raw_fd(),
            &range as *const Range,
            &mut out as *mut Stat,
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(CacheStat {
        cached: out.nr_cache,
        dirty: out.nr_dirty,
        writeback: out.nr_writeback,
        evicted: out.nr_evicted,
        recently_evicted: out.nr_recently_evicted,
    })
}

/// mincore(2) over a shared read-only mapping of `len` bytes of `fd` at
/// `offset` (page aligned): one bool per page, true when the page is in the
/// page cache. The caller must have checked that the kernel tells the truth
/// for this file (see [`crate::residency`]): for files the caller can neither
/// write nor owns, mincore reports every page as resident.
pub fn mincore(fd: impl AsFd, offset: u64, len: usize, out: &mut Vec<bool>) -> io::Result<()> {
    let page = rustix::param::page_size();
    debug_assert_eq!(offset % page as u64, 0);
    let mut vec = vec![0u8; len.div_ceil(page)];
    mincore_into(fd, offset / page as u64, &mut vec)?;
    out.extend(vec.iter().map(|b| b & 1 != 0));
    Ok(())
}

/// mincore(2) of `out.len()` pages of `fd` from page `first_page`, into the
/// caller's bytes (bit 0 set when the page is cached), without touching the
/// heap: the file is mapped by system call (rustix), never through a libc
/// `mmap` that a preloaded library may hook. Same caveat as [`mincore`].
pub fn mincore_into(fd: impl AsFd, first_page: u64, out: &mut [u8]) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let page = rustix::param::page_size();
    let len = out.len() * page;
    // SAFETY: a fresh shared read-only mapping that nothing else references;
    // it is only passed to mincore (never read) and unmapped below.
    let addr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            fd,
            first_page * page as u64,
        )?
    };
    // SAFETY: `addr` maps `len` bytes; `out` has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len, out.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping exactly what was mapped above.
    unsafe {
        let _ = rustix::mm::munmap(addr, len);
    }
    if rc != 0 {
        return Err(err);
    }
    Ok(())
}

/// Whether the kernel will tell this process the truth about `fd`'s
/// residency through mincore(2): it does for the file's owner, for a caller
/// with CAP_FOWNER, and for one allowed to write the file (mm/mincore.c
/// `can_do_mincore`). Approximated with the effective uid and
/// faccessat(W_OK, AT_EACCESS).
pub fn may_see_residency(fd: impl AsFd) -> bool {
    let fd = fd.as_fd();
    let euid = rustix::process::geteuid();
    if euid.is_root() {
        return true;
    }
    match rustix::fs::fstat(fd) {
        Ok(st) if st.st_uid == euid.as_raw() => return true,
        Ok(_) => {}
        Err(_) => return false,
    }
    rustix::fs::accessat(
        fd,
        "",
        rustix::fs::Access::WRITE_OK,
        rustix::fs::AtFlags::EMPTY_PATH | rustix::fs::AtFlags::EACCESS,
    )
    .is_ok()
}

/// Starts (`wait` false) or completes (`wait` true: wait for writeback
/// already under way, write, wait again) writeback of a byte range
/// (sync_file_range(2)). Not a durability guarantee: metadata is not written.
pub fn sync_range(fd: impl AsFd, offset: u64, len: u64, wait: bool) -> io::Result<()> {
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    // SAFETY: plain syscall on a borrowed fd.
    let rc = unsafe {
        libc::sync_file_range(
            fd.as_fd().as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            flags,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `RWF_DONTCACHE` (Linux 6.14): buffered I/O whose pages leave the cache
/// once read or written back. Pages that were cached before are left alone.
pub const RWF_DONTCACHE: i32 = libc::RWF_DONTCACHE;

/// preadv2(2) into `buf` with `flags` (RWF_*), pread(2) for none. EOPNOTSUPP where the file
/// system does not support a flag, EINVAL where the kernel does not know it.
pub fn pread_flags(fd: impl AsFd, buf: &mut [u8], offset: u64, flags: i32) -> io::Result<usize> {
    if flags == 0 {
        // pread64: no vector to copy in. In `perf` of cached 16 KiB reads
        // the readv path's own work (the iovec copied from the caller,
        // `vfs_readv`, `do_preadv`) was 4–5% of the time against 1.3% for
        // `vfs_read`.
        return Ok(rustix::io::pread(fd, buf, offset)?);
    }
    Ok(rustix::io::preadv2(
        fd,
        &mut [io::IoSliceMut::new(buf)],
        offset,
        rw_flags(flags),
    )?)
}

/// preadv2(2) of one byte with `RWF_NOWAIT` on descriptor -1: the errno
/// it fails with (`EBADF` from a kernel that took the flag; `EOPNOTSUPP`
/// or `EINVAL` from one that did not, `ENOSYS` or `EPERM` from a sandbox),
/// or `None` if it did not fail. No descriptor is touched.
pub(crate) fn nowait_probe() -> Option<i32> {
    let mut b = [0u8; 1];
    let iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: preadv2 on descriptor -1 fails before touching the iovec,
    // which points to a live local buffer anyway.
    let rc = unsafe { libc::preadv2(-1, &iov, 1, 0, libc::RWF_NOWAIT) };
    let err = io::Error::last_os_error();
    if rc == -1 {
        err.raw_os_error()
    } else {
        None
    }
}

/// pwritev2(2) of `buf` with `flags` (RWF_*); same errors as [`pread_flags`].
pub fn pwrite_flags(fd: impl AsFd, buf: &[u8], offset: u64, flags: i32) -> io::Result<usize> {
    Ok(rustix::io::pwritev2(
        fd,
        &[io::IoSlice::new(buf)],
        offset,
        rw_flags(flags),
    )?)
}

/// rustix's flag type, keeping bits it has no name for (RWF_DONTCACHE).
fn rw_flags(flags: i32) -> rustix::io::ReadWriteFlags {
    rustix::io::ReadWriteFlags::from_bits_retain(flags as u32)
}

// ---------------------------------------------------------------------------
// Files that other users may be able to touch. ahead is run as root in
// directories other users can write; these are the pieces that let it open
// a path once and then work on descriptors (openat(2), O_NOFOLLOW,
// O_CREAT|O_EXCL, renameat(2), proc(5) /proc/self/fd).

/// A second open file description of the file `fd` refers to, with `flags`
/// (for example O_DIRECT, which must not be set on the original: open file
/// descriptions share their status flags). Opened through `/proc/self/fd/N`,
/// which names the open file itself, never a path that can be swapped; the
/// result is checked to be the same inode. ENOENT when /proc is not mounted.
pub fn reopen(fd: impl AsFd, flags: OFlags) -> io::Result<OwnedFd> {
    let fd = fd.as_fd();
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let new = rustix::fs::open(
        path.as_str(),
        flags | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let (a, b) = (rustix::fs::fstat(fd)?, rustix::fs::fstat(&new)?);
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
        return Err(io::Error::other("/proc/self/fd named another file"));
    }
    Ok(new)
}

/// The process's file-mode creation mask, read from /proc/self/status
/// (Linux 4.7) without changing it: umask(2) can only be read by setting it,
/// which races with other threads creating files. 0o022 when not shown.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Eight unpredictable bytes from getrandom(2), as 16 hex digits: names of
/// temporary files that another user cannot guess and plant in advance.
pub fn random_token() -> io::Result<String> {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < b.len() {
        match rustix::rand::getrandom(&mut b[got..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The home directory of user `uid` from the password database
/// (getpwuid_r(3)), not from `$HOME`, which a program run through sudo may
/// have inherited from another user.
pub fn home_of(uid: u32) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid value of this plain C struct
        // (null pointers, zero ids); getpwuid_r overwrites it.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `pw`, `buf` (with its true length) and `result` are live and
        // writable for the call; the strings it stores point into `buf`.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() || pw.pw_dir.is_null() {
            return None;
        }
        // SAFETY: on success pw_dir is a NUL-terminated string inside `buf`,
        // which outlives this borrow.
        let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
        let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        return path.is_absolute().then_some(path);
    }
}

/// Whether the size a file system reports for its regular files cannot be
/// trusted: procfs, sysfs and their kin report 0 or 4096 for files whose
/// contents are made when read (statfs(2) magic numbers, <linux/magic.h>).
pub fn size_is_synthetic(fd: impl AsFd) -> bool {
    const SYNTHETIC: [i64; 8] = [
        0x9fa0,      // PROC_SUPER_MAGIC
        0x6265_6572, // SYSFS_MAGIC
        0x6462_6720, // DEBUGFS_MAGIC
        0x7472_6163, // TRACEFS_MAGIC
        0x6265_6570, // CONFIGFS_MAGIC
        0x7363_6673, // SECURITYFS_MAGIC
        0x0027_e0eb, // CGROUP_SUPER_MAGIC
        0x6367_7270, // CGROUP2_SUPER_MAGIC
    ];
    // f_type is i64 here but another width on other architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstatfs(fd).is_ok_and(|s| SYNTHETIC.contains(&(s.f_type as i64)))
}

/// The machine's physical memory in bytes (sysconf(3) `_SC_PHYS_PAGES` ×
/// `_SC_PAGESIZE`), `None` where it is not known.
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads the value named; it has no pointer arguments.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

/// An anonymous private mapping of bytes, owned: zero-filled at birth,
/// unmapped on drop. Memory that bypasses the heap, for what must not
/// touch `malloc` (the residency records of `ahead run --uncached`'s
/// preloaded library).
pub struct AnonMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access goes
// through `&self`/`&mut self`, so Rust's aliasing rules apply as to a Vec.
unsafe impl Send for AnonMap {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for AnonMap {}

impl AnonMap {
    /// `len` zero bytes (at least one), mapped by system call.
    pub fn new(len: usize) -> io::Result<AnonMap> {
        let len = len.max(1);
        // SAFETY: a fresh anonymous private mapping, owned by the value
        // from here and unmapped in Drop.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }?;
        let ptr = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(AnonMap { ptr, len })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes mapped writable, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping as a pointer and length, for a holder that swaps it
    /// atomically; [`AnonMap::from_raw`] takes it back.
    pub fn into_raw(self) -> (*mut u8, usize) {
        let parts = (self.ptr.as_ptr(), self.len);
        std::mem::forget(self);
        parts
    }

    /// The mapping [`AnonMap::into_raw`] gave (None for a null pointer).
    ///
    /// # Safety
    /// `ptr` and `len` came from `into_raw`, and no other value holds them.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Option<AnonMap> {
        Some(AnonMap {
            ptr: std::ptr::NonNull::new(ptr)?,
            len,
        })
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, referenced by nothing else.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
