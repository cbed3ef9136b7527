//! A page table that remembers pages by index in a hash set: for caches
//! ahead does not hold (the kernel's, in the Buffered mode's hints) and for
//! tests of files of any size. Reads complete at once; every window
//! submitted is kept in `windows` until taken.

use super::{CacheView, Lookup, PageTable, Window};

pub(crate) use super::pageset::PageSet;

/// Pages present and marked, by index, in a file of `pages` pages.
pub(crate) struct SparseTable {
    pub(crate) pages: u64,
    pub(crate) present: PageSet,
    pub(crate) marked: PageSet,
    /// The windows submitted since they were last taken.
    pub(crate) windows: Vec<Window>,
    /// The pages those windows made present (they were absent), since
    /// last taken.
    pub(crate) fresh: PageSet,
    /// What the cache behind the table can hold, in pages, if known.
    pub(crate) capacity: Option<u64>,
}

impl SparseTable {
    pub(crate) fn new(pages: u64) -> SparseTable {
        SparseTable {
            pages,
            present: PageSet::default(),
            marked: PageSet::default(),
            windows: Vec::new(),
            fresh: PageSet::default(),
            capacity: None,
        }
    }
}

impl CacheView for SparseTable {
    fn file_pages(&self) -> u64 {
        self.pages
    }
    fn is_present(&self, index: u64) -> bool {
        self.present.contains(&index)
    }
    fn capacity_pages(&self) -> Option<u64> {
        self.capacity
    }
}

impl PageTable for SparseTable {
    fn lookup(&self, index: u64) -> Lookup {
        if self.present.contains(&index) {
            Lookup::Present {
                marked: self.marked.contains(&index),
                late: false,
            }
        } else {
            Lookup::Absent
        }
    }
    fn clear_marker(&mut self, index: u64) {
        self.marked.remove(&index);
    }
    fn submit_readahead(&mut self, window: &Window) {
        window.for_each_run(|start, count| {
            for p in start..start + count {
                if self.present.insert(p) {
                    self.fresh.insert(p);
                }
            }
        });
        if let Some(m) = window.marker_page() {
            self.marked.insert(m);
        }
        self.windows.push(*window);
    }
    fn submit_demand(&mut self, index: u64, count: u64) {
        for p in index..index + count {
            self.present.insert(p);
        }
    }
}
