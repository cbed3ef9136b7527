//! Eviction policies: which cached page to drop when the budget is full.
//!
//! A policy sees frames (slots of the cache's arena), not pages: a frame is
//! inserted when its page becomes up to date, touched on every hit, removed
//! when freed. `victim` proposes frames until the cache accepts one (the
//! cache refuses pinned frames). Hits taken without the cache's lock are
//! not touched at once: they set a bit per frame, and `victim` asks for
//! that bit (`used`, which clears it) of each frame it passes, and counts a
//! set bit as a touch made just then.

/// An eviction policy over frames `0..frames`.
pub trait Eviction: Send {
    /// Frame `frame` now holds an up-to-date page.
    fn insert(&mut self, frame: u32);
    /// Frame `frame` was read by a reader.
    fn touch(&mut self, frame: u32);
    /// Frame `frame` no longer holds a cached page.
    fn remove(&mut self, frame: u32);
    /// A frame to evict: the first one, in the policy's order, for which
    /// `evictable` says yes; `None` if none does. `used(f)` says (once)
    /// whether `f` was hit without the lock since it was last asked.
    fn victim(
        &mut self,
        used: &mut dyn FnMut(u32) -> bool,
        evictable: &mut dyn FnMut(u32) -> bool,
    ) -> Option<u32>;
}

/// Which eviction policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EvictionKind {
    /// CLOCK (second chance): a hit sets a bit, the sweeping hand clears it
    /// or evicts. O(1) per hit with no list to update — the default.
    #[default]
    Clock,
    /// Least recently used: exact recency, a list update per hit.
    Lru,
}

impl std::str::FromStr for EvictionKind {
    type Err = crate::ParseError;
    fn from_str(s: &str) -> Result<Self, crate::ParseError> {
        match s {
            "clock" => Ok(EvictionKind::Clock),
            "lru" => Ok(EvictionKind::Lru),
            _ => Err(crate::ParseError::new("eviction policy", s, "clock or lru")),
        }
    }
}

/// Builds a policy of `kind` for `frames` frames.
pub fn new_eviction(kind: EvictionKind, frames: usize) -> Box<dyn Eviction> {
    match kind {
        EvictionKind::Clock => Box::new(Clock::new(frames)),
        EvictionKind::Lru => Box::new(Lru::new(frames)),
    }
}

/// CLOCK: a hand sweeps the frames in order.
pub struct Clock {
    cached: Vec<bool>,
    referenced: Vec<bool>,
    hand: usize,
}

impl Clock {
    /// For `frames` frames.
    pub fn new(frames: usize) -> Clock {
        Clock {
            cached: vec![false; frames],
            referenced: vec![false; frames],
            hand: 0,
        }
    }
}

impl Eviction for Clock {
    fn insert(&mut self, frame: u32) {
        // A new page starts referenced: a page read ahead must survive one
        // turn of the hand, or a stream's fresh pages would go before the
        // old pages it has already consumed.
        self.cached[frame as usize] = true;
        self.referenced[frame as usize] = true;
    }
    fn touch(&mut self, frame: u32) {
        self.referenced[frame as usize] = true;
    }
    fn remove(&mut self, frame: u32) {
        self.cached[frame as usize] = false;
    }
    fn victim(
        &mut self,
        used: &mut dyn FnMut(u32) -> bool,
        evictable: &mut dyn FnMut(u32) -> bool,
    ) -> Option<u32> {
        let n = self.cached.len();
        // Two turns: the first may only clear reference bits.
        for _ in 0..2 * n {
            let f = self.hand;
            self.hand = (self.hand + 1) % n;
            if !self.cached[f] {
                continue;
            }
            // A hit without the lock is a touch: the same second chance.
            if used(f as u32) | self.referenced[f] {
                self.referenced[f] = false;
                continue;
            }
            if evictable(f as u32) {
                return Some(f as u32);
            }
        }
        None
    }
}

const NIL: u32 = u32::MAX;

/// LRU as a doubly linked list threaded through arrays indexed by frame.
pub struct Lru {
    prev: Vec<u32>,
    next: Vec<u32>,
    linked: Vec<bool>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
}

impl Lru {
    /// For `frames` frames.
    pub fn new(frames: usize) -> Lru {
        Lru {
            prev: vec![NIL; frames],
            next: vec![NIL; frames],
            linked: vec![false; frames],
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, f: u32) {
        if !self.linked[f as usize] {
            return;
        }
        let (p, n) = (self.prev[f as usize], self.next[f as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.linked[f as usize] = false;
    }

    fn push_front(&mut self, f: u32) {
        self.prev[f as usize] = NIL;
        self.next[f as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = f;
        } else {
            self.tail = f;
        }
        self.head = f;
        self.linked[f as usize] = true;
    }
}

impl Eviction for Lru {
    fn insert(&mut self, frame: u32) {
        self.unlink(frame);
        self.push_front(frame);
    }
    fn touch(&mut self, frame: u32) {
        if self.linked[frame as usize] {
            self.unlink(frame);
            self.push_front(frame);
        }
    }
    fn remove(&mut self, frame: u32) {
        self.unlink(frame);
    }
    fn victim(
        &mut self,
        used: &mut dyn FnMut(u32) -> bool,
        evictable: &mut dyn FnMut(u32) -> bool,
    ) -> Option<u32> {
        let mut f = self.tail;
        while f != NIL {
            let prev = self.prev[f as usize];
            if used(f) {
                // Hit since: to the front, as a touch would have moved it
                // (later than it happened; LRU is only as exact as that).
                self.touch(f);
            } else if evictable(f) {
                return Some(f);
            }
            f = prev;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recent_and_skips_refused() {
        let mut l = Lru::new(4);
        for f in 0..4 {
            l.insert(f);
        }
        l.touch(0);
        assert_eq!(l.victim(&mut |_| false, &mut |_| true), Some(1));
        assert_eq!(l.victim(&mut |_| false, &mut |f| f != 1), Some(2));
        l.remove(1);
        l.remove(2);
        assert_eq!(l.victim(&mut |_| false, &mut |_| true), Some(3));
        assert_eq!(l.victim(&mut |_| false, &mut |f| f == 0), Some(0));
        assert_eq!(l.victim(&mut |_| false, &mut |_| false), None);
    }

    #[test]
    fn clock_gives_touched_frames_a_second_chance() {
        let mut c = Clock::new(3);
        for f in 0..3 {
            c.insert(f);
        }
        // New pages start referenced: the first turn clears every bit, the
        // second evicts in hand order.
        assert_eq!(c.victim(&mut |_| false, &mut |_| true), Some(0));
        c.remove(0);
        c.insert(0);
        c.touch(2);
        // 1 was cleared by the first turn; 0 is new, 2 touched.
        assert_eq!(c.victim(&mut |_| false, &mut |_| true), Some(1));
        c.remove(1);
        assert_eq!(c.victim(&mut |_| false, &mut |_| true), Some(2));
        assert_eq!(c.victim(&mut |_| false, &mut |f| f == 0), Some(0));
        assert_eq!(c.victim(&mut |_| false, &mut |_| false), None);
    }

    #[test]
    fn a_frame_used_without_the_lock_counts_as_touched() {
        // LRU: the oldest frame, hit without the lock, moves to the front.
        let mut l = Lru::new(3);
        for f in 0..3 {
            l.insert(f);
        }
        let mut bits = [true, false, false];
        let mut used = |f: u32| std::mem::take(&mut bits[f as usize]);
        assert_eq!(l.victim(&mut used, &mut |_| true), Some(1));
        l.remove(1);
        assert_eq!(l.victim(&mut |_| false, &mut |_| true), Some(2));
        l.remove(2);
        assert_eq!(l.victim(&mut |_| false, &mut |_| true), Some(0));

        // CLOCK: exactly as `touch`: passed over once, then taken.
        let mut c = Clock::new(2);
        let mut t = Clock::new(2);
        for f in 0..2 {
            c.insert(f);
            t.insert(f);
        }
        assert_eq!(c.victim(&mut |_| false, &mut |_| true), Some(0));
        assert_eq!(t.victim(&mut |_| false, &mut |_| true), Some(0));
        c.remove(0);
        t.remove(0);
        t.touch(1);
        let mut bits = [false, true];
        let mut used = |f: u32| std::mem::take(&mut bits[f as usize]);
        // Frame 0 is new (referenced); 1 was used: both get a second
        // chance, and the hand ends where the touched clock's does.
        c.insert(0);
        t.insert(0);
        assert_eq!(c.victim(&mut used, &mut |_| true), Some(1));
        assert_eq!(t.victim(&mut |_| false, &mut |_| true), Some(1));
        assert_eq!(c.hand, t.hand);
        assert_eq!(c.referenced, t.referenced);
    }
}
