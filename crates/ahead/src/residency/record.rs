//! A residency record: which pages of a file were cached at one moment, so
//! that the pages a reader brings in afterwards can be dropped and the
//! kernel's cache left as it was found (Debian `nocache`'s method). It is
//! how Uncached reads work where `RWF_DONTCACHE` is missing, both in the
//! library ([`crate::Mode::Uncached`]) and in `ahead run --uncached`'s
//! preloaded library, which is why nothing here touches the heap: the
//! record lives in an anonymous mapping (one byte per page, as mincore
//! gives it), the span read is three atomics, and files are mapped by
//! system call.
//!
//! A check just before each read alone misses the kernel's async
//! readahead: a read landing on a lookahead marker left by anyone's
//! earlier readahead starts it even under `POSIX_FADV_RANDOM`, and its
//! pages are still under I/O, so not yet droppable, right after the read.
//! A file half cached by a plain reader kept 94% of its other half after
//! such an Uncached read. Hence a record of the whole file taken before
//! the first read, passes over the span read (and [`LOOK_PAST`] beyond),
//! and at the end a chase of the pages that were still in flight.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

/// Files up to this many pages get a whole-file record (64 GiB of 4 KiB
/// pages: 16 MiB of map); larger ones are looked at read by read.
pub const SNAPSHOT_MAX_PAGES: u64 = 16 << 20;

/// The pages a reader brought in are dropped every this many bytes read,
/// and at the end.
pub const PASS_EVERY: u64 = 8 << 20;

/// How far past what was read a pass looks: the kernel's async readahead,
/// started by a lookahead marker, reads up to twice the device's
/// `read_ahead_kb` ahead (8 MiB on the development VM's virtio disk).
pub const LOOK_PAST: u64 = 16 << 20;

/// How long, at most, the end of a read chases pages still under I/O: 50
/// looks 2 ms apart.
const CHASE_LOOKS: u32 = 50;
const CHASE_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);
/// Pages looked at per mincore call while chasing (a 1 KiB buffer on the
/// stack).
const CHASE_WINDOW: usize = 1024;
/// Pages asked of mincore per mapping while taking a record.
const TAKE_WINDOW: u64 = 1 << 18;

fn page() -> u64 {
    rustix::param::page_size() as u64
}

/// Which of `pages` pages from page `first` of a file were cached when the
/// record was taken.
pub struct Record {
    /// One byte per page, as mincore gives it.
    map: sys::AnonMap,
    first: u64,
    pages: u64,
}

impl Record {
    /// The record of `pages` pages from page `first` of `fd`: `None` when
    /// it cannot be taken (no memory, or mincore refused). The caller must
    /// know that the kernel tells it the truth about this file
    /// ([`crate::residency::of_range`] says when it does not).
    pub fn take(fd: impl AsFd, first: u64, pages: u64) -> Option<Record> {
        let fd = fd.as_fd();
        let mut map = sys::AnonMap::new(pages as usize).ok()?;
        let mut at = 0;
        for out in map.as_mut_slice()[..pages as usize].chunks_mut(TAKE_WINDOW as usize) {
            sys::mincore_into(fd, first + at, out).ok()?;
            at += out.len() as u64;
        }
        Some(Record { map, first, pages })
    }

    /// The record of the whole of `fd` (of `size` bytes), or `None` for a
    /// file over [`SNAPSHOT_MAX_PAGES`] or one it cannot be taken of.
    pub fn of_file(fd: impl AsFd, size: u64) -> Option<Record> {
        let pages = size.div_ceil(page());
        if pages > SNAPSHOT_MAX_PAGES {
            return None;
        }
        Record::take(fd, 0, pages)
    }

    /// The record of the pages a read of `len` bytes at `offset` may bring
    /// in: its own and [`LOOK_PAST`] beyond.
    pub fn before_read(fd: impl AsFd, offset: u64, len: u64) -> Option<Record> {
        let pg = page();
        let first = offset / pg;
        let last = (offset.saturating_add(len).saturating_add(LOOK_PAST)).div_ceil(pg);
        Record::take(fd, first, last - first)
    }

    /// The pages the record covers, `[first, end)`.
    pub fn span(&self) -> (u64, u64) {
        (self.first, self.first + self.pages)
    }

    /// Whether page `index` was cached when the record was taken (false
    /// outside the record).
    pub fn was_cached(&self, index: u64) -> bool {
        if index < self.first || index - self.first >= self.pages {
            return false;
        }
        self.map.as_slice()[(index - self.first) as usize] & 1 == 1
    }

    /// Drops the pages of `[first, last)` that the record did not have
    /// (`POSIX_FADV_DONTNEED`; pages under I/O or dirty stay). `chase`:
    /// then, for up to 100 ms, looks again at what is resident and drops
    /// what came in since (pages whose read was still in flight).
    pub fn drop_new(&self, fd: impl AsFd, first: u64, last: u64, chase: bool) {
        let fd = fd.as_fd();
        let pg = page();
        let mut i = first;
        while i < last {
            if self.was_cached(i) {
                i += 1;
                continue;
            }
            let from = i;
            while i < last && !self.was_cached(i) {
                i += 1;
            }
            let _ = sys::fadvise(fd, from * pg, (i - from) * pg, sys::Advice::DontNeed);
        }
        if !chase {
            return;
        }
        let mut now = [0u8; CHASE_WINDOW];
        for _ in 0..CHASE_LOOKS {
            let mut left = false;
            let mut at = first;
            while at < last {
                let n = (last - at).min(CHASE_WINDOW as u64);
                if sys::mincore_into(fd, at, &mut now[..n as usize]).is_err() {
                    return;
                }
                let stray = |j: u64| now[j as usize] & 1 == 1 && !self.was_cached(at + j);
                let mut j = 0;
                while j < n {
                    if !stray(j) {
                        j += 1;
                        continue;
                    }
                    let from = j;
                    while j < n && stray(j) {
                        j += 1;
                    }
                    left = true;
                    let _ =
                        sys::fadvise(fd, (at + from) * pg, (j - from) * pg, sys::Advice::DontNeed);
                }
                at += n;
            }
            if !left {
                return;
            }
            std::thread::sleep(CHASE_PAUSE);
        }
    }

    /// The record as a pointer, for a holder that swaps it atomically
    /// (the preload's per-descriptor slots). [`Record::from_raw`] takes it
    /// back.
    pub fn into_raw(self) -> (*mut u8, u64, u64) {
        let (ptr, _) = self.map.into_raw();
        (ptr, self.first, self.pages)
    }

    /// The record [`Record::into_raw`] gave.
    ///
    /// # Safety
    /// `parts` came from `into_raw`, and no other record holds them.
    pub unsafe fn from_raw(parts: (*mut u8, u64, u64)) -> Option<Record> {
        // SAFETY: the caller's promise: the mapping `into_raw` gave up,
        // of `pages` bytes (at least one: AnonMap::new's rule).
        let map = unsafe { sys::AnonMap::from_raw(parts.0, parts.2.max(1) as usize) }?;
        Some(Record {
            map,
            first: parts.1,
            pages: parts.2,
        })
    }
}

/// The span of a file read since a record was taken, for the passes:
/// three atomics, so that readers on several threads share it without a
/// lock. All zeros is empty, so a table of spans can start in `.bss`.
#[derive(Default)]
pub struct ReadSpan {
    /// The lowest offset read, bit-inverted (so that zero is "none" and a
    /// `fetch_max` keeps the minimum).
    lo_inv: AtomicU64,
    hi: AtomicU64,
    since: AtomicU64,
}

impl ReadSpan {
    /// An empty span.
    pub const fn new() -> ReadSpan {
        ReadSpan {
            lo_inv: AtomicU64::new(0),
            hi: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }
    }

    /// Notes a read of `len` bytes at `offset`; true when a pass is due
    /// ([`PASS_EVERY`] bytes since the last).
    pub fn note(&self, offset: u64, len: u64) -> bool {
        self.lo_inv.fetch_max(!offset, Ordering::Relaxed);
        self.hi
            .fetch_max(offset.saturating_add(len), Ordering::Relaxed);
        if self.since.fetch_add(len, Ordering::Relaxed) + len >= PASS_EVERY {
            self.since.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// The pages a pass looks at, `[first, last)`: those read and
    /// [`LOOK_PAST`] beyond; `None` before any read.
    pub fn pages(&self) -> Option<(u64, u64)> {
        let lo = !self.lo_inv.load(Ordering::Relaxed);
        let hi = self.hi.load(Ordering::Relaxed);
        if lo >= hi {
            return None;
        }
        let pg = page();
        Some((lo / pg, hi.saturating_add(LOOK_PAST).div_ceil(pg)))
    }

    /// Empties the span (a new record was taken).
    pub fn clear(&self) {
        self.lo_inv.store(0, Ordering::Relaxed);
        self.hi.store(0, Ordering::Relaxed);
        self.since.store(0, Ordering::Relaxed);
    }
}

/// The record and span of one file read by one reader (the library's
/// Uncached fallback): a pass every [`PASS_EVERY`] bytes, and a final one
/// with a chase when it is dropped.
pub struct Snapshot<F: AsFd> {
    fd: F,
    record: Record,
    span: ReadSpan,
}

impl<F: AsFd> Snapshot<F> {
    /// A whole-file record of `fd` (of `size` bytes); `None` where
    /// [`Record::of_file`] gives none.
    pub fn take(fd: F, size: u64) -> Option<Snapshot<F>> {
        let record = Record::of_file(&fd, size)?;
        Some(Snapshot {
            fd,
            record,
            span: ReadSpan::new(),
        })
    }

    /// After a read of `n` bytes at `offset`: a pass when one is due.
    pub fn read(&self, offset: u64, n: u64) {
        if self.span.note(offset, n) {
            self.pass(false);
        }
    }

    fn pass(&self, chase: bool) {
        if let Some((first, last)) = self.span.pages() {
            self.record.drop_new(&self.fd, first, last, chase);
        }
    }
}

impl<F: AsFd> Drop for Snapshot<F> {
    fn drop(&mut self) {
        self.pass(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    fn cached(fd: &std::fs::File, first: u64, pages: u64) -> Vec<bool> {
        let mut v = vec![0u8; pages as usize];
        sys::mincore_into(fd, first, &mut v).unwrap();
        v.iter().map(|b| b & 1 == 1).collect()
    }

    /// A file half cached (even pages) before a read of all of it keeps
    /// exactly its even pages after the record's pass with a chase.
    #[test]
    fn a_pass_leaves_the_cache_as_recorded() {
        let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
        let path = dir.path().join("f");
        testdata::write_file(&path, 64 * page()).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        if !sys::may_see_residency(&f) {
            eprintln!("SKIP: residency not visible here");
            return;
        }
        crate::residency::evict(&f, 0, 0).unwrap();
        // No kernel readahead around the even pages.
        sys::fadvise(&f, 0, 0, sys::Advice::Random).unwrap();
        let mut one = vec![0u8; page() as usize];
        for i in (0..64).step_by(2) {
            sys::pread_flags(&f, &mut one, i * page(), 0).unwrap();
        }
        let record = Record::of_file(&f, 64 * page()).unwrap();
        assert_eq!(record.span(), (0, 64));
        assert!((0..64).all(|i| record.was_cached(i) == (i % 2 == 0)));
        assert!(!record.was_cached(64));
        let mut all = vec![0u8; 64 * page() as usize];
        sys::pread_flags(&f, &mut all, 0, 0).unwrap();
        let span = ReadSpan::new();
        assert!(span.pages().is_none());
        assert!(!span.note(0, 64 * page()));
        let (first, last) = span.pages().unwrap();
        assert_eq!(first, 0);
        assert_eq!(last, (64 * page() + LOOK_PAST).div_ceil(page()));
        record.drop_new(&f, first, last, true);
        let now = cached(&f, 0, 64);
        let kept: Vec<u64> = (0..64).filter(|&i| now[i as usize]).collect();
        assert_eq!(kept, (0..64).step_by(2).collect::<Vec<u64>>());
        let (p, a, b) = record.into_raw();
        // SAFETY: the parts just given, held by nothing else.
        let back = unsafe { Record::from_raw((p, a, b)) }.unwrap();
        assert!(back.was_cached(2) && !back.was_cached(3));
    }

    /// A span's pass comes every PASS_EVERY bytes.
    #[test]
    fn a_span_asks_for_a_pass_every_pass_every_bytes() {
        let span = ReadSpan::new();
        let step = PASS_EVERY / 4;
        let due: Vec<bool> = (0..8).map(|i| span.note(i * step, step)).collect();
        assert_eq!(due, [false, false, false, true, false, false, false, true]);
        span.clear();
        assert!(span.pages().is_none());
    }
}
