//! Pin counts of frames: a pinned frame is lent to a reader and is neither
//! evicted nor reused until its last pin drops.
//!
//! Pins are taken under the cache's lock (so that eviction, which looks at
//! the counts under the same lock, cannot race with a pin) and dropped
//! without it (a read would otherwise take the lock once more). A frame
//! whose page is dropped while pinned — its file closed or found changed —
//! is marked an orphan, and whichever of the drop and the last unpin comes
//! second frees it, exactly once. The protocol is generic over the atomic
//! so that `model` can check it under shuttle's scheduler.

use std::sync::atomic::{AtomicU32, Ordering};

/// Set in a frame's pin count when its page was dropped while the frame was
/// pinned: the last unpin frees the frame.
const ORPHAN: u32 = 1 << 31;

/// The atomic operations the protocol needs.
pub(crate) trait PinCount {
    fn new() -> Self;
    fn fetch_add(&self, v: u32) -> u32;
    fn fetch_sub(&self, v: u32) -> u32;
    fn fetch_or(&self, v: u32) -> u32;
    fn load(&self) -> u32;
    fn store(&self, v: u32);
}

/// Implements [`PinCount`] for an atomic type with std's method names
/// (std's own, and shuttle's in the model).
macro_rules! impl_pin_count {
    ($atomic:ty, $ordering:path) => {
        impl $crate::cache::pins::PinCount for $atomic {
            fn new() -> Self {
                <$atomic>::new(0)
            }
            fn fetch_add(&self, v: u32) -> u32 {
                <$atomic>::fetch_add(self, v, <$ordering>::AcqRel)
            }
            fn fetch_sub(&self, v: u32) -> u32 {
                <$atomic>::fetch_sub(self, v, <$ordering>::AcqRel)
            }
            fn fetch_or(&self, v: u32) -> u32 {
                <$atomic>::fetch_or(self, v, <$ordering>::AcqRel)
            }
            fn load(&self) -> u32 {
                <$atomic>::load(self, <$ordering>::Acquire)
            }
            fn store(&self, v: u32) {
                <$atomic>::store(self, v, <$ordering>::Release)
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

    /// Pins `frame`. The caller holds the cache's lock and has seen the
    /// frame's page up to date.
    pub(crate) fn pin(&self, frame: u32) {
        self.0[frame as usize].fetch_add(1);
    }

    /// Drops one pin of `frame`; true if that was the last pin of an orphan:
    /// the caller must free the frame.
    pub(crate) fn unpin(&self, frame: u32) -> bool {
        let c = &self.0[frame as usize];
        if c.fetch_sub(1) == ORPHAN | 1 {
            c.store(0);
            true
        } else {
            false
        }
    }

    /// The frame's page is gone (caller holds the lock): true if the frame
    /// is free now; otherwise its last unpin frees it.
    pub(crate) fn orphan(&self, frame: u32) -> bool {
        let c = &self.0[frame as usize];
        if c.fetch_or(ORPHAN) == 0 {
            c.store(0);
            true
        } else {
            false
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
