//! The read fallback's residency snapshot: which pages of a file were
//! cached when the program first read it, and the passes that drop what
//! its reads brought in since.

use super::*;

/// Files up to this many pages get a snapshot (64 GiB of 4 KiB pages: a
/// 16 MiB vector); larger ones are checked read by read.
pub(super) const SNAP_MAX_PAGES: u64 = 16 << 20;

/// The fallback drops what the program's reads brought in every this many
/// bytes read, and at close.
pub(super) const PASS_EVERY: u64 = 8 << 20;

/// Pages asked of mincore per mapping.
pub(super) const MINCORE_WINDOW: u64 = 1 << 18;

/// The read fallback's record of a file: which pages were cached when the
/// program first read it through this descriptor (one byte per page, as
/// mincore gives it, in an anonymous mapping), and the span read since.
/// This is Debian `nocache`'s method: a check before each read alone would
/// miss the kernel's async readahead, which a read landing on a lookahead
/// marker (left by anyone's earlier readahead) starts even with
/// `POSIX_FADV_RANDOM`, and whose pages are still under I/O, and so cannot
/// be dropped, right after the read.
///
/// Whoever uses the vector takes it out of the slot (a swap with null) and
/// puts it back after: two threads reading one descriptor never share it,
/// and a close never unmaps it under a reader (the one left without it
/// skips a pass).
pub(crate) struct SnapSlot {
    pub(super) ptr: AtomicPtr<u8>,
    pub(super) pages: AtomicU64,
    /// 0 none yet, 1 taken, 2 taking, 3 impossible.
    pub(super) state: AtomicU8,
    /// The lowest offset read, bit-inverted (so that the table starts as
    /// zeros, in .bss, and a fetch_max keeps the minimum).
    pub(super) lo_inv: AtomicU64,
    pub(super) hi: AtomicU64,
    pub(super) since: AtomicU64,
}

impl SnapSlot {
    pub(crate) const fn new() -> SnapSlot {
        SnapSlot {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            pages: AtomicU64::new(0),
            state: AtomicU8::new(0),
            lo_inv: AtomicU64::new(0),
            hi: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }
    }

    /// Makes sure the snapshot is taken; false if there is none.
    pub(super) fn ensure(&self, fd: c_int) -> bool {
        match self.state.load(Ordering::Acquire) {
            1 => return true,
            2 | 3 => return false,
            _ => {}
        }
        if self
            .state
            .compare_exchange(0, 2, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return self.state.load(Ordering::Acquire) == 1;
        }
        match take_snapshot(fd) {
            Some((p, pages)) => {
                self.pages.store(pages, Ordering::Release);
                self.lo_inv.store(0, Ordering::Relaxed);
                self.hi.store(0, Ordering::Relaxed);
                self.since.store(0, Ordering::Relaxed);
                self.ptr.store(p, Ordering::Release);
                self.state.store(1, Ordering::Release);
                true
            }
            None => {
                self.state.store(3, Ordering::Release);
                false
            }
        }
    }

    /// After a read of `len` bytes at `offset`.
    pub(super) fn read(&self, fd: c_int, gen: u32, offset: u64, len: u64) {
        self.lo_inv.fetch_max(!offset, Ordering::Relaxed);
        self.hi.fetch_max(offset + len, Ordering::Relaxed);
        if self.since.fetch_add(len, Ordering::Relaxed) + len >= PASS_EVERY {
            self.since.store(0, Ordering::Relaxed);
            self.pass(fd, gen, false);
        }
    }

    /// Drops the pages of the span read (and [`LOOK_PAST`] beyond it) that
    /// were not cached at the snapshot. `wait` (at close): then go after
    /// the pages that were still under I/O ([`drop_stragglers`]).
    pub(super) fn pass(&self, fd: c_int, gen: u32, wait: bool) {
        let p = self.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            return;
        }
        let n = self.pages.load(Ordering::Acquire);
        let pg = page();
        let lo = !self.lo_inv.load(Ordering::Relaxed);
        let hi = self.hi.load(Ordering::Relaxed);
        if lo < hi {
            let first = lo / pg;
            let last = (hi + LOOK_PAST).div_ceil(pg);
            // SAFETY: a mapping of n bytes, ours while taken out.
            let snap = |i: u64| i < n && unsafe { *p.add(i as usize) } & 1 == 1;
            let mut i = first;
            while i < last {
                if snap(i) {
                    i += 1;
                    continue;
                }
                let run = i;
                while i < last && !snap(i) {
                    i += 1;
                }
                fadvise(fd, run * pg, (i - run) * pg, libc::POSIX_FADV_DONTNEED);
            }
            if wait {
                drop_stragglers(fd, first, last, &snap);
            }
        }
        let same = crate::slot(fd).is_some_and(|s| s.gen.load(Ordering::Acquire) == gen);
        if !same
            || self
                .ptr
                .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            // SAFETY: the mapping is ours and no longer referenced.
            unsafe { libc::munmap(p as *mut c_void, n.max(1) as usize) };
        }
    }

    /// Final pass (the descriptor is closing) and release.
    pub(super) fn finish(&self, fd: c_int, gen: u32) {
        if self.state.load(Ordering::Acquire) == 1 {
            self.pass(fd, gen, true);
        }
        self.forget();
    }

    /// Releases the snapshot (the descriptor now means another file).
    pub(crate) fn forget(&self) {
        let p = self.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let n = self.pages.load(Ordering::Acquire);
        self.state.store(0, Ordering::Release);
        if !p.is_null() {
            // SAFETY: the mapping made by take_snapshot.
            unsafe { libc::munmap(p as *mut c_void, n.max(1) as usize) };
        }
    }
}

/// Maps a window of the file and asks mincore about it into `out`.
pub(super) fn mincore_window(fd: c_int, first_page: u64, out: &mut [u8]) -> bool {
    let bytes = out.len() as u64 * page();
    // SAFETY: a shared read-only view of the file, never touched, only
    // asked about, and unmapped at once.
    unsafe {
        let m = raw_mmap(
            std::ptr::null_mut(),
            bytes as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            (first_page * page()) as i64,
        );
        if m == libc::MAP_FAILED {
            return false;
        }
        let ok = libc::mincore(m, bytes as usize, out.as_mut_ptr()) == 0;
        libc::munmap(m, bytes as usize);
        ok
    }
}

/// Takes a file's residency snapshot: (vector, pages).
pub(super) fn take_snapshot(fd: c_int) -> Option<(*mut u8, u64)> {
    // SAFETY: fstat on the program's descriptor.
    let size = rustix::fs::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        .ok()?
        .st_size as u64;
    let pages = size.div_ceil(page());
    if pages > SNAP_MAX_PAGES {
        return None;
    }
    // SAFETY: an anonymous private mapping, owned by the slot from here.
    let p = unsafe {
        raw_mmap(
            std::ptr::null_mut(),
            pages.max(1) as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let p = p as *mut u8;
    let mut at = 0;
    while at < pages {
        let n = (pages - at).min(MINCORE_WINDOW);
        // SAFETY: within the mapping.
        let out = unsafe { std::slice::from_raw_parts_mut(p.add(at as usize), n as usize) };
        if !mincore_window(fd, at, out) {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(p as *mut c_void, pages.max(1) as usize) };
            return None;
        }
        at += n;
    }
    Some((p, pages))
}

/// Drops, until none is left or about 100 ms have passed, the pages of
/// `first..last` resident now that the snapshot did not have: pages still
/// under I/O when DONTNEED first came (the kernel skips locked pages) go
/// once their read completes. Residency is only looked at, never read, so
/// no lookahead marker is hit and no new readahead starts.
pub(super) fn drop_stragglers(fd: c_int, first: u64, last: u64, snap: &dyn Fn(u64) -> bool) {
    let mut buf = [0u8; 1024];
    let pg = page();
    for _ in 0..50 {
        let mut left = false;
        let mut at = first;
        while at < last {
            let n = (last - at).min(buf.len() as u64);
            if !mincore_window(fd, at, &mut buf[..n as usize]) {
                return;
            }
            let mut i = 0;
            while i < n {
                if buf[i as usize] & 1 == 0 || snap(at + i) {
                    i += 1;
                    continue;
                }
                let run = i;
                while i < n && buf[i as usize] & 1 == 1 && !snap(at + i) {
                    i += 1;
                }
                left = true;
                fadvise(
                    fd,
                    (at + run) * pg,
                    (i - run) * pg,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
            at += n;
        }
        if !left {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
