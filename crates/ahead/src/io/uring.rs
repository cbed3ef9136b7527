//! The io_uring backend.
//!
//! One ring per backend. Any thread may submit: it records the read in a
//! slot table (which owns the operation, its buffer and its iovecs until the
//! completion is reaped, so every pointer handed to the kernel stays valid),
//! pushes a `READV` entry under a lock and enters the kernel. One completion
//! thread waits for completions, continues short reads that did not reach
//! the end of the file, retries `EINTR`/`EAGAIN`, and runs the completion
//! callbacks. At most `depth` reads are in flight; `submit` blocks beyond
//! that, so the submission queue never overflows.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use io_uring::{opcode, types, IoUring};

use super::{continue_after, run_completion, Backend, Completion, ReadOp};

/// `user_data` of the no-op that tells the completion thread to stop.
const STOP: u64 = u64::MAX;

/// Attempts at entering the kernel with a new entry while it answers
/// EINTR/EAGAIN/EBUSY (100 µs apart: 10 ms in all, ample for the reaper to
/// drain a full completion queue).
const SUBMIT_TRIES: usize = 100;

/// The iovecs of one in-flight read. They hold raw pointers into the
/// operation's own buffer, which travels with them.
struct IoVecs(Vec<libc::iovec>);
// SAFETY: the pointers refer to the buffer owned by the same `InFlight`
// record; moving the record between threads moves the ownership with it.
unsafe impl Send for IoVecs {}

struct InFlight {
    op: ReadOp,
    done: Completion,
    iov: IoVecs,
    progress: usize,
}

struct Slots {
    entries: Vec<Option<InFlight>>,
    free: Vec<u32>,
    in_flight: usize,
}

struct Shared {
    ring: IoUring,
    /// Serialises pushes to the submission queue.
    sq: Mutex<()>,
    slots: Mutex<Slots>,
    space: Condvar,
    depth: usize,
}

/// An io_uring backend.
pub struct Uring {
    shared: Arc<Shared>,
    reaper: Option<JoinHandle<()>>,
}

impl Uring {
    /// A ring with room for `depth` reads in flight. Fails if the kernel has
    /// no io_uring (or it is disabled, e.g. by `kernel.io_uring_disabled`).
    pub fn new(depth: usize) -> io::Result<Uring> {
        let depth = depth.clamp(1, 4096);
        let entries = (depth as u32 + 1).next_power_of_two();
        let ring = IoUring::new(entries)?;
        let shared = Arc::new(Shared {
            ring,
            sq: Mutex::new(()),
            slots: Mutex::new(Slots {
                entries: (0..depth).map(|_| None).collect(),
                free: (0..depth as u32).rev().collect(),
                in_flight: 0,
            }),
            space: Condvar::new(),
            depth,
        });
        let s = shared.clone();
        let reaper = std::thread::Builder::new()
            .name("ahead-uring".into())
            .spawn(move || reap(&s))?;
        Ok(Uring {
            shared,
            reaper: Some(reaper),
        })
    }
}

impl Shared {
    /// Pushes one read entry for slot `id` and enters the kernel.
    fn push_read(
        &self,
        id: u32,
        fd: i32,
        iov: *const libc::iovec,
        iovcnt: usize,
        offset: u64,
        (flags, known_miss): (i32, bool),
    ) {
        let sqe_flags = if known_miss {
            io_uring::squeue::Flags::ASYNC
        } else {
            io_uring::squeue::Flags::empty()
        };
        let entry = opcode::Readv::new(types::Fd(fd), iov, iovcnt as u32)
            .offset(offset)
            .rw_flags(flags)
            .build()
            .flags(sqe_flags)
            .user_data(id as u64);
        self.push(entry);
    }

    fn push(&self, entry: io_uring::squeue::Entry) {
        let guard = self.sq.lock().unwrap();
        // SAFETY: submission-queue access is serialised by `self.sq`, which
        // we hold; the completion queue is only touched by the reaper.
        let mut sq = unsafe { self.ring.submission_shared() };
        // SAFETY: a read entry's iovecs and the memory they point to belong
        // to a slot record that stays in the slot table until the reaper has
        // taken this entry's completion, so they outlive the operation.
        // The queue has room: at most `depth` reads plus the stop no-op are
        // ever pending, and the ring has more entries than that.
        unsafe { sq.push(&entry) }.expect("submission queue sized for depth");
        sq.sync();
        drop(sq);
        drop(guard);
        // EINTR, EAGAIN (no memory for the request now) and EBUSY (the
        // completion queue is full until the reaper drains it) pass: try
        // again. The entry stays queued whatever happens, and the reaper's
        // every wait submits what is queued, so a read whose submission
        // keeps failing is still submitted once a completion arrives.
        for _ in 0..SUBMIT_TRIES {
            match self.ring.submit() {
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                _ => break,
            }
        }
    }

    /// Finishes slot `id`: frees it and returns its operation.
    fn finish(&self, id: u32) -> InFlight {
        let mut slots = self.slots.lock().unwrap();
        let rec = slots.entries[id as usize].take().expect("slot in flight");
        slots.free.push(id);
        slots.in_flight -= 1;
        drop(slots);
        self.space.notify_one();
        rec
    }
}

fn reap(shared: &Shared) {
    let mut stopping = false;
    loop {
        if stopping && shared.slots.lock().unwrap().in_flight == 0 {
            return;
        }
        match shared.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            // Anything else (ENOMEM under memory pressure, say) is retried
            // after a pause rather than abandoning the reads in flight.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
        // SAFETY: only this thread touches the completion queue.
        let cqes: Vec<(u64, i32)> = unsafe { shared.ring.completion_shared() }
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (user_data, res) in cqes {
            if user_data == STOP {
                stopping = true;
                continue;
            }
            let id = user_data as u32;
            let next = {
                let mut slots = shared.slots.lock().unwrap();
                let rec = slots.entries[id as usize].as_mut().expect("slot in flight");
                if res < 0 {
                    if res == -libc::EINTR || res == -libc::EAGAIN {
                        Some(rec.progress)
                    } else {
                        None
                    }
                } else {
                    let n = res as usize;
                    let next = continue_after(rec.progress, n, rec.op.len, rec.op.fd.as_fd());
                    rec.progress = next.unwrap_or(rec.progress + n);
                    next
                }
                .map(|done| {
                    rec.iov = IoVecs(rec.op.buf.iovecs(done, rec.op.len - done));
                    (
                        rec.op.fd.as_raw_fd(),
                        rec.iov.0.as_ptr(),
                        rec.iov.0.len(),
                        rec.op.offset + done as u64,
                        (rec.op.flags, rec.op.known_miss),
                    )
                })
            };
            match next {
                Some((fd, iov, cnt, offset, flags)) => {
                    shared.push_read(id, fd, iov, cnt, offset, flags)
                }
                None => {
                    let rec = shared.finish(id);
                    let result = if res < 0 {
                        Err(io::Error::from_raw_os_error(-res))
                    } else {
                        Ok(rec.progress)
                    };
                    run_completion(rec.done, rec.op, result);
                }
            }
        }
    }
}

impl Backend for Uring {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn depth(&self) -> usize {
        self.shared.depth
    }

    fn submit(&self, mut op: ReadOp, done: Completion) {
        let iov = IoVecs(op.buf.iovecs(0, op.len));
        let (fd, offset, flags) = (op.fd.as_raw_fd(), op.offset, (op.flags, op.known_miss));
        let (ptr, cnt) = (iov.0.as_ptr(), iov.0.len());
        let id = {
            let mut slots = self.shared.slots.lock().unwrap();
            while slots.in_flight >= self.shared.depth {
                slots = self.shared.space.wait(slots).unwrap();
            }
            let id = slots.free.pop().expect("a free slot below depth");
            slots.in_flight += 1;
            slots.entries[id as usize] = Some(InFlight {
                op,
                done,
                iov,
                progress: 0,
            });
            id
        };
        self.shared.push_read(id, fd, ptr, cnt, offset, flags);
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        self.shared.push(opcode::Nop::new().build().user_data(STOP));
        if let Some(r) = self.reaper.take() {
            // The last reference may die inside a completion, on the reaper
            // itself (an engine dropped while its readahead is in flight):
            // a thread cannot join itself. The reaper then stops on its own
            // once the stop entry and the reads in flight have completed,
            // holding the ring (`shared`) until then.
            if r.thread().id() != std::thread::current().id() {
                let _ = r.join();
            }
        }
    }
}
