//! [`Budgeted`]: a policy held to its file's [`Budget`].

use super::Budget;
use std::collections::VecDeque;

use crate::ra::ondemand::OnDemand;
use crate::ra::{CacheView, Feedback, Policy, RaConfig, Request, Trigger, Window};

/// A policy held to a [`Budget`]: every window it decides is admitted by
/// the file's budget before the engine reads it. [`crate::ra::new_policy`]
/// wraps ahead's policy in it; `ondemand` and `legacy` are the baselines
/// and are not wrapped.
pub struct Budgeted<P> {
    inner: P,
    /// The kernel's `ondemand`, consulted at every decision for the floor;
    /// none for hints ([`RaConfig::hints`]), whose floor is the kernel
    /// under them.
    kernel: Option<OnDemand>,
    budget: Budget,
    /// The marker pages of the kernel's windows read so far, the latest
    /// [`FLOOR_MARKS`] of them: the pages the kernel flags
    /// `PG_readahead`. A hit on any of them is the kernel's to answer, as
    /// in the kernel, and not only on its last window's marker (the one
    /// its state remembers, [`OnDemand::marks`]).
    floor_marks: VecDeque<u64>,
}

/// How many of the kernel's marker pages a [`Budgeted`] remembers: 1,024
/// windows (8 KiB). Markers are forgotten oldest first, and a forgotten
/// one only costs the ramp the kernel's lookahead-clueless case would
/// have made there. Without them, an aged sqlite3 table read in key order
/// (its leaves all over the file) went 1.11-1.32x `ondemand`'s simulated
/// time (docs/never-worse.md, seed 80); with them, 1.00-1.02x.
const FLOOR_MARKS: usize = 1024;

impl<P: Policy> Budgeted<P> {
    /// `inner` held to a fresh budget, over the floor of an `ondemand`
    /// configured alike.
    pub fn new(inner: P, config: &RaConfig) -> Budgeted<P> {
        Budgeted {
            inner,
            kernel: (!config.hints).then(|| OnDemand::new(*config)),
            budget: Budget::new(config),
            floor_marks: VecDeque::new(),
        }
    }

    /// The budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// `window` as the budget admits it. Before a file's evidence (hints)
    /// the policy is not told that its windows were refused: it goes on as
    /// if they had been read, so that what it foresees is its pattern's,
    /// and its own records judge them as they would judge hints.
    fn admit(
        &mut self,
        window: Option<Window>,
        floor: Option<Window>,
        req: Request,
        view: &dyn CacheView,
    ) -> Option<Window> {
        let gathering = !self.budget.shown;
        let admitted = self.budget.admit(window, floor, req, view);
        if let (Some(w), false) = (window, gathering) {
            self.inner.admitted(w, admitted);
        }
        admitted
    }
}

impl<P: Policy> Policy for Budgeted<P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn max_pages(&self) -> u64 {
        self.inner.max_pages()
    }
    fn read_through_ratio(&self) -> u64 {
        self.inner.read_through_ratio()
    }
    fn set_max_pages(&mut self, pages: u64) {
        self.inner.set_max_pages(pages);
        if let Some(k) = &mut self.kernel {
            k.set_max_pages(pages);
        }
    }
    fn calls(&self) -> crate::ra::Calls {
        self.inner.calls()
    }
    fn demand_fill(&self) -> crate::ra::DemandFill {
        self.inner.demand_fill()
    }
    fn begin(&mut self, req: Request) {
        if let Some(k) = &mut self.kernel {
            k.begin(req);
        }
        self.inner.begin(req);
        // After the policy's own: whether the request continued one of
        // its streams decides whether foreseen pages it takes are evidence.
        let shows = self.inner.continues_stream();
        self.budget.credit_as(req, shows);
    }
    fn continues_stream(&self) -> bool {
        self.inner.continues_stream()
    }
    fn decide(&mut self, req: Request, trigger: Trigger, view: &dyn CacheView) -> Option<Window> {
        // The kernel would find only its own markers.
        let marks = &mut self.floor_marks;
        let floor = self.kernel.as_mut().and_then(|k| match trigger {
            Trigger::MarkerHit if !k.marks(req.index) && !take(marks, req.index) => None,
            _ => k.decide(req, trigger, view),
        });
        let window = self.inner.decide(req, trigger, view);
        let admitted = self.admit(window, floor, req, view);
        if let (Some(k), Some(f)) = (&mut self.kernel, floor) {
            k.admitted(f, admitted);
            // The kernel's window was read (itself, or the policy's same
            // window): its marker is the kernel's.
            // Local files only: on a far store (an object) the kernel is
            // no reference, and with these ramps and the context
            // window's marker random 64 KiB reads of an object fetched
            // 1.20 of the bytes asked, where they had fetched 0.75
            // (`bench --quick`).
            let local = crate::ra::ahead::latency_floor(view) == 0;
            if let (true, true, Some(m)) = (local, admitted == Some(f), f.marker_page()) {
                if self.floor_marks.len() == FLOOR_MARKS {
                    self.floor_marks.pop_front();
                }
                self.floor_marks.push_back(m);
            }
        }
        admitted
    }
    fn more(&mut self, view: &dyn CacheView) -> Option<Window> {
        // Every page ahead of the reader; one refused does not end the rest.
        loop {
            let w = self.inner.more(view)?;
            if let Some(a) = self.admit(Some(w), None, Request::new(w.start, 0), view) {
                return Some(a);
            }
        }
    }
    fn finish(&mut self, req: Request) {
        if let Some(k) = &mut self.kernel {
            k.finish(req);
        }
        self.inner.finish(req);
    }
    fn left_to_kernel(&mut self, window: Window) {
        self.budget.refund(window);
        self.inner.left_to_kernel(window);
    }
    fn feedback(&mut self, event: Feedback) {
        if let Feedback::EvictedUnused { index } = event {
            self.budget.forget(index);
        }
        if let Some(k) = &mut self.kernel {
            k.feedback(event);
        }
        self.inner.feedback(event);
    }
    fn outstanding(&self) -> bool {
        self.budget.outstanding() || self.inner.outstanding()
    }
    fn describe(&self) -> Vec<String> {
        let mut out = self.inner.describe();
        let b = &self.budget;
        out.push(format!(
            "speculation budget: {} pages read ahead beyond the kernel's rules ({} on them), {} of them used, {} foreseen and read unaided, {} left",
            b.charged(),
            b.floor(),
            b.used(),
            b.foreseen_used(),
            b.left()
        ));
        out
    }
}

/// Whether `index` is in `marks`, taking it out.
fn take(marks: &mut VecDeque<u64>, index: u64) -> bool {
    match marks.iter().rposition(|&m| m == index) {
        Some(i) => {
            marks.remove(i);
            true
        }
        None => false,
    }
}
