//! What the lock-free hit path needs: an identity word per frame, a hashed
//! table that guesses a page's frame, and an access bit per frame.
//!
//! A reader that wants page `index` of `file` looks up a frame in the hint
//! table, pins it (see [`super::pins`]), and then checks the frame's
//! identity word. The word holds the page's identity only while the page is
//! up to date, fills the whole frame and carries no lookahead marker; it
//! is written under the cache's lock when the page's read lands (or at a
//! use under the lock), after the frame's bytes, and cleared before the
//! frame is evicted or dropped. A first use of a page read ahead, taken
//! this way, is counted when the policy replays the request
//! (`Inner::note_used`). A reader that
//! finds it holds its page has a pinned frame with the page's bytes; one
//! that does not drops the pin and takes the locked path. A wrong guess
//! costs a pin and an unpin; it never returns wrong bytes.
//!
//! The access bit stands in for the eviction policy's touch, which needs
//! the lock: eviction reads and clears it as it passes the frame (the
//! `used` argument of [`super::Eviction::victim`]).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use super::FileId;

/// File ids up to this take the hit path (later ones, after 16 million
/// opens in one engine, take the locked path only).
const MAX_FILE: u64 = (1 << 24) - 1;
/// Page indexes below this take the hit path (2^40 pages: 4 PiB of 4 KiB
/// pages).
const MAX_INDEX: u64 = (1 << 40) - 1;

/// The identity word of page `index` of `file`; `None` if it does not fit
/// (such pages are always read under the lock). Never 0.
pub(crate) fn identity(file: FileId, index: u64) -> Option<u64> {
    (file <= MAX_FILE && index < MAX_INDEX).then(|| (file << 40) | (index + 1))
}

pub(crate) struct HitTable {
    /// Per frame: the identity of the page it holds while that page may be
    /// read without the lock; 0 otherwise.
    ident: Box<[AtomicU64]>,
    /// Identity hashed → frame + 1 (0: none). A guess, checked against
    /// `ident`; a newer page overwrites an older one in its slot.
    hint: Box<[AtomicU32]>,
    mask: usize,
    /// Per frame: [`ACCESSED`] (read without the lock since eviction last
    /// looked) and [`FRESH`].
    bits: Box<[AtomicU8]>,
}

/// A frame's page was read without the lock since eviction last looked.
const ACCESSED: u8 = 1;
/// A frame's page was read ahead, published when its read landed, and has
/// not been used since: the hit path's first use clears it, and only the
/// reader that clears it counts the use.
const FRESH: u8 = 2;

impl HitTable {
    pub(crate) fn new(frames: usize) -> HitTable {
        // Twice as many slots as frames keeps collisions rare.
        let slots = (frames.max(1) * 2).next_power_of_two();
        HitTable {
            ident: (0..frames).map(|_| AtomicU64::new(0)).collect(),
            hint: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            mask: slots - 1,
            bits: (0..frames).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// A file's pages go to consecutive slots from a place its id picks:
    /// a scan then writes one cache line of the table per 16 pages instead
    /// of a random line per page (a stall per page in a cold scan's
    /// profile), and one file's `2 × frames` consecutive pages never
    /// collide.
    fn slot(&self, id: u64) -> &AtomicU32 {
        let file = id >> 40;
        let page = id & MAX_INDEX;
        let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).wrapping_add(page);
        &self.hint[h as usize & self.mask]
    }

    /// The frame the table guesses holds `id`.
    pub(crate) fn guess(&self, id: u64) -> Option<u32> {
        self.slot(id).load(Ordering::Relaxed).checked_sub(1)
    }

    /// Whether `frame` holds `id` now (the caller pinned it first).
    pub(crate) fn holds(&self, frame: u32, id: u64) -> bool {
        self.ident[frame as usize].load(Ordering::SeqCst) == id
    }

    /// Caller holds the cache's lock; `frame`'s bytes are page `id`'s, up to
    /// date: readers may take it without the lock from now on.
    pub(crate) fn publish(&self, frame: u32, id: u64) {
        // Release is enough: publishing and retracting both happen under
        // the lock, so only the reader's load must see the frame's bytes
        // (written before) with the word. Only the retract and the
        // reader's pin-then-check need the sequentially consistent order.
        let word = &self.ident[frame as usize];
        if word.load(Ordering::Relaxed) != id {
            word.store(id, Ordering::Release);
        }
        let slot = self.slot(id);
        if slot.load(Ordering::Relaxed) != frame + 1 {
            slot.store(frame + 1, Ordering::Relaxed);
        }
    }

    /// Caller holds the cache's lock: `frame` may no longer be taken
    /// without it. Returns the word it held, for [`HitTable::restore`].
    /// Must come before the caller looks at the frame's pins.
    pub(crate) fn retract(&self, frame: u32) -> u64 {
        let word = &self.ident[frame as usize];
        if word.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        word.swap(0, Ordering::SeqCst)
    }

    /// Caller holds the lock: undoes a [`HitTable::retract`] of a frame
    /// that turned out pinned (it keeps its page).
    pub(crate) fn restore(&self, frame: u32, word: u64) {
        if word != 0 {
            self.ident[frame as usize].store(word, Ordering::Release);
        }
    }

    /// Notes a hit on `frame` taken without the lock; true if it was the
    /// first use of a page read ahead ([`FRESH`]), for this caller alone.
    pub(crate) fn access(&self, frame: u32) -> bool {
        let bits = &self.bits[frame as usize];
        let v = bits.load(Ordering::Relaxed);
        if v == ACCESSED {
            return false;
        }
        if v & ACCESSED == 0 {
            bits.fetch_or(ACCESSED, Ordering::Relaxed);
        }
        v & FRESH != 0 && bits.fetch_and(!FRESH, Ordering::Relaxed) & FRESH != 0
    }

    /// Whether `frame` was hit without the lock since the last call; clears
    /// the bit.
    pub(crate) fn take_access(&self, frame: u32) -> bool {
        let bits = &self.bits[frame as usize];
        bits.load(Ordering::Relaxed) & ACCESSED != 0
            && bits.fetch_and(!ACCESSED, Ordering::Relaxed) & ACCESSED != 0
    }

    /// Caller holds the lock: `frame` holds a page read ahead and not used
    /// yet, published as it landed.
    pub(crate) fn set_fresh(&self, frame: u32) {
        self.bits[frame as usize].fetch_or(FRESH, Ordering::Relaxed);
    }

    /// Whether `frame` is [`FRESH`].
    pub(crate) fn is_fresh(&self, frame: u32) -> bool {
        self.bits[frame as usize].load(Ordering::Relaxed) & FRESH != 0
    }

    /// Caller holds the lock: `frame`'s page is used (under the lock), or
    /// the frame goes; whether it was still [`FRESH`] (unused).
    pub(crate) fn clear_fresh(&self, frame: u32) -> bool {
        let bits = &self.bits[frame as usize];
        bits.load(Ordering::Relaxed) & FRESH != 0
            && bits.fetch_and(!FRESH, Ordering::Relaxed) & FRESH != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_distinct_nonzero_and_bounded() {
        assert_eq!(identity(0, 0), Some(1));
        assert_ne!(identity(1, 0), identity(0, 1));
        assert_ne!(identity(MAX_FILE, MAX_INDEX - 1), None);
        assert_eq!(identity(MAX_FILE + 1, 0), None);
        assert_eq!(identity(0, MAX_INDEX), None);
    }

    #[test]
    fn a_frame_holds_what_was_published_until_retracted() {
        let t = HitTable::new(4);
        let id = identity(3, 17).unwrap();
        assert_eq!(t.guess(id), None);
        t.publish(2, id);
        assert_eq!(t.guess(id), Some(2));
        assert!(t.holds(2, id));
        let w = t.retract(2);
        assert_eq!(w, id);
        assert!(!t.holds(2, id));
        t.restore(2, w);
        assert!(t.holds(2, id));
        assert!(!t.take_access(2));
        assert!(!t.access(2));
        assert!(t.take_access(2));
        assert!(!t.take_access(2));
        // A page read ahead: its first use is reported once, whoever
        // takes it, and eviction's bit is separate.
        t.set_fresh(2);
        assert!(t.access(2));
        assert!(!t.access(2));
        assert!(t.take_access(2));
        t.set_fresh(2);
        assert!(t.clear_fresh(2));
        assert!(!t.access(2));
    }
}
