//! The Uncached mode's fallback where `RWF_DONTCACHE` is missing: a
//! residency record of the file taken at open, and the pages it did not
//! have dropped as reads go and at close (Debian `nocache`'s method).

use super::*;

/// Files up to this many pages get a residency snapshot (64 GiB of 4 KiB
/// pages: 16 MiB of map); larger ones are checked read by read.
pub(super) const SNAPSHOT_MAX_PAGES: u64 = 16 << 20;

/// The fallback drops what reads brought in every this many bytes read,
/// and when the file is closed.
pub(super) const PASS_EVERY: u64 = 8 << 20;

/// How far past what was read a pass looks: a read landing on a lookahead
/// marker another reader's readahead left starts the kernel's async
/// readahead even under `POSIX_FADV_RANDOM`, up to twice the device's
/// `read_ahead_kb` ahead (8 MiB on the development VM).
pub(super) const LOOK_PAST: u64 = 16 << 20;

/// The Uncached fallback's record of a file (Debian `nocache`'s method):
/// which pages were cached when it was opened, and the span read since.
/// Every [`PASS_EVERY`] bytes read and when the file is closed, the pages
/// of that span (and [`LOOK_PAST`] beyond) that the snapshot did not have
/// are dropped; at close, pages still under I/O (DONTNEED skips them) are
/// chased for up to 100 ms. A check just before each read missed the
/// async readahead of someone else's markers: a file half cached by a
/// plain reader kept 94% of its other half after an Uncached read.
pub(in crate::file) struct Snapshot {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) page: u64,
    pub(super) before: Vec<bool>,
    /// (lowest offset read, end of the highest read, bytes since the last
    /// pass).
    pub(super) span: Mutex<(u64, u64, u64)>,
}

impl Snapshot {
    pub(super) fn take(fd: &Arc<OwnedFd>, size: u64, page: u64) -> Option<Snapshot> {
        if size.div_ceil(page) > SNAPSHOT_MAX_PAGES {
            return None;
        }
        let before = crate::residency::page_map(fd.as_fd(), 0, size).ok()??;
        Some(Snapshot {
            fd: fd.clone(),
            page,
            before,
            span: Mutex::new((u64::MAX, 0, 0)),
        })
    }

    pub(super) fn read(&self, offset: u64, n: u64) {
        let pass = {
            let mut g = self.span.lock().unwrap_or_else(|p| p.into_inner());
            g.0 = g.0.min(offset);
            g.1 = g.1.max(offset + n);
            g.2 += n;
            if g.2 >= PASS_EVERY {
                g.2 = 0;
                true
            } else {
                false
            }
        };
        if pass {
            self.pass(false);
        }
    }

    pub(super) fn was_cached(&self, index: u64) -> bool {
        self.before.get(index as usize).copied().unwrap_or(false)
    }

    /// Drops the pages of the span read (and beyond) the snapshot did not
    /// have; `chase`: then those that come in from reads still in flight.
    pub(super) fn pass(&self, chase: bool) {
        let (lo, hi, _) = *self.span.lock().unwrap_or_else(|p| p.into_inner());
        if lo >= hi {
            return;
        }
        let first = lo / self.page;
        let last = (hi + LOOK_PAST).div_ceil(self.page);
        let drop_runs = |resident: Option<(u64, &[bool])>| -> bool {
            let mut any = false;
            let mut i = first;
            while i < last {
                let now = resident.is_none_or(|(at, r)| r.get((i - at) as usize) == Some(&true));
                if self.was_cached(i) || !now {
                    i += 1;
                    continue;
                }
                let from = i;
                while i < last
                    && !self.was_cached(i)
                    && resident.is_none_or(|(at, r)| r.get((i - at) as usize) == Some(&true))
                {
                    i += 1;
                }
                any = true;
                let _ = sys::fadvise(
                    self.fd.as_fd(),
                    from * self.page,
                    (i - from) * self.page,
                    sys::Advice::DontNeed,
                );
            }
            any
        };
        drop_runs(None);
        if !chase {
            return;
        }
        for _ in 0..50 {
            let mut v = Vec::new();
            if sys::mincore(
                self.fd.as_fd(),
                first * self.page,
                ((last - first) * self.page) as usize,
                &mut v,
            )
            .is_err()
            {
                return;
            }
            if !drop_runs(Some((first, &v))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.pass(true);
    }
}

impl KernelFile {
    /// The page-aligned span of `len` bytes at `offset`.
    pub(super) fn span(&self, offset: u64, len: usize) -> (u64, usize) {
        let start = offset / self.page * self.page;
        let end = (offset + len as u64).div_ceil(self.page) * self.page;
        (start, (end - start) as usize)
    }

    /// Uncached fallback: which pages of the span are cached now (None when
    /// nothing will be dropped).
    pub(super) fn residency_before(&self, offset: u64, len: usize) -> Option<(u64, Vec<bool>)> {
        if self.mode != Mode::Uncached
            || self.dontcache()
            || !self.residency_visible
            || self.snapshot.is_some()
        {
            return None;
        }
        let (start, span) = self.span(offset, len);
        let mut v = Vec::new();
        sys::mincore(self.fd.as_fd(), start, span, &mut v).ok()?;
        Some((start, v))
    }

    /// Uncached fallback: drops the pages that were not cached just before
    /// the read. The look comes right before the read and the drop right
    /// after it, to keep short the window in which another process may
    /// start using a page this read brought in: mincore cannot say who
    /// brought a page in, so such a page would be dropped too (RWF_DONTCACHE
    /// has no such window: the kernel knows).
    pub(super) fn drop_new(fd: &OwnedFd, page: u64, before: Option<(u64, Vec<bool>)>) {
        let Some((start, resident)) = before else {
            return;
        };
        let mut i = 0;
        while i < resident.len() {
            if resident[i] {
                i += 1;
                continue;
            }
            let from = i;
            while i < resident.len() && !resident[i] {
                i += 1;
            }
            let _ = sys::fadvise(
                fd.as_fd(),
                start + from as u64 * page,
                (i - from) as u64 * page,
                sys::Advice::DontNeed,
            );
        }
    }
}
