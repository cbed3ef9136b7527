//! Page-cache residency of ordinary files: how much of a file the kernel
//! holds in memory, which pages, and tools to change it (evict, warm).
//!
//! Two sources, as vmtouch and util-linux fincore use:
//! * cachestat(2) (Linux 6.5) gives counts for a byte range without mapping
//!   the file: cached, dirty, writeback, evicted and recently evicted pages;
//! * mincore(2) over a shared mapping gives a bit per page (the only way to
//!   get a page map), but counts only cached pages.
//!
//! Both are honest only for a caller who owns the file or may write it (Linux
//! 6.14+ returns EPERM from cachestat otherwise; mincore has always answered
//! "resident" for every page of such a file, a lie). In that case residency is
//! [`Seen::Unknown`], never a made-up number.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sys;

pub mod record;

/// Which system call a [`Residency`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// cachestat(2): all counters present.
    Cachestat,
    /// mincore(2): `cached` only.
    Mincore,
}

impl Source {
    /// The name printed by the CLI and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Source::Cachestat => "cachestat",
            Source::Mincore => "mincore",
        }
    }
}

/// Residency counts of a byte range, in pages of the system page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Residency {
    /// Pages the range covers (up to the end of the file).
    pub pages: u64,
    /// Pages in the page cache.
    pub cached: u64,
    /// Dirty cached pages (cachestat only).
    pub dirty: Option<u64>,
    /// Cached pages under writeback (cachestat only).
    pub writeback: Option<u64>,
    /// Pages evicted whose shadow entries the kernel still holds (cachestat).
    pub evicted: Option<u64>,
    /// Evicted pages that were recently in use (cachestat).
    pub recently_evicted: Option<u64>,
    /// Where the counts came from.
    pub source: Source,
}

/// What could be seen of a range's residency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The kernel told the truth.
    Known(Residency),
    /// The kernel would not tell (or would lie).
    Unknown {
        /// The range's size in pages.
        pages: u64,
        /// A one-line reason.
        why: String,
    },
}

impl Seen {
    /// The counts, if known.
    pub fn known(&self) -> Option<&Residency> {
        match self {
            Seen::Known(r) => Some(r),
            Seen::Unknown { .. } => None,
        }
    }

    /// Pages the range covers, known or not.
    pub fn pages(&self) -> u64 {
        match self {
            Seen::Known(r) => r.pages,
            Seen::Unknown { pages, .. } => *pages,
        }
    }
}

/// The system page size in bytes, the unit of every count here.
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Set once cachestat has answered ENOSYS: later calls go straight to mincore.
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

/// Whether this kernel has cachestat(2), probed with `fd` (any open file).
pub fn cachestat_supported(fd: impl AsFd) -> bool {
    match sys::cachestat(fd, 0, 1) {
        Ok(_) => true,
        Err(e) => !matches!(e.raw_os_error(), Some(libc::ENOSYS)),
    }
}

/// Mapping window for mincore without cachestat: bounds the address space
/// one call maps (256 MiB, well inside a `prlimit --as` of a few GiB).
const MINCORE_CHUNK: u64 = 256 << 20;

fn file_size(fd: impl AsFd) -> io::Result<u64> {
    let st = rustix::fs::fstat(fd.as_fd())?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice {
        return Ok(rustix::fs::seek(fd, rustix::fs::SeekFrom::End(0))?);
    }
    Ok(st.st_size as u64)
}

/// The page range `[first, end)` covering `len` bytes at `offset`, clipped
/// to `size`.
fn page_span(offset: u64, len: u64, size: u64) -> (u64, u64) {
    let page = page_size();
    let end = offset.saturating_add(len).min(size);
    if offset >= end {
        return (offset / page, offset / page);
    }
    (offset / page, end.div_ceil(page))
}

/// Whether every page of the `len` bytes at `offset` of `fd` (clipped to
/// the file's `size`, which the caller knows) is cached: one cachestat(2),
/// no allocation, nothing mapped — for a hot path that may look often.
/// `None` where cachestat cannot answer (before Linux 6.5; EPERM for a file
/// the caller may neither write nor owns, on 6.14 and later).
pub fn all_cached(fd: impl AsFd, offset: u64, len: u64, size: u64) -> Option<bool> {
    let (first, end) = page_span(offset, len, size);
    if first == end {
        return Some(true);
    }
    let page = page_size();
    let st = sys::cachestat(fd, first * page, (end - first) * page).ok()?;
    Some(st.cached >= end - first)
}

/// Pages of `len` bytes at `offset` of `fd` in the page cache (cachestat;
/// `None` where the kernel has no cachestat or refuses the file).
pub fn cached_pages(fd: impl AsFd, offset: u64, len: u64) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    sys::cachestat(fd, offset, len).ok().map(|st| st.cached)
}

/// Residency of `len` bytes at `offset` of `fd` (`len` `u64::MAX` for the
/// rest of the file): cachestat, else mincore, else [`Seen::Unknown`].
/// Errors are those of fstat or of mapping the file.
pub fn of_range(fd: impl AsFd, offset: u64, len: u64) -> io::Result<Seen> {
    let fd = fd.as_fd();
    let size = file_size(fd)?;
    let (first, end) = page_span(offset, len, size);
    let pages = end - first;
    if pages == 0 {
        return Ok(Seen::Known(Residency {
            pages: 0,
            cached: 0,
            dirty: Some(0),
            writeback: Some(0),
            evicted: Some(0),
            recently_evicted: Some(0),
            source: Source::Cachestat,
        }));
    }
    let page = page_size();
    if !NO_CACHESTAT.load(Ordering::Relaxed) {
        match sys::cachestat(fd, first * page, pages * page) {
            Ok(st) => {
                return Ok(Seen::Known(Residency {
                    pages,
                    cached: st.cached,
                    dirty: Some(st.dirty),
                    writeback: Some(st.writeback),
                    evicted: Some(st.evicted),
                    recently_evicted: Some(st.recently_evicted),
                    source: Source::Cachestat,
                }))
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Ok(Seen::Unknown {
                    pages,
                    why: "cachestat: permission denied (residency is shown only to the owner \
                          or to who may write the file)"
                        .into(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                NO_CACHESTAT.store(true, Ordering::Relaxed);
            }
            // EOPNOTSUPP (hugetlbfs) and anything else: try mincore.
            Err(_) => {}
        }
    }
    match page_map(fd, first * page, pages * page)? {
        Some(map) => Ok(Seen::Known(Residency {
            pages,
            cached: map.iter().filter(|&&c| c).count() as u64,
            dirty: None,
            writeback: None,
            evicted: None,
            recently_evicted: None,
            source: Source::Mincore,
        })),
        None => Ok(Seen::Unknown {
            pages,
            why: "mincore reports every page cached for a file the caller neither owns nor \
                  may write"
                .into(),
        }),
    }
}

/// One bool per page of `len` bytes at `offset` (rounded out to pages,
/// clipped to the file), true when cached. `None` when the kernel would
/// not tell the truth for this caller. The map takes a byte per page: for
/// a range of any size, use [`each_map_part`].
pub fn page_map(fd: impl AsFd, offset: u64, len: u64) -> io::Result<Option<Vec<bool>>> {
    let mut map = Vec::new();
    let seen = each_map_part(fd, offset, len, |_, part| {
        match part {
            MapPart::Same(cached, pages) => map.resize(map.len() + pages as usize, cached),
            MapPart::Each(w) => map.extend_from_slice(w),
        }
        Ok(())
    })?;
    Ok(seen.then_some(map))
}

/// A stretch of a page map, as [`each_map_part`] hands it over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapPart<'a> {
    /// This many pages, every one cached (`true`) or none.
    Same(bool, u64),
    /// One bool per page, true when cached.
    Each(&'a [bool]),
}

impl MapPart<'_> {
    /// The pages the part covers.
    pub fn pages(&self) -> u64 {
        match self {
            MapPart::Same(_, pages) => *pages,
            MapPart::Each(w) => w.len() as u64,
        }
    }
}

/// A partly cached range at most this many pages (16 MiB at 4 KiB) is
/// mapped for mincore rather than split further.
const LEAF_PAGES: u64 = 4096;

/// The page map of `len` bytes at `offset` (as [`page_map`]), handed to
/// `f` in order, part by part, with the index of each part's first page.
/// Where the kernel has cachestat(2), a range is counted first and split
/// in halves only while it is partly cached, so that mincore (one byte per
/// page, and a walk of the page cache per page) only ever sees ranges of
/// at most 4,096 pages (16 MiB) that hold cached pages: a 15 TiB sparse file
/// with nothing cached is one call, as the kernel keeps the answer in one
/// tree walk. Without cachestat, mincore walks the range in windows of
/// 256 MiB. Memory and mapped address space stay bounded either
/// way. `false` (and `f` never called) when the kernel would not tell the
/// truth for this caller.
pub fn each_map_part(
    fd: impl AsFd,
    offset: u64,
    len: u64,
    mut f: impl FnMut(u64, MapPart<'_>) -> io::Result<()>,
) -> io::Result<bool> {
    let fd = fd.as_fd();
    if !sys::may_see_residency(fd) {
        return Ok(false);
    }
    let size = file_size(fd)?;
    let page = page_size();
    let (first, end) = page_span(offset, len, size);
    let mut window = Vec::new();
    if first < end && !NO_CACHESTAT.load(Ordering::Relaxed) {
        match sys::cachestat(fd, first * page, (end - first) * page) {
            Ok(_) => {
                // Ranges still to visit, the next one on top.
                let mut todo = vec![(first, end)];
                while let Some((a, b)) = todo.pop() {
                    let n = b - a;
                    let cached = sys::cachestat(fd, a * page, n * page)?.cached;
                    if cached == 0 || cached >= n {
                        f(a, MapPart::Same(cached > 0, n))?;
                    } else if n <= LEAF_PAGES {
                        window.clear();
                        sys::mincore(fd, a * page, (n * page) as usize, &mut window)?;
                        f(a, MapPart::Each(&window))?;
                    } else {
                        // Split on a leaf boundary, so leaves line up.
                        let mid = (a + n / 2).next_multiple_of(LEAF_PAGES).min(b - 1);
                        todo.push((mid, b));
                        todo.push((a, mid));
                    }
                }
                return Ok(true);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                NO_CACHESTAT.store(true, Ordering::Relaxed);
            }
            // EOPNOTSUPP (hugetlbfs) and anything else: mincore alone.
            Err(_) => {}
        }
    }
    let mut at = first * page;
    let stop = end * page;
    while at < stop {
        let n = (stop - at).min(MINCORE_CHUNK);
        window.clear();
        sys::mincore(fd, at, n as usize, &mut window)?;
        f(at / page, MapPart::Each(&window))?;
        at += n;
    }
    Ok(true)
}

/// Runs of equal values in a page map: `(first page, pages)` of every run
/// where the map is `value`, relative to the map's start.
pub fn runs(map: &[bool], value: bool) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < map.len() {
        if map[i] != value {
            i += 1;
            continue;
        }
        let start = i;
        while i < map.len() && map[i] == value {
            i += 1;
        }
        out.push((start as u64, (i - start) as u64));
    }
    out
}

/// Drops the clean cached pages of `len` bytes at `offset` (`len` 0: to the
/// end of the file), posix_fadvise(DONTNEED). Dirty pages and pages mapped
/// by a process stay.
pub fn evict(fd: impl AsFd, offset: u64, len: u64) -> io::Result<()> {
    sys::fadvise(fd, offset, len, sys::Advice::DontNeed)
}

/// What [`warm`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmReport {
    /// Bytes read from the file (the uncached runs, slightly widened).
    pub bytes_read: u64,
    /// Read requests issued.
    pub reads: u64,
    /// Whether the page map was seen (else the whole range was read).
    pub map_seen: bool,
    /// Wall time.
    pub elapsed: Duration,
}

/// Uncached runs closer than this are read as one (reading a few cached
/// pages costs a copy, a second request costs a seek).
const WARM_MERGE_GAP: u64 = 64 << 10;
/// Largest single read `warm` issues.
const WARM_IO: u64 = 1 << 20;
/// Reads in flight.
const WARM_DEPTH: usize = 4;

/// Brings `len` bytes at `offset` of `fd` (`u64::MAX`: to the end) into the
/// kernel's page cache, reading only the runs that are not cached yet, in
/// reads of up to 1 MiB, four at a time. The fd's own kernel readahead is
/// switched off (POSIX_FADV_RANDOM) so nothing beyond the runs is read.
pub fn warm(fd: impl AsFd, offset: u64, len: u64) -> io::Result<WarmReport> {
    let fd = fd.as_fd();
    let started = Instant::now();
    let size = file_size(fd)?;
    let (first, end) = page_span(offset, len, size);
    let map_seen = sys::may_see_residency(fd);
    sys::fadvise(fd, 0, 0, rustix::fs::Advice::Random)?;
    // The reads are planned a window of the page map at a time, as the
    // workers ask for them: memory stays bounded whatever the file's size.
    let plan = std::sync::Mutex::new(WarmPlan {
        next_page: first,
        end_page: end,
        size,
        map_seen,
        pending: std::collections::VecDeque::new(),
        open_run: None,
        reads: 0,
    });
    let bytes = AtomicU64::new(0);
    let result: io::Result<()> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WARM_DEPTH)
            .map(|_| {
                s.spawn(|| -> io::Result<()> {
                    let mut buf = vec![0u8; WARM_IO as usize];
                    loop {
                        let next = plan
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .next_read(fd)?;
                        let Some((at, n)) = next else {
                            return Ok(());
                        };
                        let mut done = 0;
                        while done < n {
                            match sys::pread_flags(
                                fd,
                                &mut buf[done as usize..n as usize],
                                at + done,
                                0,
                            ) {
                                Ok(0) => break, // truncated meanwhile
                                Ok(k) => done += k as u64,
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                Err(e) => return Err(e),
                            }
                        }
                        bytes.fetch_add(done, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    let _ = sys::fadvise(fd, 0, 0, rustix::fs::Advice::Normal);
    result?;
    let reads = plan.into_inner().unwrap_or_else(|p| p.into_inner()).reads;
    Ok(WarmReport {
        bytes_read: bytes.into_inner(),
        reads,
        map_seen,
        elapsed: started.elapsed(),
    })
}

/// What `warm` still has to read: the page map is looked at one window at
/// a time, its uncached runs merged across small gaps and cut into reads.
struct WarmPlan {
    /// First page whose map has not been looked at yet.
    next_page: u64,
    end_page: u64,
    size: u64,
    map_seen: bool,
    /// Reads planned, not yet handed out: `(offset, len)`.
    pending: std::collections::VecDeque<(u64, u64)>,
    /// An uncached run, in bytes, that the next window may still extend.
    open_run: Option<(u64, u64)>,
    reads: u64,
}

impl WarmPlan {
    /// The next read to issue, `None` when everything is planned and handed
    /// out.
    fn next_read(&mut self, fd: BorrowedFd<'_>) -> io::Result<Option<(u64, u64)>> {
        let page = page_size();
        while self.pending.is_empty() {
            if self.next_page >= self.end_page {
                match self.open_run.take() {
                    Some(run) => self.cut(run),
                    None => return Ok(None),
                }
                continue;
            }
            let from = self.next_page;
            let to = (from + MINCORE_CHUNK / page).min(self.end_page);
            self.next_page = to;
            if !self.map_seen {
                self.extend((from * page, to * page));
                continue;
            }
            let mut map = Vec::with_capacity((to - from) as usize);
            sys::mincore(fd, from * page, ((to - from) * page) as usize, &mut map)?;
            for (start, n) in runs(&map, false) {
                self.extend(((from + start) * page, (from + start + n) * page));
            }
        }
        self.reads += 1;
        Ok(self.pending.pop_front())
    }

    /// Adds an uncached run, merged with the open one when the gap between
    /// them is small.
    fn extend(&mut self, (s, e): (u64, u64)) {
        match &mut self.open_run {
            Some(last) if s - last.1 <= WARM_MERGE_GAP => last.1 = e,
            _ => {
                if let Some(run) = self.open_run.replace((s, e)) {
                    self.cut(run);
                }
            }
        }
    }

    /// Cuts a run into reads of at most [`WARM_IO`].
    fn cut(&mut self, (s, e): (u64, u64)) {
        let e = e.min(self.size);
        let mut at = s;
        while at < e {
            let n = (e - at).min(WARM_IO);
            self.pending.push_back((at, n));
            at += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    fn file(len: u64) -> (tempfile::TempDir, std::fs::File) {
        let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
        let path = dir.path().join("f");
        testdata::write_file(&path, len).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        (dir, f)
    }

    fn cached(f: &std::fs::File) -> u64 {
        of_range(f, 0, u64::MAX).unwrap().known().unwrap().cached
    }

    #[test]
    fn runs_of_a_map() {
        let map = [true, true, false, true, false, false];
        assert_eq!(runs(&map, true), vec![(0, 2), (3, 1)]);
        assert_eq!(runs(&map, false), vec![(2, 1), (4, 2)]);
        assert!(runs(&[], true).is_empty());
    }

    #[test]
    fn evict_then_warm_a_range_then_everything() {
        let page = page_size();
        let (_d, f) = file(256 * page + 100);
        evict(&f, 0, 0).unwrap();
        let before = of_range(&f, 0, u64::MAX).unwrap();
        let r = before.known().unwrap();
        assert_eq!(r.pages, 257);
        assert_eq!(r.cached, 0, "{r:?}");

        let w = warm(&f, 10 * page, 20 * page).unwrap();
        assert!(w.map_seen);
        assert_eq!(w.bytes_read, 20 * page);
        assert_eq!(cached(&f), 20);
        let map = page_map(&f, 0, u64::MAX).unwrap().unwrap();
        assert_eq!(runs(&map, true), vec![(10, 20)]);
        // The range's own counts, from both sources.
        let part = of_range(&f, 5 * page, 10 * page).unwrap();
        assert_eq!(part.known().unwrap().cached, 5);

        // Warming everything reads only what is missing (the tail page is
        // partial: 100 bytes).
        let w = warm(&f, 0, u64::MAX).unwrap();
        assert_eq!(w.bytes_read, 236 * page + 100);
        assert_eq!(cached(&f), 257);
        let w = warm(&f, 0, u64::MAX).unwrap();
        assert_eq!(w.bytes_read, 0);

        evict(&f, 0, 100 * page).unwrap();
        assert_eq!(cached(&f), 157);
    }

    #[test]
    fn mincore_and_cachestat_agree() {
        let page = page_size();
        let (_d, f) = file(64 * page);
        evict(&f, 0, 0).unwrap();
        warm(&f, 3 * page, 7 * page).unwrap();
        warm(&f, 40 * page, page).unwrap();
        let map = page_map(&f, 0, u64::MAX).unwrap().unwrap();
        let from_map = map.iter().filter(|&&c| c).count() as u64;
        assert_eq!(from_map, 8);
        match sys::cachestat(&f, 0, 0) {
            Ok(st) => assert_eq!(st.cached, from_map),
            Err(e) => eprintln!("SKIP cachestat half: {e}"),
        }
    }

    /// The split walk gives the map mincore gives, on a file large enough
    /// to be split (64 MiB), and walks a 1 TiB sparse file in a handful of
    /// parts, finding exactly the pages read.
    #[test]
    fn a_map_is_split_only_where_pages_are_cached() {
        let page = page_size();
        let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("sparse"))
            .unwrap();
        f.set_len(64 << 20).unwrap();
        evict(&f, 0, 0).unwrap();
        let read = [3u64, 4, 5, 4097, 9000, 16383];
        for &p in &read {
            warm(&f, p * page, page).unwrap();
        }
        let mut whole = Vec::new();
        sys::mincore(&f, 0, 64 << 20, &mut whole).unwrap();
        assert_eq!(page_map(&f, 0, u64::MAX).unwrap().unwrap(), whole);

        if sys::cachestat(&f, 0, 1).is_err() {
            eprintln!("SKIP the 1 TiB half: no cachestat (mincore would walk it all)");
            return;
        }
        f.set_len(1 << 40).unwrap();
        let far = (1u64 << 40) / page - 2;
        warm(&f, far * page, page).unwrap();
        let (mut parts, mut next, mut found) = (0, 0, Vec::new());
        let seen = each_map_part(&f, 0, u64::MAX, |first, part| {
            assert_eq!(first, next, "parts come in order, without gaps");
            next += part.pages();
            parts += 1;
            match part {
                MapPart::Same(true, n) => found.extend(first..first + n),
                MapPart::Same(false, _) => {}
                MapPart::Each(w) => found.extend(
                    w.iter()
                        .enumerate()
                        .filter(|(_, &c)| c)
                        .map(|(i, _)| first + i as u64),
                ),
            }
            Ok(())
        })
        .unwrap();
        assert!(seen);
        assert_eq!(next, (1u64 << 40) / page);
        let mut want = read.to_vec();
        want.push(far);
        assert_eq!(found, want);
        // A few splits per cached region at each of 30 levels at most.
        assert!(parts < 400, "{parts} parts");
    }

    #[test]
    fn an_empty_file_has_no_pages() {
        let (_d, f) = file(0);
        let seen = of_range(&f, 0, u64::MAX).unwrap();
        assert_eq!(seen.pages(), 0);
        assert_eq!(warm(&f, 0, u64::MAX).unwrap().bytes_read, 0);
    }
}
