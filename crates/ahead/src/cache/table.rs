//! One file's page table: page index → [`Slot`], in chunks of
//! [`CHUNK_PAGES`] neighbouring pages.
//!
//! A hash entry per page put one cache miss on every look-up: a cold 4 KiB
//! sequential read through Direct mode spent 10% of its CPU in
//! `Planner::slot` and 7% more in eviction's page-table updates (`perf`,
//! issue 36), across a table of 65,536 pages and as many shadows. Readers,
//! readahead and eviction all walk neighbouring pages, so a chunk holds 16:
//! one hash probe finds a chunk that the next 15 look-ups find again in the
//! CPU's cache. The cost is memory where pages are scattered one to a
//! chunk: a chunk is 16 slots of 12 bytes, so a table of single pages is
//! at most about 16 times the size of one with an entry per page (for the
//! default 256 MiB budget, 65,536 frames and as many shadows: under 30 MB
//! at worst, against about 4 MB).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::Slot;
use crate::units::IndexHasher;

/// Pages per chunk.
const CHUNK_PAGES: u64 = 16;

#[derive(Default)]
struct Chunk {
    slots: [Option<Slot>; CHUNK_PAGES as usize],
    /// Slots that are `Some`.
    live: u8,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct PageTable {
    chunks: HashMap<u64, Chunk, BuildHasherDefault<IndexHasher>>,
}

fn split(index: u64) -> (u64, usize) {
    (index / CHUNK_PAGES, (index % CHUNK_PAGES) as usize)
}

impl PageTable {
    /// Page `index`'s slot.
    pub(crate) fn get(&self, index: u64) -> Option<&Slot> {
        let (c, i) = split(index);
        self.chunks.get(&c)?.slots[i].as_ref()
    }

    /// Page `index`'s slot, to change in place.
    pub(crate) fn get_mut(&mut self, index: u64) -> Option<&mut Slot> {
        let (c, i) = split(index);
        self.chunks.get_mut(&c)?.slots[i].as_mut()
    }

    /// The first page of `[from, to)` whose slot `is` judges otherwise
    /// than page `from`'s, or `to`: one hash probe a chunk, not a page.
    pub(crate) fn run_up(&self, from: u64, to: u64, is: impl Fn(Option<&Slot>) -> bool) -> u64 {
        if from >= to {
            return from;
        }
        let here = is(self.get(from));
        let mut p = from;
        while p < to {
            let (c, i) = split(p);
            let end = ((c + 1) * CHUNK_PAGES).min(to);
            let chunk = self.chunks.get(&c);
            for (n, q) in (p..end).enumerate() {
                if is(chunk.and_then(|ch| ch.slots[i + n].as_ref())) != here {
                    return q;
                }
            }
            p = end;
        }
        to
    }

    /// The lowest page `q` of `[lo, from]` such that `is` judges every
    /// slot of `[q, from]` as page `from`'s; one hash probe a chunk.
    pub(crate) fn run_down(&self, lo: u64, from: u64, is: impl Fn(Option<&Slot>) -> bool) -> u64 {
        if from < lo {
            return from;
        }
        let here = is(self.get(from));
        let mut p = from;
        loop {
            let (c, i) = split(p);
            let start = (c * CHUNK_PAGES).max(lo);
            let chunk = self.chunks.get(&c);
            for q in (start..=p).rev() {
                let at = i - (p - q) as usize;
                if is(chunk.and_then(|ch| ch.slots[at].as_ref())) != here {
                    return q + 1;
                }
            }
            if start == lo {
                return lo;
            }
            p = start - 1;
        }
    }

    /// Sets page `index`'s slot; returns the one it replaces.
    pub(crate) fn insert(&mut self, index: u64, slot: Slot) -> Option<Slot> {
        let (c, i) = split(index);
        let chunk = self.chunks.entry(c).or_default();
        let old = chunk.slots[i].replace(slot);
        if old.is_none() {
            chunk.live += 1;
        }
        old
    }

    /// Forgets page `index`; returns its slot.
    pub(crate) fn remove(&mut self, index: u64) -> Option<Slot> {
        let (c, i) = split(index);
        let chunk = self.chunks.get_mut(&c)?;
        let old = chunk.slots[i].take();
        if old.is_some() {
            chunk.live -= 1;
            if chunk.live == 0 {
                self.chunks.remove(&c);
            }
        }
        old
    }

    /// Forgets page `index` if `forget` says so of its slot (one probe
    /// where a look and a removal take two); returns whether it did.
    pub(crate) fn remove_if(&mut self, index: u64, forget: impl Fn(&Slot) -> bool) -> bool {
        let (c, i) = split(index);
        let Some(chunk) = self.chunks.get_mut(&c) else {
            return false;
        };
        if !chunk.slots[i].as_ref().is_some_and(forget) {
            return false;
        }
        chunk.slots[i] = None;
        chunk.live -= 1;
        if chunk.live == 0 {
            self.chunks.remove(&c);
        }
        true
    }

    /// Keeps the pages for which `keep` says so.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, &mut Slot) -> bool) {
        self.chunks.retain(|&c, chunk| {
            for (i, s) in chunk.slots.iter_mut().enumerate() {
                if let Some(slot) = s {
                    if !keep(c * CHUNK_PAGES + i as u64, slot) {
                        *s = None;
                        chunk.live -= 1;
                    }
                }
            }
            chunk.live > 0
        });
    }

    /// Every page and its slot, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Slot)> {
        self.chunks.iter().flat_map(|(&c, chunk)| {
            chunk
                .slots
                .iter()
                .enumerate()
                .filter_map(move |(i, s)| Some((c * CHUNK_PAGES + i as u64, s.as_ref()?)))
        })
    }

    /// Pages in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.chunks.values().map(|c| c.live as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot(n: u32) -> Slot {
        Slot::Failed { errno: n as i32 }
    }

    proptest! {
        /// The table answers every look-up as a map with an entry per page
        /// would, through any mix of inserts, removals and retains.
        #[test]
        fn it_behaves_as_a_map_of_pages(
            ops in proptest::collection::vec((0u8..5, 0u64..200, 0u32..5), 0..400)
        ) {
            let mut t = PageTable::default();
            let mut m = std::collections::HashMap::new();
            for (op, index, v) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(t.insert(index, slot(v)), m.insert(index, slot(v))),
                    2 => prop_assert_eq!(t.remove(index), m.remove(&index)),
                    3 => {
                        let want = m.get(&index) == Some(&slot(v));
                        if want {
                            m.remove(&index);
                        }
                        prop_assert_eq!(t.remove_if(index, |s| *s == slot(v)), want);
                    }
                    _ => {
                        t.retain(|i, s| !(i + v as u64).is_multiple_of(3) || *s == slot(0));
                        m.retain(|&i, s| !(i + v as u64).is_multiple_of(3) || *s == slot(0));
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                prop_assert_eq!(t.get(index).copied(), m.get(&index).copied());
            }
            let mut all: Vec<_> = t.iter().map(|(i, s)| (i, *s)).collect();
            all.sort_by_key(|p| p.0);
            let mut want: Vec<_> = m.into_iter().collect();
            want.sort_by_key(|p| p.0);
            prop_assert_eq!(all, want);
            // No chunk is kept empty.
            prop_assert!(t.chunks.values().all(|c| c.live > 0));
        }
    }

    proptest! {
        /// A run up or down ends where a page-by-page look would.
        #[test]
        fn runs_end_where_the_pages_change(
            pages in proptest::collection::vec(0u64..100, 0..60),
            from in 0u64..110,
            bound in 0u64..110,
        ) {
            let mut t = PageTable::default();
            for &p in &pages {
                t.insert(p, slot((p % 2) as u32));
            }
            // Present: a slot holding 0 (even pages).
            let is = |s: Option<&Slot>| s == Some(&slot(0));
            let at = |p: u64| is(t.get(p));
            let up = (from + 1..bound).find(|&p| at(p) != at(from)).unwrap_or(bound.max(from));
            prop_assert_eq!(t.run_up(from, bound, is), if from >= bound { from } else { up });
            let down = if from < bound {
                from
            } else {
                (bound..from).rev().find(|&p| at(p) != at(from)).map_or(bound, |p| p + 1)
            };
            prop_assert_eq!(t.run_down(bound, from, is), down);
        }
    }

    #[test]
    fn a_slot_is_twelve_bytes() {
        // The module's memory figures assume it.
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 12);
    }
}
