//! The Uncached mode's fallback where `RWF_DONTCACHE` is missing: the
//! residency record of [`crate::residency::record`] (Debian `nocache`'s
//! method), one per file taken at open, or one per read for files too
//! large for it, and the pages it did not have dropped as reads go and at
//! close.

use super::*;
use crate::residency::record::{self, Record};

/// The fallback's whole-file record and the span read since.
pub(in crate::file) type Snapshot = record::Snapshot<Arc<OwnedFd>>;

impl KernelFile {
    /// Uncached fallback without a whole-file record: which pages a read
    /// of `len` bytes at `offset` may bring in were cached just before it
    /// (None when nothing will be dropped).
    pub(super) fn residency_before(&self, offset: u64, len: usize) -> Option<Record> {
        if self.mode != Mode::Uncached
            || self.dontcache()
            || !self.residency_visible
            || self.snapshot.is_some()
        {
            return None;
        }
        Record::before_read(self.fd.as_fd(), offset, len as u64)
    }

    /// Uncached fallback: drops the pages that were not cached just before
    /// the read. The look comes right before the read and the drop right
    /// after it, to keep short the window in which another process may
    /// start using a page this read brought in: mincore cannot say who
    /// brought a page in, so such a page would be dropped too (RWF_DONTCACHE
    /// has no such window: the kernel knows).
    pub(super) fn drop_new(fd: &OwnedFd, before: Option<Record>) {
        if let Some(record) = before {
            let (first, last) = record.span();
            record.drop_new(fd, first, last, false);
        }
    }
}
