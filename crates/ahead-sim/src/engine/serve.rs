//! Serving one request: the policy's windows and the demand reads through
//! `ra::drive`, the waits on pages in flight, and `ahead run`'s hints.

use super::*;

/// Serves one request up to the point of waiting: request `id` is
/// registered with every I/O it waits for. Returns how many I/Os that is
/// and the request's length in bytes (cut to the file).
pub(super) fn issue(
    c: &mut Core,
    policy: &mut dyn Policy,
    preload: Option<&mut Preload>,
    file: usize,
    (off, len): (u64, u64),
    id: u32,
) -> (u32, u64) {
    let ps = c.cfg.page_size;
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
    {
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
    // with no marker once the read is under way.
    if let Some(p) = preload {
        let mut runs = Vec::new();
        p.read(off, len, &mut runs);
        let mut table = FileTable { core: c, file };
        for (at, n) in runs {
            let window = Window::forward(at / ps, n.div_ceil(ps), 0);
            if let Some(w) = window.clip(table.file_pages()) {
                table.submit_readahead(&w);
            }
        }
    }
    (waiting, len)
}
