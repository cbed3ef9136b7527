//! The kernel's readahead in large folios (`page_cache_ra_order`, for a
//! file system that reads in them: ext4 on this machine's 6.18), as its
//! `readahead:*` tracepoints show it.
//!
//! The file's readahead keeps a folio order (`ra->order`): 0 after a
//! window read on a miss, two more after each window read on a mark, and
//! then no more than the window holds. A window is cut into folios from
//! its start, each of the largest order that is aligned at its index,
//! fits in the window, and is at most that order (and 512 pages, 2 MiB).
//! Its mark goes on the whole folio that holds the marker page, so a
//! reader that lands anywhere in it triggers the next window. (`ondemand`
//! itself ends a window read on a mark where its order aligns:
//! [`ahead::ra::RaConfig::large_folios`].) A window read on a miss is so
//! read in small pages with a one-page mark, as the kernel's trace shows
//! (`page_cache_ra_order ... order=0`).
//!
//! What it changes: a reader stepping over pages, as a sqlite3 IN-list in
//! key order over rows of 2.7 KB does (a row every 27 pages), rarely lands
//! on a one-page mark, but once two of its reads fall a page apart and the
//! next lands on the 4-page window's mark, the following windows' marks
//! are folios of 4, 16 and 64 pages, which it meets, and the kernel's
//! windows run ahead of it to their largest (docs/never-worse.md).

use super::table::FileTable;
use super::*;

/// The largest folio: 512 pages, 2 MiB of 4 KiB pages (a PMD).
const FOLIO_ORDER: u32 = 9;

/// Reads the forward `window` in folios of at most `order`, and marks
/// the folio that holds its marker page (small pages, one marked, at
/// order 0).
pub(super) fn submit(t: &mut FileTable<'_>, window: &Window, order: u32) {
    let pages = t.file_pages();
    let end = (window.start + window.size).min(pages);
    if window.start >= end {
        return;
    }
    let top = order.min(FOLIO_ORDER).min(63 - window.size.leading_zeros());
    let mark = window.marker_page();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut marked: Option<(u64, u64, u8)> = None;
    let mut index = window.start;
    while index < end {
        let mut o = top.min(index.trailing_zeros());
        while o > 0 && index + (1u64 << o) > end {
            o -= 1;
        }
        let next = index + (1u64 << o);
        // A folio where a page is cached is read in small pages, as the
        // kernel falls back to them there.
        let whole = (index..next).all(|p| !t.is_present(p));
        if let Some(m) = mark.filter(|m| (index..next).contains(m)) {
            if whole {
                marked = Some((index, next, o as u8));
            } else if !t.is_present(m) {
                marked = Some((m, m + 1, 0));
            }
        }
        for p in (index..next).filter(|&p| !t.is_present(p)) {
            match runs.last_mut() {
                Some((s, c)) if *s + *c == p => *c += 1,
                _ => runs.push((p, 1)),
            }
        }
        index = next;
    }
    for (start, count) in runs {
        t.core.read(t.file, start, count, true);
    }
    if let Some((first, end, order)) = marked {
        let base = t.core.file_base[t.file];
        for p in first..end {
            let page = &mut t.core.pages[(base + p) as usize];
            page.marked = true;
            page.mark_order = order;
        }
    }
}
