//! The read fallback's residency snapshot per descriptor: the library's
//! [`Record`] (which pages were cached when the program first read the
//! file, in an anonymous mapping) and [`ReadSpan`] (what was read since),
//! held so that a hook takes the record without a lock.

use super::*;
use ahead::residency::record::{ReadSpan, Record};
use std::os::fd::BorrowedFd;

/// A descriptor's record and span. Whoever uses the record takes it out of
/// the slot (a swap with null) and puts it back after: two threads reading
/// one descriptor never share it, and a close never unmaps it under a
/// reader (the one left without it skips a pass).
pub(crate) struct SnapSlot {
    ptr: AtomicPtr<u8>,
    pages: AtomicU64,
    /// 0 none yet, 1 taken, 2 taking, 3 impossible.
    pub(super) state: AtomicU8,
    span: ReadSpan,
}

/// The program's descriptor, borrowed for the length of a hook.
fn fd_of(fd: c_int) -> BorrowedFd<'static> {
    // SAFETY: the hook runs inside the program's call on `fd`, which keeps
    // it open for as long as the borrow is used.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

impl SnapSlot {
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
        let record = rustix::fs::fstat(fd_of(fd))
            .ok()
            .and_then(|st| Record::of_file(fd_of(fd), st.st_size as u64));
        match record {
            Some(r) => {
                let (p, _, pages) = r.into_raw();
                self.pages.store(pages, Ordering::Release);
                self.span.clear();
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
        if self.span.note(offset, len) {
            self.pass(fd, gen, false);
        }
    }

    /// Drops the pages of the span read (and beyond it) that were not
    /// cached at the snapshot; `chase` (at close): then those that were
    /// still under I/O.
    pub(super) fn pass(&self, fd: c_int, gen: u32, chase: bool) {
        let p = self.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let pages = self.pages.load(Ordering::Acquire);
        // SAFETY: the parts ensure stored, taken out of the slot: ours.
        let Some(record) = (unsafe { Record::from_raw((p, 0, pages)) }) else {
            return;
        };
        if let Some((first, last)) = self.span.pages() {
            record.drop_new(fd_of(fd), first, last, chase);
        }
        let same = crate::slot(fd).is_some_and(|s| s.gen.load(Ordering::Acquire) == gen);
        let (p, _, _) = record.into_raw();
        if !same
            || self
                .ptr
                .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            // SAFETY: the parts just given back, referenced by nothing
            // else: dropping the record unmaps them.
            drop(unsafe { Record::from_raw((p, 0, pages)) });
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
        let pages = self.pages.load(Ordering::Acquire);
        self.state.store(0, Ordering::Release);
        // SAFETY: the parts ensure stored, taken out of the slot: ours.
        drop(unsafe { Record::from_raw((p, 0, pages)) });
    }
}

/// The fallback for a file too large for a snapshot: the residency of the
/// pages a read may bring in, looked at just before it, and those it did
/// not have dropped just after it.
pub(super) fn around_read(
    fd: c_int,
    offset: u64,
    len: u64,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let before = Record::before_read(fd_of(fd), offset, len);
    let r = call();
    if let (Some(record), true) = (&before, r > 0) {
        let e = crate::errno();
        let (first, _) = record.span();
        let pg = rustix::param::page_size() as u64;
        let last = (offset + r as u64 + ahead::residency::record::LOOK_PAST).div_ceil(pg);
        record.drop_new(fd_of(fd), first, last, false);
        crate::set_errno(e);
    }
    r
}
