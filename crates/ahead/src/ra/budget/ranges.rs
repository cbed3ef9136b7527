//! [`Ranges`]: the budget's sets of pages, as ranges.

use std::collections::BTreeMap;

use super::MAX_RANGES;
use crate::ra::Request;

/// Pages as disjoint, non-adjacent `start → end` ranges.
#[derive(Clone, Debug, Default)]
pub(super) struct Ranges(pub(super) BTreeMap<u64, u64>);

impl Ranges {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether page `p` is in a range.
    #[cfg(test)]
    pub(super) fn has(&self, p: u64) -> bool {
        self.holding(p).is_some()
    }

    /// The range that holds page `p`, as `(start, end)`.
    pub(super) fn holding(&self, p: u64) -> Option<(u64, u64)> {
        self.0
            .range(..=p)
            .next_back()
            .filter(|(_, &end)| p < end)
            .map(|(&start, &end)| (start, end))
    }

    /// The start of the first range starting at or above `p`.
    pub(super) fn first_from(&self, p: u64) -> Option<u64> {
        self.0.range(p..).next().map(|(&s, _)| s)
    }

    /// The end of the last range starting at or below `p`.
    pub(super) fn last_end_to(&self, p: u64) -> Option<u64> {
        self.0.range(..=p).next_back().map(|(_, &e)| e)
    }

    /// Adds page `p` (not in a range), merged with its neighbours. Past
    /// [`MAX_RANGES`] the range farthest from `p` is dropped (the reader's
    /// next pages lie near what it reads now, below it for a backward
    /// reader).
    #[cfg(test)]
    pub(super) fn add(&mut self, p: u64) {
        self.add_range(p, p + 1);
    }

    /// Adds pages `[a, b)` (none of them in a range), merged with their
    /// neighbours; past [`MAX_RANGES`] as [`Ranges::add`] does, `a` taken
    /// for where the reader is.
    pub(super) fn add_range(&mut self, a: u64, b: u64) {
        let mut start = a;
        let mut end = b;
        if let Some((&s, &e)) = self.0.range(..a).next_back() {
            if e == a {
                start = s;
            }
        }
        if let Some(e) = self.0.remove(&b) {
            end = e;
        }
        self.0.insert(start, end);
        if self.0.len() > MAX_RANGES {
            let low = self.0.first_key_value().map_or(0, |(&s, _)| a - s.min(a));
            let high = self.0.last_key_value().map_or(0, |(&s, _)| s.max(a) - a);
            if low >= high {
                self.0.pop_first();
            } else {
                self.0.pop_last();
            }
        }
    }

    /// Removes `[a, b)`; returns how many pages were there (none where
    /// `a >= b`).
    pub(super) fn take(&mut self, a: u64, b: u64) -> u64 {
        let mut taken = 0;
        // The last range starting before `b`, while it overlaps [a, b).
        while let Some((&s, &e)) = self.0.range(..b).next_back() {
            if e <= a || a >= b {
                break;
            }
            self.0.remove(&s);
            taken += e.min(b) - s.max(a);
            if e > b {
                self.0.insert(b, e);
            }
            if s < a {
                self.0.insert(s, a);
                break;
            }
        }
        taken
    }

    /// Takes `req`'s pages and, if it took any, the gap of at most `gap`
    /// pages between `after` (where the last request that took pages
    /// ended) and `req`: pages read through between two that the reader
    /// took.
    pub(super) fn take_with_gap(&mut self, req: Request, gap: u64, after: u64) -> u64 {
        let mut taken = self.take(req.index, req.end());
        if taken > 0 && after < req.index && req.index - after <= gap {
            taken += self.take(after, req.index);
        }
        taken
    }
}
