//! The page state machine under shuttle's scheduler: absent → reading
//! (waiters sleep on the condvar) → up to date → evicted (a shadow) or
//! dropped (an orphan while pinned), with the real pin protocol of
//! [`super::pins`]. Readers, a dropper and eviction run in every
//! interleaving shuttle's random and PCT schedulers pick (eviction also
//! while frames are free, as a scan's ring recycles), and check:
//!
//! * one read in flight per page;
//! * a frame is written only while no one has it pinned;
//! * a pinned frame keeps its page (no use after eviction or drop: the
//!   frame's contents are checked while pinned, after a yield);
//! * every waiter is woken (shuttle fails a run in which every thread
//!   sleeps);
//! * at the end no pin is left, and every frame is either free (once) or
//!   holds exactly one page.
//!
//! Readers also take the lock-free hit path as the engine does
//! (`PageCache::pin_hit`): guess a frame from a hint, pin it, check its
//! identity word, copy. Eviction and drops clear the word before they look
//! at the pins. Such a reader may pin a frame that is free or being read,
//! for a moment; the checks above hold for the pins a reader keeps (it
//! counts itself in `holders` once its guess is confirmed).

use std::collections::HashMap;

use shuttle::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use shuttle::sync::{Arc, Condvar, Mutex};
use shuttle::thread;

use super::pins::Pins;

super::pins::impl_pin_count!(AtomicU32, Ordering);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Page {
    Reading(u32),
    Ready(u32),
    Shadow,
}

struct State {
    pages: HashMap<u64, Page>,
    owner: Vec<Option<u64>>,
    free: Vec<u32>,
    in_flight: HashMap<u64, u32>,
    /// Threads waiting on `changed` (`Inner::waiting`): signals are sent
    /// only when it is not 0, read under the lock.
    waiting: usize,
}

struct Model {
    state: Mutex<State>,
    changed: Condvar,
    pins: Pins<AtomicU32>,
    /// What each frame holds: page + 1, written by the read that fills it.
    contents: Vec<AtomicU64>,
    /// The identity word of each frame: page + 1 while the hit path may
    /// take it, 0 otherwise (`hits::HitTable::ident`).
    ident: Vec<AtomicU64>,
    /// Per page: frame + 1 last published for it (`hits::HitTable::hint`).
    hint: Vec<AtomicU32>,
    /// Per frame: readers holding a confirmed pin.
    holders: Vec<AtomicUsize>,
}

impl Model {
    fn new(frames: usize) -> Model {
        Model {
            state: Mutex::new(State {
                pages: HashMap::new(),
                owner: vec![None; frames],
                free: (0..frames as u32).collect(),
                in_flight: HashMap::new(),
                waiting: 0,
            }),
            changed: Condvar::new(),
            pins: Pins::new(frames),
            contents: (0..frames).map(|_| AtomicU64::new(0)).collect(),
            ident: (0..frames).map(|_| AtomicU64::new(0)).collect(),
            hint: (0..PAGES).map(|_| AtomicU32::new(0)).collect(),
            holders: (0..frames).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// The hit path: pins the hinted frame and keeps it if its identity
    /// word says it holds `page`. Whether it read the page.
    fn read_hit(&self, page: u64) -> bool {
        let Some(frame) = self.hint[page as usize]
            .load(Ordering::Relaxed)
            .checked_sub(1)
        else {
            return false;
        };
        self.pins.pin(frame);
        let confirmed = self.ident[frame as usize].load(Ordering::SeqCst) == page + 1;
        if confirmed {
            self.holders[frame as usize].fetch_add(1, Ordering::SeqCst);
            self.check_held(frame, page);
            self.holders[frame as usize].fetch_sub(1, Ordering::SeqCst);
        }
        self.unpin(frame);
        confirmed
    }

    /// While a confirmed pin is held, the frame keeps the page.
    fn check_held(&self, frame: u32, page: u64) {
        for _ in 0..2 {
            let held = self.contents[frame as usize].load(Ordering::Acquire);
            assert_eq!(held, page + 1, "a pinned frame lost its page");
            thread::yield_now();
        }
    }

    fn unpin(&self, frame: u32) {
        if self.pins.unpin(frame) {
            let mut s = self.state.lock().unwrap();
            s.free.push(frame);
            self.signal(s);
        }
    }

    /// As `PageCache::wait`: counted in `waiting` while asleep.
    fn wait<'a>(
        &self,
        mut s: shuttle::sync::MutexGuard<'a, State>,
    ) -> shuttle::sync::MutexGuard<'a, State> {
        s.waiting += 1;
        let mut s = self.changed.wait(s).unwrap();
        s.waiting -= 1;
        s
    }

    /// As `PageCache::signal`: wakes the waiters, if the state released
    /// here says there are any.
    fn signal(&self, s: shuttle::sync::MutexGuard<'_, State>) {
        let waiting = s.waiting > 0;
        drop(s);
        if waiting {
            self.changed.notify_all();
        }
    }

    /// A free frame, or an up-to-date unpinned one evicted (as
    /// `take_frame`); with `recycle`, an up-to-date one first and a free
    /// one only if none can go, as a scan's ring takes its own trail while
    /// frames are still free (`take_used`).
    fn take_frame(&self, s: &mut State, recycle: bool) -> Option<u32> {
        if !recycle {
            if let Some(f) = s.free.pop() {
                return Some(f);
            }
        }
        match self.evict(s) {
            Some(f) => Some(f),
            None if recycle => s.free.pop(),
            None => None,
        }
    }

    /// An up-to-date unpinned frame evicted, its page left a shadow.
    fn evict(&self, s: &mut State) -> Option<u32> {
        let victim = (0..s.owner.len() as u32).find(|&f| {
            if !s.owner[f as usize].is_some_and(|p| s.pages.get(&p) == Some(&Page::Ready(f))) {
                return false;
            }
            // As `take_frame`: the identity goes, then the pins are looked
            // at, and a pinned frame gets its identity back.
            let word = self.ident[f as usize].swap(0, Ordering::SeqCst);
            if self.pins.is_pinned(f) {
                if word != 0 {
                    self.ident[f as usize].store(word, Ordering::Release);
                }
                false
            } else {
                true
            }
        })?;
        let page = s.owner[victim as usize].take().unwrap();
        s.pages.insert(page, Page::Shadow);
        Some(victim)
    }

    /// Reads `page`: the hit path first, then under the lock: pins its
    /// frame, checks what it holds, unpins.
    fn read(&self, page: u64) {
        if self.read_hit(page) {
            return;
        }
        loop {
            let mut s = self.state.lock().unwrap();
            match s.pages.get(&page).copied() {
                Some(Page::Ready(frame)) => {
                    self.pins.pin(frame);
                    // Used once: later hits may skip the lock (`collect`).
                    self.ident[frame as usize].store(page + 1, Ordering::Release);
                    self.hint[page as usize].store(frame + 1, Ordering::Relaxed);
                    drop(s);
                    self.holders[frame as usize].fetch_add(1, Ordering::SeqCst);
                    self.check_held(frame, page);
                    self.holders[frame as usize].fetch_sub(1, Ordering::SeqCst);
                    self.unpin(frame);
                    return;
                }
                Some(Page::Reading(_)) => {
                    let _s = self.wait(s);
                }
                None | Some(Page::Shadow) => {
                    // Odd pages are read as a ring's readahead would be.
                    let Some(frame) = self.take_frame(&mut s, page % 2 == 1) else {
                        // Every frame pinned: plain unpins do not signal,
                        // so look again later (the engine's FRAME_RETRY).
                        drop(s);
                        thread::yield_now();
                        continue;
                    };
                    let n = s.in_flight.entry(page).or_default();
                    *n += 1;
                    assert_eq!(*n, 1, "two reads of one page in flight");
                    s.pages.insert(page, Page::Reading(frame));
                    s.owner[frame as usize] = Some(page);
                    drop(s);
                    assert_eq!(
                        self.holders[frame as usize].load(Ordering::SeqCst),
                        0,
                        "a pinned frame is written"
                    );
                    self.contents[frame as usize].store(page + 1, Ordering::Release);
                    let mut s = self.state.lock().unwrap();
                    *s.in_flight.get_mut(&page).unwrap() -= 1;
                    if s.pages.get(&page) == Some(&Page::Reading(frame)) {
                        s.pages.insert(page, Page::Ready(frame));
                    }
                    self.signal(s);
                }
            }
        }
    }

    /// Drops every up-to-date page (a file closed or found changed): a
    /// pinned frame becomes an orphan that its last unpin frees.
    fn drop_all(&self) {
        let mut s = self.state.lock().unwrap();
        let ready: Vec<(u64, u32)> = s
            .pages
            .iter()
            .filter_map(|(&p, &st)| match st {
                Page::Ready(f) => Some((p, f)),
                _ => None,
            })
            .collect();
        for (p, f) in ready {
            s.pages.remove(&p);
            s.owner[f as usize] = None;
            self.ident[f as usize].store(0, Ordering::SeqCst);
            if self.pins.orphan(f) {
                s.free.push(f);
            }
        }
        self.signal(s);
    }

    fn check_end(&self) {
        assert_eq!(self.pins.count(), 0, "pins left");
        let s = self.state.lock().unwrap();
        let mut free = s.free.clone();
        free.sort_unstable();
        free.dedup();
        assert_eq!(free.len(), s.free.len(), "a frame freed twice");
        for f in 0..s.owner.len() as u32 {
            let owned = s.owner[f as usize].is_some();
            assert!(
                owned != s.free.contains(&f),
                "frame {f} lost or doubly used"
            );
        }
    }
}

/// Pages in the scenario.
const PAGES: usize = 3;

/// Two readers over three pages through two frames, and a third thread that
/// reads and drops everything in between.
fn scenario() {
    let m = Arc::new(Model::new(2));
    let readers: Vec<_> = [[0u64, 1, 0, 2], [1, 0, 2, 1]]
        .into_iter()
        .map(|pages| {
            let m = m.clone();
            thread::spawn(move || {
                for p in pages {
                    m.read(p);
                }
            })
        })
        .collect();
    let dropper = {
        let m = m.clone();
        thread::spawn(move || {
            m.read(2);
            m.drop_all();
            m.read(0);
        })
    };
    for t in readers {
        t.join().unwrap();
    }
    dropper.join().unwrap();
    m.check_end();
}

#[test]
fn page_state_machine_random_schedules() {
    shuttle::check_random(scenario, 3000);
}

#[test]
fn page_state_machine_pct_schedules() {
    shuttle::check_pct(scenario, 3000, 3);
}
