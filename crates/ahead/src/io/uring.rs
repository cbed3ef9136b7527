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
//!
//! **Registered buffers.** Given the cache's arena ([`Backend::attach`]),
//! the ring registers it as fixed buffers, one region of [`REGION`] bytes
//! at a time when a read first lands in it (a sparse table, Linux 5.13), so
//! the arena stays lazy: memory is pinned, and so made resident, no sooner
//! than a read uses it. A read whose frames lie in one registered region
//! goes as `READ_FIXED` (one contiguous run) or `READV_FIXED` (Linux 6.15,
//! probed), and the kernel no longer pins and unpins the user pages of
//! every read. Anything else, or a kernel that refuses (no
//! `IORING_REGISTER_BUFFERS2`, the locked-memory limit of a non-root
//! caller), reads with `READV` as before.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use io_uring::{opcode, types, IoUring};

use super::{continue_after, run_completion, Arena, Backend, Completion, IoBuf, ReadOp};

/// Bytes of the arena registered at a time: two hundred 256 KiB reads'
/// worth, small enough that pinning one region early costs little.
pub const REGION: usize = 8 << 20;

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
    /// The entry in flight reads into a registered buffer.
    fixed: bool,
}

/// The arena as fixed buffers: region `r` is buffer index `r`.
struct Fixed {
    /// Kept alive as long as the ring: its memory is registered.
    arena: Arc<Arena>,
    base: usize,
    len: usize,
    registered: Vec<AtomicBool>,
    /// Serialises registrations.
    registering: Mutex<()>,
    /// A registration failed (the locked-memory limit, say): no more tries;
    /// the regions registered so far are still used.
    refused: AtomicBool,
    /// `READV_FIXED` is supported (Linux 6.15).
    vectored: bool,
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
    /// Set once by `attach`.
    fixed: OnceLock<Fixed>,
    /// Entries pushed as fixed-buffer reads.
    fixed_reads: AtomicU64,
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
            fixed: OnceLock::new(),
            fixed_reads: AtomicU64::new(0),
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

impl Uring {
    /// Whether reads of scattered frames go as `READV_FIXED` (an arena is
    /// attached and the kernel has the opcode, Linux 6.15).
    pub fn readv_fixed(&self) -> bool {
        self.shared.fixed.get().is_some_and(|f| f.vectored)
    }
}

impl Shared {
    /// Pushes one read entry for slot `id` and enters the kernel: into
    /// registered buffer `fixed.0` (`READV_FIXED` if `fixed.1`), or `READV`.
    fn push_read(
        &self,
        id: u32,
        fd: i32,
        iov: &[libc::iovec],
        fixed: Option<(u16, bool)>,
        offset: u64,
        (flags, known_miss): (i32, bool),
    ) {
        let sqe_flags = if known_miss {
            io_uring::squeue::Flags::ASYNC
        } else {
            io_uring::squeue::Flags::empty()
        };
        let entry = match fixed {
            Some((index, false)) => opcode::ReadFixed::new(
                types::Fd(fd),
                iov[0].iov_base.cast(),
                iov[0].iov_len as u32,
                index,
            )
            .offset(offset)
            .rw_flags(flags)
            .build(),
            Some((index, true)) => {
                opcode::ReadvFixed::new(types::Fd(fd), iov.as_ptr(), iov.len() as u32, index)
                    .offset(offset)
                    .rw_flags(flags)
                    .build()
            }
            None => opcode::Readv::new(types::Fd(fd), iov.as_ptr(), iov.len() as u32)
                .offset(offset)
                .rw_flags(flags)
                .build(),
        };
        if fixed.is_some() {
            self.fixed_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.push(entry.flags(sqe_flags).user_data(id as u64));
    }

    /// For `op`'s read of `iov`: the registered buffer it lies in,
    /// registering its region first if need be, and whether it needs
    /// `READV_FIXED` (more than one iovec). `None`: read it with `READV`
    /// (not the attached arena's frames, or not in one region).
    fn fixed_for(&self, op: &ReadOp, iov: &[libc::iovec]) -> Option<(u16, bool)> {
        let fx = self.fixed.get()?;
        match &op.buf {
            IoBuf::Frames(f) if Arc::ptr_eq(f.arena(), &fx.arena) => {}
            _ => return None,
        }
        let first = iov.first()?;
        if iov.len() > 1 && !fx.vectored {
            return None;
        }
        let start = (first.iov_base as usize).checked_sub(fx.base)?;
        let region = start / REGION;
        let (lo, hi) = (
            fx.base + region * REGION,
            fx.base + ((region + 1) * REGION).min(fx.len),
        );
        let inside = |v: &libc::iovec| {
            let a = v.iov_base as usize;
            a >= lo && a.checked_add(v.iov_len).is_some_and(|e| e <= hi)
        };
        if !iov.iter().all(inside) || region > u16::MAX as usize {
            return None;
        }
        let flag = fx.registered.get(region)?;
        if !flag.load(Ordering::Acquire) {
            if fx.refused.load(Ordering::Relaxed) {
                return None;
            }
            let _g = fx.registering.lock().unwrap_or_else(|p| p.into_inner());
            if !flag.load(Ordering::Acquire) {
                let buf = libc::iovec {
                    iov_base: lo as *mut libc::c_void,
                    iov_len: hi - lo,
                };
                // SAFETY: the region is inside the arena's mapping, which
                // `fx.arena` keeps mapped for as long as the ring exists
                // (the ring is dropped first, with `Shared`); the kernel
                // pins its pages, and the cache writes a frame only through
                // reads like this one.
                match unsafe {
                    self.ring
                        .submitter()
                        .register_buffers_update(region as u32, &[buf], None)
                } {
                    Ok(()) => flag.store(true, Ordering::Release),
                    Err(_) => {
                        fx.refused.store(true, Ordering::Relaxed);
                        return None;
                    }
                }
            }
        }
        Some((region as u16, iov.len() > 1))
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
                    } else if rec.fixed
                        && matches!(-res, libc::EINVAL | libc::EFAULT | libc::EOPNOTSUPP)
                    {
                        // A kernel that takes the registration but not the
                        // read: registered buffers off, this one again as
                        // READV (which reports a real EINVAL itself).
                        if let Some(fx) = shared.fixed.get() {
                            fx.refused.store(true, Ordering::Relaxed);
                            fx.registered
                                .iter()
                                .for_each(|r| r.store(false, Ordering::Release));
                        }
                        Some(rec.progress)
                    } else {
                        None
                    }
                } else {
                    let n = res as usize;
                    let next = continue_after(rec.progress, n, rec.op.len, rec.op.source.fd());
                    rec.progress = next.unwrap_or(rec.progress + n);
                    next
                }
                .and_then(|done| {
                    // Only reads of a descriptor reach the ring (`submit`).
                    let fd = rec.op.source.fd()?.as_raw_fd();
                    rec.iov = IoVecs(rec.op.buf.iovecs(done, rec.op.len - done));
                    let fixed = shared.fixed_for(&rec.op, &rec.iov.0);
                    rec.fixed = fixed.is_some();
                    Some((
                        fd,
                        rec.iov.0.as_ptr(),
                        rec.iov.0.len(),
                        fixed,
                        rec.op.offset + done as u64,
                        (rec.op.flags, rec.op.known_miss),
                    ))
                })
            };
            match next {
                Some((fd, iov, cnt, fixed, offset, flags)) => {
                    // SAFETY: the iovecs belong to the slot's record, which
                    // stays in the table (their heap buffer unmoved) until
                    // this read's completion is reaped.
                    let iov = unsafe { std::slice::from_raw_parts(iov, cnt) };
                    shared.push_read(id, fd, iov, fixed, offset, flags);
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

    fn attach(&self, arena: &Arc<Arena>) -> bool {
        let sh = &self.shared;
        if sh.fixed.get().is_some() {
            return sh.fixed.get().is_some_and(|f| Arc::ptr_eq(&f.arena, arena));
        }
        let len = arena.frames() * arena.frame_size();
        let regions = len.div_ceil(REGION);
        // The kernel's limit on a table is 16384 buffers; a larger arena
        // (over 128 GiB) is read without them.
        if regions == 0 || regions > 1 << 14 {
            return false;
        }
        if sh
            .ring
            .submitter()
            .register_buffers_sparse(regions as u32)
            .is_err()
        {
            return false;
        }
        let mut probe = io_uring::Probe::new();
        let vectored = sh.ring.submitter().register_probe(&mut probe).is_ok()
            && probe.is_supported(opcode::ReadvFixed::CODE);
        let fixed = Fixed {
            arena: arena.clone(),
            base: arena.frame_ptr(0) as usize,
            len,
            registered: (0..regions).map(|_| AtomicBool::new(false)).collect(),
            registering: Mutex::new(()),
            refused: AtomicBool::new(false),
            vectored,
        };
        sh.fixed.set(fixed).is_ok()
    }

    fn fixed_reads(&self) -> u64 {
        self.shared.fixed_reads.load(Ordering::Relaxed)
    }

    fn submit(&self, mut op: ReadOp, done: Completion) {
        let Some(fd) = op.source.fd().map(|fd| fd.as_raw_fd()) else {
            // A source without a descriptor reads itself (`ReadSource`),
            // here: the ring has nothing to read it with.
            let result = super::read_blocking(&mut op);
            run_completion(done, op, result);
            return;
        };
        let iov = IoVecs(op.buf.iovecs(0, op.len));
        let (offset, flags) = (op.offset, (op.flags, op.known_miss));
        let (ptr, cnt) = (iov.0.as_ptr(), iov.0.len());
        let fixed = self.shared.fixed_for(&op, &iov.0);
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
                fixed: fixed.is_some(),
            });
            id
        };
        // SAFETY: as in `reap`: the iovecs stay in the slot's record until
        // the completion is reaped.
        let iov = unsafe { std::slice::from_raw_parts(ptr, cnt) };
        self.shared.push_read(id, fd, iov, fixed, offset, flags);
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
