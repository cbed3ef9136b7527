//! What hints wait for: pages the policy *foresaw* (decided, but the
//! budget did not let it read) that the program then read unaided
//! ([`HINT_EVIDENCE_PAGES`](super::HINT_EVIDENCE_PAGES)), kept while no
//! credit is granted ([`Budget::foreseen_used`]).

use super::walk::Spec;
use super::{Budget, Ranges, HINT_EVIDENCE_PAGES, WASTE_PER_USE};
use crate::ra::{CacheView, Request, Shape, Window};

impl Budget {
    /// Says whether the request about to be credited continues the last
    /// one on its descriptor byte for byte ([`crate::ra::Policy::kernel_follows`]).
    ///
    /// The kernel under the hints reads ahead of such a reader itself, so
    /// the forward window the policy foresaw for it is what the kernel
    /// would have read: taking it shows nothing of the patterns ahead
    /// hints. An h5py read of a block (seed 71, case 4) took 64 pages of a
    /// forward window foreseen at its first 256 KiB read with its second,
    /// which opened the hints' credit; the next two reads, one page
    /// apart backwards, were then hinted as a backward stream, and the
    /// file ended with 2 pages hinted and none read.
    pub fn kernel_follows(&mut self, sequential: bool) {
        self.sequential = sequential;
    }

    /// The foreseen pages `req` takes, while the budget waits for
    /// evidence; granting the credit once they show it.
    pub(super) fn credit_foreseen(&mut self, req: Request) {
        if let Some(f) = &mut self.foreseen_out {
            // Forward pages a sequential read takes are the kernel's: not
            // foreseen at all, as if refunded. Taken by any other request,
            // they leave the forward set as they leave `f`, below.
            let (lo, hi) = (req.index, req.end());
            let spans: Vec<(u64, u64)> = self
                .foreseen_forward
                .0
                .range(..hi)
                .rev()
                .take_while(|(_, &e)| e > lo)
                .map(|(&a, &e)| (a.max(lo), e.min(hi)))
                .collect();
            for (a, b) in spans {
                self.foreseen_forward.take(a, b);
                if self.sequential {
                    self.foreseen -= f.take(a, b);
                }
            }
            if !f.is_empty() {
                // As charged pages earn: a short gap read through between
                // two pages the reader took counts with them (a window
                // that reads a stride whole foresees its gaps too).
                let taken = f.take_with_gap(req, self.gap_credit, self.foreseen_end);
                if taken > 0 {
                    self.foreseen_end = req.end();
                }
                self.foreseen_used += taken;
            }
            let (num, den) = WASTE_PER_USE;
            let unread = self.foreseen - self.foreseen_used;
            if self.foreseen_used >= HINT_EVIDENCE_PAGES && unread * den <= self.foreseen_used * num
            {
                // Shown: nothing more to gather.
                self.shown = true;
                self.foreseen_out = None;
                self.foreseen_forward = Ranges::default();
            }
        }
    }

    /// While the budget waits for evidence (hints): records the pages of
    /// `window` the cut at `cut` left unread, as they would have been
    /// charged (with the gaps of a stride read whole), so that a request
    /// taking one counts, and a short gap below it as it would earn.
    pub(super) fn foresee(
        &mut self,
        window: &Window,
        cut: u64,
        req: Request,
        view: &dyn CacheView,
    ) {
        let Some(mut f) = self.foreseen_out.take() else {
            return;
        };
        let spec = Spec {
            window,
            whole: self.reads_whole(window),
            req,
        };
        let (lo, hi) = if window.shape == Shape::Backward {
            (window.start, cut + 1)
        } else {
            (cut, window.end())
        };
        let forward = window.shape == Shape::Forward;
        // Consecutive pages go in as one range.
        let mut run: Option<(u64, u64)> = None;
        let mut p = lo;
        while let Some((a, b)) = spec.run_up(
            p,
            hi,
            &[&self.charged_out, &self.floor_out, &f],
            view,
            u64::MAX,
        ) {
            self.foreseen += b - a;
            if forward {
                self.foreseen_forward.add_range(a, b);
            }
            run = match run {
                Some((s, e)) if e == a => Some((s, b)),
                Some((s, e)) => {
                    f.add_range(s, e);
                    self.foreseen_now.push((s, e));
                    Some((a, b))
                }
                None => Some((a, b)),
            };
            p = b;
        }
        if let Some((a, b)) = run {
            f.add_range(a, b);
            self.foreseen_now.push((a, b));
        }
        self.foreseen_out = Some(f);
    }
}
