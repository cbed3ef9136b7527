//! The cache's free frames, handed out lowest first.
//!
//! Which free frame a read gets decides whether it can use the ring's
//! registered buffers: a read's pages go to the device as one fixed read
//! only if their frames lie in one registered region of the arena
//! (`io::uring`, 8 MiB regions), and as one iovec only if they are
//! consecutive. A stack of frames handed them out in the order they were
//! freed: after a file of 150 MiB was closed, its frames came back in the
//! order of its page table and every 256 KiB read of the next file spanned
//! several regions, so each went out as a plain `READV` whose pages the
//! kernel pinned one by one (`bio_iov_iter_get_pages`, half of the kernel's
//! instructions in a second pass over a 1 GiB file; not one fixed read in
//! 4,097). Lowest first, a run of free frames comes back as the run it was,
//! and the arena's low frames, already touched, are used again before an
//! untouched frame is.

/// A set of frames `0..frames`, popped lowest first: a bit per frame, and
/// a bit per word of them saying whether that word has a free frame, so
/// that finding the lowest looks at one summary bit per 64 words (a cache
/// of 256 MiB has 16 summary words) however the free frames are spread.
pub(crate) struct FreeFrames {
    words: Vec<u64>,
    /// Bit `w` set: `words[w]` is not zero.
    summary: Vec<u64>,
    len: usize,
    /// No summary word below this one has a bit set.
    low: usize,
}

impl FreeFrames {
    /// Every frame of `0..frames` free.
    pub(crate) fn all(frames: usize) -> FreeFrames {
        let words = ones(frames);
        let summary = ones(words.len());
        FreeFrames {
            words,
            summary,
            len: frames,
            low: 0,
        }
    }

    /// How many frames are free.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Frees `frame`. A frame out of range, or already free, changes
    /// nothing (and is a bug, caught in debug builds).
    pub(crate) fn push(&mut self, frame: u32) {
        let (w, bit) = (frame as usize / 64, 1u64 << (frame % 64));
        let Some(word) = self.words.get_mut(w) else {
            debug_assert!(false, "frame {frame} out of range");
            return;
        };
        if *word & bit != 0 {
            debug_assert!(false, "frame {frame} freed twice");
            return;
        }
        *word |= bit;
        self.summary[w / 64] |= 1 << (w % 64);
        self.len += 1;
        self.low = self.low.min(w / 64);
    }

    /// Takes the lowest free frame.
    pub(crate) fn pop(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        while let Some(&sum) = self.summary.get(self.low) {
            if sum == 0 {
                self.low += 1;
                continue;
            }
            let w = self.low * 64 + sum.trailing_zeros() as usize;
            let word = &mut self.words[w];
            let bit = word.trailing_zeros();
            *word &= *word - 1;
            if *word == 0 {
                self.summary[self.low] &= sum - 1;
            }
            self.len -= 1;
            return Some((w * 64) as u32 + bit);
        }
        debug_assert!(false, "{} frames counted free, none found", self.len);
        None
    }
}

/// `n` bits set, from the lowest, in words of 64.
fn ones(n: usize) -> Vec<u64> {
    let mut v = vec![u64::MAX; n.div_ceil(64)];
    if !n.is_multiple_of(64) {
        if let Some(last) = v.last_mut() {
            *last = (1u64 << (n % 64)) - 1;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn frames_come_back_lowest_first_whatever_order_they_were_freed_in() {
        let mut f = FreeFrames::all(200);
        let taken: Vec<u32> = (0..150).map(|_| f.pop().unwrap()).collect();
        assert_eq!(taken, (0..150).collect::<Vec<_>>());
        for x in [149, 3, 77, 4, 5, 76, 2] {
            f.push(x);
        }
        let again: Vec<u32> = (0..8).map(|_| f.pop().unwrap()).collect();
        assert_eq!(again, vec![2, 3, 4, 5, 76, 77, 149, 150]);

        // Across the summary's words: 20,000 frames, all taken, a few
        // given back out of order.
        let mut f = FreeFrames::all(20_000);
        while f.pop().is_some() {}
        assert_eq!(f.len(), 0);
        let back = [19_999, 4_095, 4_096, 0, 12_345, 8_191, 63, 64];
        for x in back {
            f.push(x);
        }
        let mut want = back.to_vec();
        want.sort();
        let got: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
        assert_eq!(got, want);
    }

    proptest! {
        /// Against a sorted set: the same frames free, the lowest popped.
        #[test]
        fn behaves_as_a_sorted_set(
            frames in 1usize..9000,
            taken in 0usize..9000,
            ops in proptest::collection::vec((any::<bool>(), 0u32..9000), 0..600),
        ) {
            let mut f = FreeFrames::all(frames);
            let mut model: BTreeSet<u32> = (0..frames as u32).collect();
            // Frames taken first, so that frees land below and above the
            // lowest free one, across the summary's words (4,096 frames).
            for _ in 0..taken.min(frames) {
                prop_assert_eq!(f.pop(), model.pop_first());
            }
            for (pop, x) in ops {
                if pop {
                    prop_assert_eq!(f.pop(), model.pop_first());
                } else if (x as usize) < frames && !model.contains(&x) {
                    f.push(x);
                    model.insert(x);
                }
                prop_assert_eq!(f.len(), model.len());
            }
            while let Some(x) = model.pop_first() {
                prop_assert_eq!(f.pop(), Some(x));
            }
            prop_assert_eq!(f.pop(), None);
        }
    }
}
