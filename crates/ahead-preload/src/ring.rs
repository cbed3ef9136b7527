//! The helper's queues: bounded, lock-free for any number of producers,
//! and free until used.
//!
//! A queue made by writing every slot (crossbeam's `ArrayQueue` writes
//! each slot's sequence number when it is made) costs a page fault per
//! 4 KiB of it in every process that loads the core, however little that
//! process reads: the 4,096 events of the hints' queue are 256 KiB. A
//! smaller queue is not the answer: with 512 events a reader stepping
//! backwards a page at a time through a half-cached file outran the helper
//! and lost 18% of its events, where 4,096 lost none. With this ring,
//! `tail -n 50000` of a cached file under `ahead run` took 145 page faults
//! against 212, and 3.14–3.21 ms against 3.66–3.67 ms (medians of 20
//! alternated rounds of 100 runs, two runs; the program alone 1.78 ms).
//!
//! So the slots live in an anonymous mapping, which the kernel gives as
//! zero pages that cost nothing until written, and the all-zero state is
//! the empty queue. The algorithm is Dmitry Vyukov's bounded MPMC queue:
//! every slot carries a sequence number; a producer may fill position
//! `pos` when its slot's number is `pos` (then sets it to `pos + 1`), the
//! consumer may take `pos` when the number is `pos + 1` (then sets it to
//! `pos + capacity`, the next lap's position). A fresh queue has slot `i`
//! at `i`. Here each slot keeps its number less its own index, so zero
//! memory means exactly that, and a page is first touched when the
//! queue's positions reach it.
//!
//! The algorithm is written once, over the atomic type, so that the test
//! below runs the same code under shuttle's scheduler.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

/// The queue's algorithm over an atomic `usize` type (std's, or shuttle's
/// in the model test): `Slot`, `Ends`, `push` and `pop`.
macro_rules! ring_algorithm {
    ($Atomic:ty, $Ordering:ident) => {
        /// One slot: its sequence number less its index, and a value.
        pub(crate) struct Slot<T> {
            seq: $Atomic,
            value: UnsafeCell<MaybeUninit<T>>,
        }

        impl<T> Slot<T> {
            /// A slot of a fresh queue (the all-zero slot), where it is not
            /// zero memory already.
            pub(crate) fn new() -> Slot<T> {
                Slot {
                    seq: <$Atomic>::new(0),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                }
            }
        }

        /// The next position to fill (`tail`) and to take (`head`), each
        /// on its own cache line.
        pub(crate) struct Ends {
            tail: Padded<$Atomic>,
            head: Padded<$Atomic>,
        }

        impl Ends {
            pub(crate) fn new() -> Ends {
                Ends {
                    tail: Padded(<$Atomic>::new(0)),
                    head: Padded(<$Atomic>::new(0)),
                }
            }
        }

        #[repr(align(64))]
        struct Padded<A>(A);

        /// Claims the position `end` holds once its slot's number is that
        /// position plus `lag` (0 to fill a slot, 1 to take one): the
        /// position, the slot's index and the slot. None where the slot is
        /// not there yet: the queue is full (filling) or empty (taking).
        fn claim<'a, T>(
            end: &$Atomic,
            slots: &'a [Slot<T>],
            lag: usize,
        ) -> Option<(usize, usize, &'a Slot<T>)> {
            let mask = slots.len() - 1;
            let mut pos = end.load($Ordering::Relaxed);
            loop {
                let i = pos & mask;
                let slot = &slots[i];
                let seq = slot.seq.load($Ordering::Acquire).wrapping_add(i);
                let ahead = seq.wrapping_sub(pos.wrapping_add(lag)) as isize;
                if ahead < 0 {
                    return None;
                }
                if ahead > 0 {
                    // Another thread took this position: look again.
                    pos = end.load($Ordering::Relaxed);
                    continue;
                }
                let next = pos.wrapping_add(1);
                match end.compare_exchange(pos, next, $Ordering::Relaxed, $Ordering::Relaxed) {
                    Ok(_) => return Some((pos, i, slot)),
                    Err(now) => pos = now,
                }
            }
        }

        /// Adds `v` at the tail; gives it back if the queue is full.
        /// `slots.len()` must be a power of two.
        pub(crate) fn push<T: Copy>(ends: &Ends, slots: &[Slot<T>], v: T) -> Result<(), T> {
            let Some((pos, i, slot)) = claim(&ends.tail.0, slots, 0) else {
                return Err(v);
            };
            // SAFETY: the claim gave this producer position `pos`, whose
            // slot is free (its number said so); no one else touches the
            // value until the number below is stored.
            unsafe { (*slot.value.get()).write(v) };
            let written = pos.wrapping_add(1).wrapping_sub(i);
            slot.seq.store(written, $Ordering::Release);
            Ok(())
        }

        /// Takes the value at the head, if one is there.
        pub(crate) fn pop<T: Copy>(ends: &Ends, slots: &[Slot<T>]) -> Option<T> {
            let (pos, i, slot) = claim(&ends.head.0, slots, 1)?;
            // SAFETY: the number said the value at `pos` was written (the
            // Acquire load saw the producer's Release store), and the claim
            // gave it to this consumer alone.
            let v = unsafe { (*slot.value.get()).assume_init_read() };
            // Free for the next lap's position.
            let free = pos.wrapping_add(slots.len()).wrapping_sub(i);
            slot.seq.store(free, $Ordering::Release);
            Some(v)
        }

        /// Whether every value pushed so far has been taken.
        #[allow(dead_code)] // the model test only pushes and pops
        pub(crate) fn is_empty(ends: &Ends) -> bool {
            ends.head.0.load($Ordering::SeqCst) == ends.tail.0.load($Ordering::SeqCst)
        }
    };
}

mod real {
    use super::{MaybeUninit, UnsafeCell};
    use std::sync::atomic::{AtomicUsize, Ordering};
    ring_algorithm!(AtomicUsize, Ordering);
}

/// A bounded queue of `T` whose slots are an anonymous mapping.
pub(crate) struct Ring<T> {
    ends: real::Ends,
    slots: *mut real::Slot<T>,
    len: usize,
    /// The mapping's length (0: the slots were allocated instead).
    mapped: usize,
}

// SAFETY: the slots are reached only through the algorithm above, which
// hands each value from one thread to another through the slot's number.
unsafe impl<T: Copy + Send> Send for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Sync for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// A queue of at least `capacity` values (a power of two, at least 2:
    /// with one slot, "written at position p" and "free for position
    /// p + 1" would be the same number).
    pub(crate) fn new(capacity: usize) -> Ring<T> {
        let len = capacity.max(2).next_power_of_two();
        let bytes = len * std::mem::size_of::<real::Slot<T>>();
        // SAFETY: a fresh private anonymous mapping, asked of no address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            // Zero pages: every slot is `Slot::new()` (an atomic zero and
            // an uninitialised value), and the mapping is page-aligned.
            return Ring {
                ends: real::Ends::new(),
                slots: p.cast(),
                len,
                mapped: bytes,
            };
        }
        // No mapping to be had: the slots written one by one, as the
        // queue it replaces did.
        let slots: Box<[real::Slot<T>]> = (0..len).map(|_| real::Slot::new()).collect();
        Ring {
            ends: real::Ends::new(),
            slots: Box::into_raw(slots).cast(),
            len,
            mapped: 0,
        }
    }

    fn slots(&self) -> &[real::Slot<T>] {
        // SAFETY: `len` slots, valid for the ring's life (zero memory is a
        // valid slot: see `new`).
        unsafe { std::slice::from_raw_parts(self.slots, self.len) }
    }

    /// Adds `v`; gives it back if the queue is full.
    pub(crate) fn push(&self, v: T) -> Result<(), T> {
        real::push(&self.ends, self.slots(), v)
    }

    /// Takes the oldest value, if any.
    pub(crate) fn pop(&self) -> Option<T> {
        real::pop(&self.ends, self.slots())
    }

    /// Whether every value pushed has been taken.
    pub(crate) fn is_empty(&self) -> bool {
        real::is_empty(&self.ends)
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // Values are `Copy` (no drop of their own) in every use; the
        // memory goes back the way it came.
        if self.mapped > 0 {
            // SAFETY: the mapping made in `new`, no longer used.
            unsafe { libc::munmap(self.slots.cast(), self.mapped) };
        } else {
            // SAFETY: the box made in `new`, no longer used.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.slots, self.len))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;
    use std::collections::VecDeque;

    #[test]
    fn it_is_a_bounded_fifo_through_many_laps() {
        // Against a VecDeque, a random walk of pushes and pops on a ring
        // of 8 (so every slot goes round hundreds of times, full and
        // empty alike).
        let ring = Ring::<u64>::new(8);
        let mut model = VecDeque::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for n in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) {
                let r = ring.push(n);
                if model.len() < 8 {
                    assert_eq!(r, Ok(()));
                    model.push_back(n);
                } else {
                    assert_eq!(r, Err(n), "a full ring took a value");
                }
            } else {
                assert_eq!(ring.pop(), model.pop_front());
            }
            assert_eq!(ring.is_empty(), model.is_empty());
        }
        while let Some(v) = model.pop_front() {
            assert_eq!(ring.pop(), Some(v));
        }
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn a_capacity_is_rounded_up_to_a_power_of_two_of_at_least_two() {
        let ring = Ring::<u8>::new(5);
        for i in 0..8 {
            ring.push(i).unwrap();
        }
        assert_eq!(ring.push(9), Err(9));
        // One slot asked for: two made, and a value not taken is never
        // written over.
        for cap in [0, 1] {
            let ring = Ring::<u8>::new(cap);
            assert_eq!(ring.push(1), Ok(()));
            assert_eq!(ring.push(2), Ok(()));
            assert_eq!(ring.push(3), Err(3));
            assert_eq!(
                (ring.pop(), ring.pop(), ring.pop()),
                (Some(1), Some(2), None)
            );
        }
    }

    #[test]
    fn only_the_pages_in_use_are_touched() {
        // The point of the ring: a queue of 4,096 events of 64 bytes
        // (256 KiB) costs the pages its positions have reached. mincore
        // says which pages of the mapping are resident.
        #[derive(Clone, Copy, Debug)]
        #[allow(dead_code)]
        struct Event([u64; 7]);
        let ring = Ring::<Event>::new(4096);
        let resident = |ring: &Ring<Event>| -> usize {
            let page = 4096;
            let mut vec = vec![0u8; ring.mapped.div_ceil(page)];
            // SAFETY: the ring's mapping, and a vector of one byte a page.
            let rc = unsafe { libc::mincore(ring.slots.cast(), ring.mapped, vec.as_mut_ptr()) };
            assert_eq!(rc, 0);
            vec.iter().filter(|&&b| b & 1 == 1).count()
        };
        assert!(ring.mapped >= 256 << 10, "{}", ring.mapped);
        assert_eq!(resident(&ring), 0, "a fresh ring touched its pages");
        for _ in 0..10 {
            assert!(ring.push(Event([1; 7])).is_ok());
        }
        assert_eq!(resident(&ring), 1);
        for _ in 0..10 {
            ring.pop().unwrap();
        }
        assert_eq!(resident(&ring), 1);
    }
}

#[cfg(test)]
mod model {
    //! The algorithm under shuttle's scheduler: two producers push three
    //! values each into a queue of two slots (so full is met), a consumer
    //! takes until it has all six; no value is lost or taken twice, and
    //! each producer's values come out in the order it pushed them.
    use super::{MaybeUninit, UnsafeCell};
    use shuttle::sync::atomic::{AtomicUsize, Ordering};
    use shuttle::sync::Arc;
    use shuttle::thread;

    ring_algorithm!(AtomicUsize, Ordering);

    struct Queue {
        ends: Ends,
        slots: Vec<Slot<u32>>,
    }
    // SAFETY: as the real ring's.
    unsafe impl Sync for Queue {}
    // SAFETY: as the real ring's.
    unsafe impl Send for Queue {}

    fn scenario() {
        let q = Arc::new(Queue {
            ends: Ends::new(),
            slots: (0..2).map(|_| Slot::new()).collect(),
        });
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let q = q.clone();
                thread::spawn(move || {
                    for k in 0..3 {
                        let mut v = p * 100 + k;
                        while let Err(back) = push(&q.ends, &q.slots, v) {
                            v = back;
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 6 {
            match pop(&q.ends, &q.slots) {
                Some(v) => got.push(v),
                None => thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(pop(&q.ends, &q.slots), None);
        for p in 0..2 {
            let mine: Vec<u32> = got.iter().copied().filter(|v| v / 100 == p).collect();
            assert_eq!(mine, vec![p * 100, p * 100 + 1, p * 100 + 2], "{got:?}");
        }
    }

    #[test]
    fn no_value_is_lost_duplicated_or_reordered() {
        shuttle::check_random(scenario, 3000);
        shuttle::check_pct(scenario, 3000, 3);
    }
}
