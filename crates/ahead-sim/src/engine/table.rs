//! One file of the simulator's cache as `ra::drive` sees it: its pages'
//! states, and reads submitted for readahead or on demand.

use super::*;

/// One file of the engine's cache, as `ra::drive` sees it.
pub(super) struct FileTable<'a> {
    pub(super) core: &'a mut Core,
    pub(super) file: usize,
}

impl FileTable<'_> {
    fn page(&self, index: u64) -> &Page {
        &self.core.pages[(self.core.file_base[self.file] + index) as usize]
    }
}

impl CacheView for FileTable<'_> {
    fn file_pages(&self) -> u64 {
        self.core.file_pages[self.file]
    }
    fn is_present(&self, index: u64) -> bool {
        index < self.file_pages() && self.page(index).state != State::Absent
    }
    fn shadow(&self, index: u64) -> Option<Shadow> {
        let p = self.page(index);
        (p.state == State::Absent && p.shadow_unused).then_some(Shadow {
            evicted_unused: true,
        })
    }
    fn capacity_pages(&self) -> Option<u64> {
        // As the library's engine answers: all but a reserve of one
        // largest window for demand reads.
        let cfg = &self.core.cfg;
        Some(cfg.memory_pages.saturating_sub(cfg.ra.max_pages).max(1))
    }
    fn device_cost(&self) -> Option<DeviceCost> {
        Some(self.core.device_cost)
    }
    fn marked_folio(&self) -> Option<(u64, u32)> {
        self.core
            .mark_hit
            .map(|(first, order)| (first, u32::from(order)))
    }
}

impl PageTable for FileTable<'_> {
    fn lookup(&self, index: u64) -> Lookup {
        let p = self.page(index);
        match p.state {
            State::Absent => Lookup::Absent,
            State::Reading => Lookup::Present {
                marked: p.marked,
                late: self.core.is_prefetch(p.io),
            },
            State::Cached => Lookup::Present {
                marked: p.marked,
                late: false,
            },
        }
    }

    fn clear_marker(&mut self, index: u64) {
        // A folio's mark is one flag: a hit on any of its pages clears it.
        let base = self.core.file_base[self.file];
        let order = self.core.pages[(base + index) as usize].mark_order;
        let first = index >> order << order;
        let end = (first + (1 << order)).min(self.file_pages());
        for p in first..end {
            let page = &mut self.core.pages[(base + p) as usize];
            page.marked = false;
            page.mark_order = 0;
        }
        self.core.mark_hit = Some((first, order));
    }

    fn submit_readahead(&mut self, window: &Window) {
        let hit = self.core.mark_hit.take();
        if self.core.cfg.large_folios && window.shape == ra::Shape::Forward && window.size > 0 {
            // As `ondemand` keeps it: 0 after a miss, two more after a
            // mark, then no more than the window holds.
            let order = match hit {
                Some(_) => self.core.ra_order[self.file] + 2,
                None => 0,
            };
            self.core.ra_order[self.file] = order.min(window.size.ilog2());
            return super::folios::submit(self, window, order);
        }
        let marker = window.marker_page();
        let mut marker_read = false;
        let file = self.file;
        window.for_each_run(|start, count| {
            let mut at = start;
            let end = start + count;
            while at < end {
                if self.is_present(at) {
                    at += 1;
                    continue;
                }
                let run_end = (at..end).find(|&i| self.is_present(i)).unwrap_or(end);
                if marker.is_some_and(|m| m >= at && m < run_end) {
                    marker_read = true;
                }
                self.core.read(file, at, run_end - at, true);
                at = run_end;
            }
        });
        if let (Some(m), true) = (marker, marker_read) {
            let g = self.core.file_base[file] + m;
            self.core.pages[g as usize].marked = true;
        }
    }

    fn submit_demand(&mut self, index: u64, count: u64) {
        self.core.read(self.file, index, count, false);
    }
}
