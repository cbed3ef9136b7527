//! Test helpers: a cache with instant I/O that records what policies decide.

use super::{
    drive, new_policy, CacheView, Feedback, Lookup, PageTable, Policy, PolicyKind, RaConfig,
    Request, Shadow, Trigger, Window,
};
use std::ops::Range;

/// A cache view backed by a vector of flags.
pub struct VecCache {
    pub present: Vec<bool>,
    /// What [`CacheView::device_cost`] answers (None: a device the engine
    /// knows nothing of).
    pub device: Option<super::DeviceCost>,
}

impl VecCache {
    pub fn new(pages: usize) -> VecCache {
        VecCache {
            present: vec![false; pages],
            device: None,
        }
    }
}

impl CacheView for VecCache {
    fn file_pages(&self) -> u64 {
        self.present.len() as u64
    }
    fn is_present(&self, index: u64) -> bool {
        self.present.get(index as usize).copied().unwrap_or(false)
    }
    fn device_cost(&self) -> Option<super::DeviceCost> {
        self.device
    }
}

/// A page table whose reads complete at once.
pub struct Table {
    pub present: Vec<bool>,
    pub marked: Vec<bool>,
    pub unused: Vec<bool>,
    pub shadow_unused: Vec<bool>,
    pub windows: Vec<Window>,
    pub demand_ios: u64,
    pub pages_read: u64,
    /// What [`CacheView::capacity_pages`] answers.
    pub capacity: Option<u64>,
    /// What [`CacheView::device_cost`] answers.
    pub device: Option<super::DeviceCost>,
}

impl CacheView for Table {
    fn file_pages(&self) -> u64 {
        self.present.len() as u64
    }
    fn is_present(&self, index: u64) -> bool {
        self.present[index as usize]
    }
    fn shadow(&self, index: u64) -> Option<Shadow> {
        let i = index as usize;
        (!self.present[i] && self.shadow_unused[i]).then_some(Shadow {
            evicted_unused: true,
        })
    }
    fn capacity_pages(&self) -> Option<u64> {
        self.capacity
    }
    fn device_cost(&self) -> Option<super::DeviceCost> {
        self.device
    }
}

impl PageTable for Table {
    fn lookup(&self, index: u64) -> Lookup {
        let i = index as usize;
        if self.present[i] {
            Lookup::Present {
                marked: self.marked[i],
                late: false,
            }
        } else {
            Lookup::Absent
        }
    }
    fn clear_marker(&mut self, index: u64) {
        self.marked[index as usize] = false;
    }
    fn submit_readahead(&mut self, window: &Window) {
        assert!(
            window.end() <= self.file_pages(),
            "window past EOF: {window:?}"
        );
        self.windows.push(*window);
        let marker = window.marker_page();
        let mut newly = Vec::new();
        window.for_each_run(|start, count| {
            for p in start..start + count {
                let i = p as usize;
                if !self.present[i] {
                    self.present[i] = true;
                    self.unused[i] = true;
                    self.shadow_unused[i] = false;
                    self.pages_read += 1;
                    newly.push(p);
                }
            }
        });
        if let Some(m) = marker {
            if newly.contains(&m) {
                self.marked[m as usize] = true;
            }
        }
    }
    fn submit_demand(&mut self, index: u64, count: u64) {
        self.demand_ios += 1;
        for p in index..index + count {
            assert!(!self.present[p as usize]);
            self.present[p as usize] = true;
            self.pages_read += 1;
        }
    }
}

/// Records every decision of the wrapped policy.
pub(crate) struct Recording {
    pub(crate) inner: Box<dyn Policy>,
    triggers: Vec<u64>,
}

impl Policy for Recording {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn max_pages(&self) -> u64 {
        self.inner.max_pages()
    }
    fn calls(&self) -> super::Calls {
        self.inner.calls()
    }
    fn demand_fill(&self) -> super::DemandFill {
        self.inner.demand_fill()
    }
    fn begin(&mut self, req: Request) {
        self.inner.begin(req)
    }
    fn decide(&mut self, req: Request, trigger: Trigger, view: &dyn CacheView) -> Option<Window> {
        self.triggers.push(req.index);
        let w = self.inner.decide(req, trigger, view);
        if let Some(w) = w {
            check_window(&w, req, trigger, self.inner.max_pages());
        }
        w
    }
    fn more(&mut self, view: &dyn CacheView) -> Option<Window> {
        self.inner.more(view)
    }
    fn finish(&mut self, req: Request) {
        self.inner.finish(req)
    }
    fn feedback(&mut self, event: Feedback) {
        self.inner.feedback(event)
    }
}

/// The invariants every decision must hold (before clipping to the file).
pub fn check_window(w: &Window, req: Request, trigger: Trigger, max: u64) {
    assert!(w.size > 0, "empty window {w:?}");
    assert!(
        w.pages() <= max.max(req.count),
        "{w:?} holds more than max {max} for {req:?}"
    );
    if let Some(m) = w.marker_page() {
        assert!(w.contains(m), "marker {m} outside {w:?}");
    }
    if trigger == Trigger::Miss {
        // Bhattacharya's AIO readahead patch: a window made on a miss starts at
        // or before the missing page and holds it.
        assert!(
            w.contains(req.index),
            "{w:?} lacks the missing page {}",
            req.index
        );
    }
}

/// A policy driven over a [`Table`].
pub struct Sim {
    pub(crate) policy: Recording,
    pub cache: Table,
}

impl Sim {
    pub fn new(kind: PolicyKind, max: u64, file_pages: usize) -> Sim {
        Sim {
            policy: Recording {
                inner: new_policy(kind, RaConfig::with_max_pages(max)),
                triggers: Vec::new(),
            },
            cache: Table {
                present: vec![false; file_pages],
                marked: vec![false; file_pages],
                unused: vec![false; file_pages],
                shadow_unused: vec![false; file_pages],
                windows: Vec::new(),
                demand_ios: 0,
                pages_read: 0,
                capacity: None,
                device: None,
            },
        }
    }

    /// Every window submitted so far.
    pub fn windows(&self) -> &[Window] {
        &self.cache.windows
    }

    /// The pages at which the policy was consulted.
    pub fn trigger_pages(&self) -> &[u64] {
        &self.policy.triggers
    }

    /// Demand reads so far.
    pub fn demand_ios(&self) -> u64 {
        self.cache.demand_ios
    }

    /// Pages read so far, by readahead or on demand.
    pub fn pages_read(&self) -> u64 {
        self.cache.pages_read
    }

    pub fn read(&mut self, index: u64, count: u64) {
        drive(
            &mut self.policy,
            &mut self.cache,
            Request::new(index, count),
        );
        for p in index..(index + count).min(self.cache.file_pages()) {
            self.cache.unused[p as usize] = false;
        }
    }

    /// The first `n` windows as (start, size, async_size).
    pub fn first_windows(&self, n: usize) -> Vec<(u64, u64, u64)> {
        self.cache
            .windows
            .iter()
            .take(n)
            .map(|w| (w.start, w.size, w.async_size))
            .collect()
    }

    pub fn prefill(&mut self, range: Range<u64>) {
        for p in range {
            self.cache.present[p as usize] = true;
        }
    }

    pub fn evict(&mut self, range: Range<u64>) {
        self.evict_unused(range);
    }

    /// Evicts the range; pages read ahead and never used leave a shadow and
    /// are reported to the policy. Returns how many such pages there were.
    pub fn evict_unused(&mut self, range: Range<u64>) -> u64 {
        let mut n = 0;
        for p in range {
            let i = p as usize;
            if self.cache.present[i] {
                self.cache.present[i] = false;
                self.cache.marked[i] = false;
                if self.cache.unused[i] {
                    self.cache.shadow_unused[i] = true;
                    self.cache.unused[i] = false;
                    self.policy.feedback(Feedback::EvictedUnused { index: p });
                    n += 1;
                }
            }
        }
        n
    }
}
