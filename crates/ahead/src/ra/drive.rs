//! [`drive`]: how an engine serves a request through a policy, and the
//! page table it needs for that ([`PageTable`]).

use super::{CacheView, Calls, DemandFill, Feedback, Policy, Request, Trigger, Window, MAX_PAGES};

/// What a [`PageTable`] knows about one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Not cached and not being read.
    Absent,
    /// Cached or being read.
    Present {
        /// The page carries the lookahead marker.
        marked: bool,
        /// The page is still being read by readahead, so the reader will wait
        /// for a prefetch that came too late.
        late: bool,
    },
}

/// An engine's cache as [`drive`] needs it.
pub trait PageTable: CacheView {
    /// The state of page `index`.
    fn lookup(&self, index: u64) -> Lookup;
    /// Clears the marker of page `index` (it fires once).
    fn clear_marker(&mut self, index: u64);
    /// Reads the window's missing pages as readahead, and marks its marker
    /// page if that page is read now. Afterwards every page of the window is
    /// present.
    fn submit_readahead(&mut self, window: &Window);
    /// Reads `count` missing pages from `index` for the reader, in one I/O.
    fn submit_demand(&mut self, index: u64, count: u64);
}

/// Serves one request: consults `policy` at the request's triggers, submits
/// its windows to `table`, then reads on demand whatever the request still
/// lacks, in one I/O per contiguous run (or page by page for a policy that
/// asks for [`DemandFill::PageAtATime`]).
///
/// After `drive` returns, every page of the request (cut to the file) is
/// present in `table`, cached or in flight.
pub fn drive(policy: &mut dyn Policy, table: &mut dyn PageTable, req: Request) {
    let file_pages = table.file_pages().min(MAX_PAGES);
    if req.count == 0 || req.index >= file_pages {
        return;
    }
    let req = Request::new(req.index, req.count.min(file_pages - req.index));
    policy.begin(req);
    let mut late_reported = false;
    match policy.calls() {
        Calls::EveryRequest => {
            // Like 2.6.20's do_generic_mapping_read, call again each time the
            // reader reaches the end of what the previous call covered (at
            // most the maximum window).
            let step = policy.max_pages().max(1);
            let mut i = req.index;
            while i < req.end() {
                let rest = Request::new(i, (req.end() - i).min(step));
                decide(policy, table, rest, Trigger::Request);
                i += rest.count;
            }
            for i in req.index..req.end() {
                if let Lookup::Present { late: true, .. } = table.lookup(i) {
                    policy.feedback(Feedback::LateHit { index: i });
                    break;
                }
            }
        }
        Calls::OnDemand => {
            let mut i = req.index;
            while i < req.end() {
                let rest = Request::new(i, req.end() - i);
                match table.lookup(i) {
                    Lookup::Absent => {
                        decide(policy, table, rest, Trigger::Miss);
                        // Whatever the window left out, the request still
                        // needs: read that run now, in one I/O.
                        let run = absent_run(table, i, req.end());
                        if run > 0 {
                            table.submit_demand(i, run);
                        }
                    }
                    Lookup::Present { marked, late } => {
                        if late && !late_reported {
                            late_reported = true;
                            policy.feedback(Feedback::LateHit { index: i });
                        }
                        if marked {
                            table.clear_marker(i);
                            decide(policy, table, rest, Trigger::MarkerHit);
                        }
                    }
                }
                i += 1;
            }
        }
    }
    // Pages still missing (only possible for EveryRequest policies).
    let mut i = req.index;
    while i < req.end() {
        let run = absent_run(table, i, req.end());
        if run == 0 {
            i += 1;
            continue;
        }
        match policy.demand_fill() {
            DemandFill::WholeRun => table.submit_demand(i, run),
            DemandFill::PageAtATime => {
                for p in i..i + run {
                    policy.feedback(Feedback::DemandMiss { index: p });
                    table.submit_demand(p, 1);
                }
            }
        }
        i += run;
    }
    policy.finish(req);
}

/// Asks `policy` at `trigger` and submits its window, then any further
/// windows it has for other streams ([`Policy::more`]).
fn decide(policy: &mut dyn Policy, table: &mut dyn PageTable, req: Request, trigger: Trigger) {
    if let Some(w) = policy.decide(req, trigger, &*table) {
        submit(table, w);
    }
    while let Some(w) = policy.more(&*table) {
        submit(table, w);
    }
}

fn submit(table: &mut dyn PageTable, window: Window) {
    if let Some(w) = window.clip(table.file_pages().min(MAX_PAGES)) {
        table.submit_readahead(&w);
    }
}

fn absent_run(table: &dyn PageTable, from: u64, end: u64) -> u64 {
    (from..end)
        .take_while(|&i| table.lookup(i) == Lookup::Absent)
        .count() as u64
}
