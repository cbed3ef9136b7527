//! Pin counts of frames: a pinned frame is lent to a reader and is neither
//! evicted nor reused until its last pin drops.
//!
//! Pins are taken in two ways:
//!
//! * under the cache's lock, by a reader that has seen the frame's page up
//!   to date there (eviction looks at the counts under the same lock, so it
//!   cannot race);
//! * without any lock, by the hit path ([`super::PageCache::pin_hit`]): the
//!   reader pins a frame it only guesses holds its page, then checks the
//!   frame's identity word. Eviction clears that word *before* it looks at
//!   the pin count, and the reader pins *before* it reads the word (both
//!   sequentially consistent), so at least one of them sees the other: the
//!   reader backs off, or eviction skips the frame. Such a guess may pin a
//!   frame that is free or being read, for a moment; nothing here assumes a
//!   free frame's count is zero.
//!
//! Pins are dropped without the lock. A frame whose page is dropped while
//! pinned — its file closed or found changed — is marked an orphan, and
//! whichever of the drop and the last unpin comes second frees it, exactly
//! once. A pin is one `fetch_add`; an unpin or an orphaning is one
//! compare-and-swap from the count it read, so no step ever overwrites a
//! pin taken in between. The protocol is generic
//! over the atomic so that `model` can check it under shuttle's scheduler.

use std::sync::atomic::{AtomicU32, Ordering};

/// Set in a frame's pin count when its page was dropped while the frame was
/// pinned: the last unpin frees the frame.
const ORPHAN: u32 = 1 << 31;

/// The atomic operations the protocol needs.
pub(crate) trait PinCount {
    fn new() -> Self;
    fn fetch_add(&self, v: u32) -> u32;
    fn compare_exchange(&self, current: u32, new: u32) -> Result<u32, u32>;
    fn load(&self) -> u32;
}

/// Implements [`PinCount`] for an atomic type with std's method names
/// (std's own, and shuttle's in the model).
macro_rules! impl_pin_count {
    ($atomic:ty, $ordering:path) => {
        impl $crate::cache::pins::PinCount for $atomic {
            fn new() -> Self {
                <$atomic>::new(0)
            }
            // Sequentially consistent throughout: the hit path's pin and
            // eviction's look at the count are the two halves of a
            // store-then-load handshake (see the module docs).
            fn fetch_add(&self, v: u32) -> u32 {
                <$atomic>::fetch_add(self, v, <$ordering>::SeqCst)
            }
            fn compare_exchange(&self, current: u32, new: u32) -> Result<u32, u32> {
                <$atomic>::compare_exchange(
                    self,
                    current,
                    new,
                    <$ordering>::SeqCst,
                    <$ordering>::SeqCst,
                )
            }
            fn load(&self) -> u32 {
                <$atomic>::load(self, <$ordering>::SeqCst)
            }
        }
    };
}
#[cfg(test)]
pub(crate) use impl_pin_count;

impl_pin_count!(AtomicU32, Ordering);

/// One pin count per frame.
pub(crate) struct Pins<A: PinCount = AtomicU32>(Box<[A]>);

impl<A: PinCount> Pins<A> {
    pub(crate) fn new(frames: usize) -> Self {
        Pins((0..frames).map(|_| A::new()).collect())
    }

    /// Pins `frame`: under the cache's lock with the frame's page seen up
    /// to date, or as the hit path's guess (then checked, see the module
    /// docs).
    pub(crate) fn pin(&self, frame: u32) {
        self.0[frame as usize].fetch_add(1);
    }

    /// Drops one pin of `frame`; true if that was the last pin of an orphan:
    /// the caller must free the frame.
    pub(crate) fn unpin(&self, frame: u32) -> bool {
        let c = &self.0[frame as usize];
        let mut v = c.load();
        loop {
            // The last pin of an orphan takes the count straight to zero,
            // in the same step that drops the pin.
            let last = v == ORPHAN | 1;
            let new = if last { 0 } else { v.wrapping_sub(1) };
            match c.compare_exchange(v, new) {
                Ok(_) => return last,
                Err(now) => v = now,
            }
        }
    }

    /// The frame's page is gone (caller holds the lock): true if the frame
    /// is free now; otherwise its last unpin frees it.
    pub(crate) fn orphan(&self, frame: u32) -> bool {
        let c = &self.0[frame as usize];
        let mut v = c.load();
        loop {
            if v & !ORPHAN == 0 {
                return true;
            }
            match c.compare_exchange(v, v | ORPHAN) {
                Ok(_) => return false,
                Err(now) => v = now,
            }
        }
    }

    /// Whether `frame` is pinned now.
    pub(crate) fn is_pinned(&self, frame: u32) -> bool {
        self.0[frame as usize].load() & !ORPHAN != 0
    }

    /// Frames pinned now.
    pub(crate) fn count(&self) -> usize {
        (0..self.0.len() as u32)
            .filter(|&f| self.is_pinned(f))
            .count()
    }
}
