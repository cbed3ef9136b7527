//! A set of page indexes kept as 64-page words: the page tables of caches
//! ahead does not hold (the kernel's, under `ahead run`'s hints and
//! Buffered mode's) and the hints' record of what is still unread.
//!
//! These sets see a look-up, and often an insert, for every page of every
//! request a program makes. As a hash set of indexes, each page was one
//! entry: under `ahead run`, a sqlite3 scan of 92,034 rows of 3,394 B
//! (`WITHOUT ROWID`, 105,186 `pread`s of 4 KiB, every one sent to the
//! helper) cost the helper about 3,300 instructions a request, of which
//! the set's look-ups, inserts, rehashes and the unread record's SipHash
//! were a fifth (`perf record -e instructions:u` of the preload built
//! with symbols). Neighbouring pages share a word here, so a window of
//! pages is a few probes, not one per page.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::units::IndexHasher;

/// See the module docs.
#[derive(Default, Debug, Clone)]
pub(crate) struct PageSet {
    /// Word `i` holds pages `64 i .. 64 i + 64`, bit `p % 64` for page
    /// `p`. No word is zero.
    words: HashMap<u64, u64, BuildHasherDefault<IndexHasher>>,
    /// Pages in the set.
    len: usize,
}

fn split(page: u64) -> (u64, u64) {
    (page / 64, 1 << (page % 64))
}

impl PageSet {
    /// Whether `page` is in the set.
    pub(crate) fn contains(&self, page: &u64) -> bool {
        let (w, bit) = split(*page);
        self.words.get(&w).is_some_and(|v| v & bit != 0)
    }

    /// Adds `page`; whether it was not there.
    pub(crate) fn insert(&mut self, page: u64) -> bool {
        let (w, bit) = split(page);
        let v = self.words.entry(w).or_insert(0);
        if *v & bit != 0 {
            return false;
        }
        *v |= bit;
        self.len += 1;
        true
    }

    /// Takes `page` out; whether it was there.
    pub(crate) fn remove(&mut self, page: &u64) -> bool {
        let (w, bit) = split(*page);
        let Some(v) = self.words.get_mut(&w) else {
            return false;
        };
        if *v & bit == 0 {
            return false;
        }
        *v &= !bit;
        self.len -= 1;
        if *v == 0 {
            self.words.remove(&w);
        }
        true
    }

    /// Pages in the set.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the set.
    pub(crate) fn clear(&mut self) {
        self.words.clear();
        self.len = 0;
    }
}

impl Extend<u64> for PageSet {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, pages: I) {
        for p in pages {
            self.insert(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PageSet;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Extend(u64, u64),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Pages near each other (shared words) and far apart (one a word),
        // and the edges of a word.
        let page = prop_oneof![0u64..300, (0u64..4).prop_map(|w| w * 64 + 63), any::<u64>()];
        prop_oneof![
            6 => page.clone().prop_map(Op::Insert),
            4 => page.clone().prop_map(Op::Remove),
            2 => (0u64..400, 0u64..150).prop_map(|(s, n)| Op::Extend(s, s + n)),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Every operation answers as a hash set of the same pages does, and
        /// leaves the same pages in the set.
        #[test]
        fn answers_as_a_set_of_indexes(ops in proptest::collection::vec(op(), 0..200),
                                       probes in proptest::collection::vec(0u64..400, 0..50)) {
            let mut a = PageSet::default();
            let mut b = HashSet::new();
            for op in ops {
                match op {
                    Op::Insert(p) => prop_assert_eq!(a.insert(p), b.insert(p)),
                    Op::Remove(p) => prop_assert_eq!(a.remove(&p), b.remove(&p)),
                    Op::Extend(s, e) => {
                        a.extend(s..e);
                        b.extend(s..e);
                    }
                    Op::Clear => {
                        a.clear();
                        b.clear();
                    }
                }
                prop_assert_eq!(a.len(), b.len());
                prop_assert_eq!(a.is_empty(), b.is_empty());
            }
            for p in probes.iter().chain(b.iter()) {
                prop_assert_eq!(a.contains(p), b.contains(p), "page {}", p);
            }
            // No empty word is kept: a set emptied page by page holds none.
            let pages: Vec<u64> = b.iter().copied().collect();
            for p in pages {
                prop_assert!(a.remove(&p));
            }
            prop_assert!(a.is_empty());
            prop_assert!(a.words.is_empty());
        }
    }

    #[test]
    fn the_last_page_of_a_word_and_the_first_of_the_next_are_apart() {
        let mut s = PageSet::default();
        assert!(s.insert(63));
        assert!(!s.contains(&64));
        assert!(s.insert(64));
        assert!(s.insert(u64::MAX));
        assert!(!s.contains(&(u64::MAX - 1)));
        assert_eq!(s.len(), 3);
        assert!(s.remove(&63));
        assert!(!s.remove(&63));
        assert!(s.contains(&64) && s.contains(&u64::MAX));
    }
}
