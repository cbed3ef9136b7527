//! The stream table's slots, each with the pages a request must touch to
//! match its stream (`Bounds`), so that matching a request looks only at
//! the streams it can continue.
//!
//! Every request the engine serves is matched against a file's streams,
//! the cached ones too (the lock-free hit path shows them to the policy
//! afterwards): a random reader's 4 KiB hit was checked against all 16
//! streams, each a few cache lines of state, and that was 14% of a cached
//! 4 KiB Direct read (`perf record` of `cached-4k-threads`, docs/bench.md).
//! A stream's bounds are worked out again only after it changed, and a
//! request outside them is passed over on one comparison.
//!
//! By construction: a slot can be changed only through `IndexMut` or
//! `iter_mut`, which mark it stale, or through `credit`, which changes
//! only what a window has earned (no bound depends on it). In debug
//! builds every match is also made the long way, over every stream, and
//! the two must agree (`StreamTable::find`).

use std::ops::{Deref, Index, IndexMut};

use super::stream::{Stream, MAX_STRIDE_PERIOD, ROW_MAX, ROW_SLACK, STRIDE_JITTER};
use super::Request;

/// Pages `lo..=hi`: a request can match the stream only if it touches
/// them (its first page at most `hi`, its end at least `lo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bounds {
    lo: u64,
    hi: u64,
}

impl Bounds {
    /// A free slot: no request matches it.
    const NONE: Bounds = Bounds {
        lo: u64::MAX,
        hi: 0,
    };

    /// What any match of `s` (`Stream::matches`) needs of a request's
    /// pages, the conditions one by one:
    /// - forward: its first page is the last request's end or the page
    ///   before, and not below the last request's first page;
    /// - backward: it ends at the last request's first page or one past
    ///   it, and begins below it;
    /// - a row: it begins at the last request's end (within the present
    ///   row), or ends at most at the row's first page and begins at most
    ///   [`ROW_MAX`] + [`ROW_SLACK`] below it;
    /// - a stride, a jittered one, a stride candidate: its first page at
    ///   most one period (plus [`STRIDE_JITTER`]) or [`MAX_STRIDE_PERIOD`]
    ///   past the last request's first page, and past its end;
    /// - inside a window: its first page is one of the window's.
    fn of(s: &Stream) -> Bounds {
        if !s.live {
            return Bounds::NONE;
        }
        let last = s.last;
        let mut lo = last.index;
        let mut hi = last
            .index
            .saturating_add(s.last.count)
            .max(last.index.saturating_add(MAX_STRIDE_PERIOD))
            .max(
                last.index
                    .saturating_add(s.period)
                    .saturating_add(STRIDE_JITTER),
            );
        if let Some((start, _)) = s.present_row() {
            lo = lo.min(start.saturating_sub(ROW_MAX + ROW_SLACK));
            hi = hi.max(start);
        }
        for issued in [s.window, s.previous].into_iter().flatten() {
            lo = lo.min(issued.window.start);
            hi = hi.max(issued.window.end());
        }
        Bounds { lo, hi }
    }

    fn admits(self, req: Request) -> bool {
        req.index <= self.hi && req.index.saturating_add(req.count) >= self.lo
    }
}

/// The slots of a stream table: the streams, and each one's bounds.
#[derive(Clone, Debug)]
pub(super) struct Slots {
    streams: Vec<Stream>,
    bounds: Vec<Bounds>,
    /// Changed since its bounds were worked out.
    stale: Vec<bool>,
}

impl Slots {
    pub(super) fn new(n: usize) -> Slots {
        let n = n.max(1);
        Slots {
            streams: vec![Stream::EMPTY; n],
            bounds: vec![Bounds::NONE; n],
            stale: vec![false; n],
        }
    }

    /// Every slot, to change: all become stale.
    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, Stream> {
        self.stale.fill(true);
        self.streams.iter_mut()
    }

    /// Credits every live window with the pages `req` takes from it;
    /// whether any still has speculative pages unused. Bounds stay: they
    /// depend on no window's record.
    pub(super) fn credit(&mut self, req: Request) -> bool {
        let mut open = false;
        for s in self.streams.iter_mut().filter(|s| s.live) {
            for issued in [&mut s.window, &mut s.previous].into_iter().flatten() {
                issued.credit(req);
                open |= issued.used < issued.speculative;
            }
        }
        open
    }

    /// Works out again the bounds of the streams changed since.
    pub(super) fn refresh(&mut self) {
        for (slot, stale) in self.stale.iter_mut().enumerate() {
            if std::mem::take(stale) {
                self.bounds[slot] = Bounds::of(&self.streams[slot]);
            }
        }
    }

    /// The slots whose stream `req` may match, in slot order, as of the
    /// last `refresh`.
    pub(super) fn admitting(&self, req: Request) -> impl Iterator<Item = usize> + '_ {
        debug_assert!(!self.stale.contains(&true), "bounds used stale");
        self.bounds
            .iter()
            .enumerate()
            .filter(move |(_, b)| b.admits(req))
            .map(|(slot, _)| slot)
    }
}

impl Deref for Slots {
    type Target = [Stream];

    fn deref(&self) -> &[Stream] {
        &self.streams
    }
}

impl Index<usize> for Slots {
    type Output = Stream;

    fn index(&self, slot: usize) -> &Stream {
        &self.streams[slot]
    }
}

impl IndexMut<usize> for Slots {
    fn index_mut(&mut self, slot: usize) -> &mut Stream {
        self.stale[slot] = true;
        &mut self.streams[slot]
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream::Direction;
    use super::*;
    use crate::ra::accuracy::Issued;
    use crate::ra::{Shape, Window};

    /// A stream of random state near page 10,000: every field `matches`
    /// reads, drawn from a few values each.
    fn random_stream(rng: &mut fastrand::Rng) -> Stream {
        let near = |rng: &mut fastrand::Rng| 10_000 + rng.u64(0..12_000) - 6_000;
        let direction = match rng.u8(0..5) {
            0 => Direction::Unknown,
            1 => Direction::Forward,
            2 => Direction::Backward,
            3 => Direction::Strided {
                run: rng.u64(1..4),
                period: rng.u64(2..64),
            },
            _ => Direction::Irregular {
                run: rng.u64(1..4),
                period: rng.u64(2..64),
            },
        };
        let window = |rng: &mut fastrand::Rng| {
            rng.bool().then(|| {
                let mut w = Window::forward(near(rng), rng.u64(1..9_000), 0);
                if rng.bool() {
                    w.shape = Shape::Strided {
                        run: rng.u64(1..4),
                        period: rng.u64(4..64),
                    };
                }
                Issued::new(w, w.size, Request::new(w.start, 1), w.start)
            })
        };
        let count = if rng.bool() {
            rng.u64(0..40)
        } else {
            rng.u64(0..10_000)
        };
        let last = Request::new(near(rng), count);
        Stream {
            live: rng.u8(0..8) != 0,
            last_used: rng.u64(0..4),
            direction,
            last,
            period: rng.u64(0..5_000),
            confirmations: rng.u32(0..4),
            origin: last.index - rng.u64(0..3) * rng.u64(0..40),
            window: window(rng),
            previous: window(rng),
            jittered: rng.bool(),
            row: rng.bool().then(|| {
                let start = if rng.bool() {
                    near(rng)
                } else {
                    last.index - rng.u64(0..40)
                };
                (start, start + rng.u64(0..40))
            }),
            ..Stream::EMPTY
        }
    }

    /// The property the bounds stand for: no request they leave out
    /// matches the stream, whatever its state (a million pairs, each
    /// request near the stream's pages, with lengths up to 2,000 pages).
    #[test]
    fn a_request_outside_a_streams_bounds_never_matches_it() {
        let mut rng = fastrand::Rng::with_seed(36);
        let (mut matched, mut passed_over) = (0, 0);
        for _ in 0..1_000_000 {
            let s = random_stream(&mut rng);
            let b = Bounds::of(&s);
            // Half the requests begin a few pages from a page the
            // stream's state names, half anywhere near.
            let anchors = [
                s.last.index,
                s.last.end(),
                s.last.index + s.period,
                s.row.map_or(0, |r| r.0),
                s.window.map_or(0, |i| i.window.start),
                s.window.map_or(0, |i| i.window.end()),
            ];
            let index = if rng.bool() {
                (anchors[rng.usize(0..anchors.len())] + rng.u64(0..9)).saturating_sub(4)
            } else {
                (s.last.index + rng.u64(0..20_000)).saturating_sub(10_000)
            };
            let count = if rng.bool() {
                rng.u64(0..4)
            } else {
                rng.u64(0..2_000)
            };
            let req = Request::new(index, count);
            if let Some(m) = s.matches(req) {
                matched += 1;
                assert!(b.admits(req), "{m:?} of {req:?} outside {b:?}: {s:?}");
            } else if !b.admits(req) {
                passed_over += 1;
            }
        }
        // Both sides of the property were tried, many times each.
        assert!(
            matched > 50_000 && passed_over > 100_000,
            "{matched} {passed_over}"
        );
    }

    #[test]
    fn a_changed_stream_is_matched_by_its_new_state() {
        let mut slots = Slots::new(4);
        slots.refresh();
        let req = Request::new(500_000, 1);
        assert_eq!(slots.admitting(req).count(), 0, "free slots admit nothing");
        slots[2] = Stream {
            live: true,
            last: Request::new(400_000, 4),
            direction: Direction::Forward,
            ..Stream::EMPTY
        };
        slots.refresh();
        assert_eq!(slots.admitting(req).count(), 0, "100,000 pages on");
        // Its window reaches the request: a window larger than the
        // stride's reach.
        let w = Window::forward(400_004, 200_000, 0);
        slots[2].window = Some(Issued::new(w, w.size, Request::new(400_000, 4), 400_000));
        slots.refresh();
        assert_eq!(slots.admitting(req).collect::<Vec<_>>(), [2]);
        assert!(slots[2].matches(req).is_some());
        // Every slot, changed through `iter_mut`.
        for s in slots.iter_mut() {
            s.live = false;
        }
        slots.refresh();
        assert_eq!(slots.admitting(req).count(), 0);
    }
}
