//! Serving one request: the policy's windows and the demand reads through
//! `ra::drive` (or, for a page fault of a mapping, the kernel's
//! read-around), the waits on pages in flight, and `ahead run`'s hints.

use super::*;

/// Serves one request up to the point of waiting: request `id` is
/// registered with every I/O it waits for. Returns how many I/Os that is
/// and the request's length in bytes (cut to the file). `faults`: the
/// request is a page fault of a mapping ([`fault`]).
pub(super) fn issue(
    c: &mut Core,
    policy: &mut dyn Policy,
    preload: Option<&mut Preload>,
    (file, faults): (usize, bool),
    (off, len): (u64, u64),
    id: u32,
) -> (u32, u64) {
    let ps = c.cfg.page_size;
    c.mark_hit = None;
    let file_bytes = c.file_pages[file] * ps;
    if off >= file_bytes || len == 0 {
        return (0, 0);
    }
    let len = len.min(file_bytes - off);
    let first = off / ps;
    let count = (off + len - 1) / ps - first + 1;
    let base = c.file_base[file];
    c.request_seq += 1;
    c.stats.bytes_requested += len;
    c.stats.pages_requested += count;
    for p in first..first + count {
        if c.pages[(base + p) as usize].state == State::Cached {
            c.stats.pages_hit += 1;
        }
    }
    if faults {
        for p in first..first + count {
            fault(c, policy, file, p);
        }
    } else {
        let mut table = FileTable { core: c, file };
        ra::drive(policy, &mut table, Request::new(first, count));
    }
    // Use the pages: cached ones are touched now, in-flight ones are
    // waited for.
    let mut waiting = 0u32;
    let mut last_io = NIL;
    let mut late = false;
    for p in first..first + count {
        let g = (base + p) as u32;
        let page = c.pages[g as usize];
        match page.state {
            State::Cached => {
                c.pages[g as usize].readahead_unused = false;
                c.lru_touch(g);
            }
            State::Reading => {
                c.pages[g as usize].readahead_unused = false;
                if page.io != last_io {
                    last_io = page.io;
                    if c.is_prefetch(page.io) {
                        late = true;
                    }
                    c.ios[page.io as usize].waiters.push(id);
                    waiting += 1;
                }
            }
            State::Absent => unreachable!("drive leaves every requested page present"),
        }
    }
    if late {
        c.stats.late_prefetches += 1;
    }
    // `ahead run`: the preload's hints for this read, read as readahead
    // with no marker when the helper next wakes (`preload::HELPER_NAP`).
    // (A fault is not seen by the preload.)
    if let Some(p) = preload.filter(|_| !faults) {
        let mut runs = Vec::new();
        p.read(off, len, &mut runs);
        let nap = c.helper_nap;
        let at_wake = if nap > 0.0 {
            (c.now / nap).floor() * nap + nap
        } else {
            c.now
        };
        for (at, n) in runs {
            let (page, count) = (at / ps, n.div_ceil(ps));
            c.schedule(at_wake, Ev::Hint { file, page, count });
        }
    }
    (waiting, len)
}

/// `ahead run`'s helper hints `count` pages of `file` from `page`: read
/// as readahead with no marker.
pub(super) fn hint(c: &mut Core, file: usize, page: u64, count: u64) {
    let mut table = FileTable { core: c, file };
    if let Some(w) = Window::forward(page, count, 0).clip(table.file_pages()) {
        table.submit_readahead(&w);
    }
}

/// Past this many net misses of a file's page faults the kernel stops
/// reading around them (`MMAP_LOTSAMISS`, mm/filemap.c).
const MMAP_LOTSAMISS: u32 = 100;

/// A page fault of `page` of `file` through a mapping, as the kernel's
/// `filemap_fault` serves it (mm/filemap.c, Linux 6.x, a mapping without
/// `MADV_SEQUENTIAL` or `MADV_RANDOM`):
/// * a miss counts one more net miss (`mmap_miss`, up to ten times
///   [`MMAP_LOTSAMISS`]) and, while there are at most `MMAP_LOTSAMISS`,
///   reads around the page: the kernel's whole window (`ra_pages`, here
///   the policy's largest) from half a window before it, the marker a
///   quarter window from its end (`do_sync_mmap_readahead`); past them, the
///   page alone;
/// * a hit takes one net miss back, and a marker hit is the policy's
///   asynchronous readahead, as a read's would be
///   (`do_async_mmap_readahead` calls `page_cache_async_ra`).
pub(super) fn fault(c: &mut Core, policy: &mut dyn Policy, file: usize, page: u64) {
    let ra = c.cfg.ra.max_pages.max(1);
    let g = (c.file_base[file] + page) as usize;
    if c.pages[g].state == State::Absent {
        let miss = &mut c.mmap_miss[file];
        if *miss < 10 * MMAP_LOTSAMISS {
            *miss += 1;
        }
        let around = *miss <= MMAP_LOTSAMISS;
        let mut table = FileTable { core: c, file };
        if around {
            let start = page.saturating_sub(ra / 2);
            if let Some(w) = Window::forward(start, ra, ra / 4).clip(table.file_pages()) {
                table.submit_readahead(&w);
            }
        }
        if !table.is_present(page) {
            table.submit_demand(page, 1);
        }
        return;
    }
    let miss = &mut c.mmap_miss[file];
    *miss = miss.saturating_sub(1);
    if c.pages[g].marked {
        let mut table = FileTable { core: c, file };
        ra::drive(policy, &mut table, Request::new(page, 1));
    }
}

/// The trial's advice for `file`'s kernel readahead since its last read
/// (`ahead run`'s preload, [`Preload::take_advice`]): the kernel's model
/// afresh, advised random (misses read as asked, and marks ignored, as the
/// hooks' guard ends the stream) or normal; and what the helper dropped
/// ahead of the reader, the cached pages of it dropped.
pub(super) fn advise(c: &mut Core, policy: &mut Box<dyn Policy>, p: &mut Preload, file: usize) {
    let Some((random, drop)) = p.take_advice() else {
        return;
    };
    let mut ra = c.cfg.ra;
    ra.random_advice = random;
    *policy = ra::new_policy(c.cfg.policy.kind(), ra);
    let Some((from, to)) = drop else { return };
    let ps = c.cfg.page_size;
    let (first, end) = (from / ps, to.div_ceil(ps).min(c.file_pages[file]));
    let base = c.file_base[file];
    for g in (base + first..base + end.max(first)).map(|g| g as u32) {
        if c.pages[g as usize].state != State::Cached {
            continue;
        }
        c.lru_unlink(g);
        let page = &mut c.pages[g as usize];
        page.state = State::Absent;
        page.marked = false;
        page.shadow_unused = false;
        if page.readahead_unused {
            page.readahead_unused = false;
            c.stats.evicted_before_use += 1;
        }
        c.cached -= 1;
    }
}
