//! Readahead mode: the hooks' part of the trial of the kernel's readahead
//! on a sparse forward walk ([`ahead::ra::hints::trial`]; the trial itself
//! runs in the helper).
//!
//! * **Timing.** While the helper asks, each read of the descriptor is
//!   timed (two clock reads of the vDSO) and counted ([`TrialSlot`]).
//! * **Back on for a stream.** Where a trial turned the kernel's readahead
//!   off, [`ahead::ra::hints::trial::REVERT_RUN`] reads in a row that
//!   continue the last, or a dense forward sweep, turn it on again at once
//!   (`quiet::pass`).
//! * **Ending the kernel's stream.** `POSIX_FADV_RANDOM` stops the kernel
//!   from starting windows at misses, but a window already read carries a
//!   marked folio, and a read that meets it starts the next window
//!   whatever the advice (`page_cache_async_ra` looks only at the file's
//!   `ra_pages`). The helper drops what lies ahead (`POSIX_FADV_DONTNEED`),
//!   but a folio still being read cannot be dropped, and the reader,
//!   faster than the device, reaches it. So for a while after a drop
//!   ([`TrialSlot::guard`]) a read of the descriptor is made here:
//!   first with `RWF_NOWAIT`, which copies cached pages and never starts
//!   readahead (the kernel sets `IOCB_NOIO` for it); where that cannot
//!   answer, the folios around the read are dropped if they can be, and
//!   the read made plainly once none of its own pages is cached (with
//!   readahead off, a miss reads what it asks and marks nothing); while
//!   one is still being read, it waits for it ([`WAIT`]) and tries
//!   again. After each such read the window ahead is looked at
//!   (cachestat): pages there are the stream still going, dropped again;
//!   none, and the guard ends. In replays of
//!   the IN-list's reads with the switch at reads 2,400 to 3,800, this
//!   ended the stream every time; the drop alone, one time in three.

use std::ffi::{c_int, c_void};
use std::num::NonZeroU64;

use ahead::ra::hints::trial::{self, Trial};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// How the kernel's readahead is treated on walks (`ahead run
/// --kernel-readahead`, passed as `AHEAD_RUN_KERNEL_RA`): [`TRY`],
/// [`KEEP`] or [`OFF`].
pub(crate) static KERNEL_RA: AtomicU8 = AtomicU8::new(TRY);
/// Weighed by a trial (the default).
pub(crate) const TRY: u8 = 0;
/// Never touched.
pub(crate) const KEEP: u8 = 1;
/// Off wherever the kernel streams a walk, unweighed.
pub(crate) const OFF: u8 = 2;

/// Whether this kernel has what the trial needs: cachestat (Linux 6.5),
/// asked once, of the first descriptor a trial is for.
pub(crate) fn supported(fd: std::ffi::c_int) -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // SAFETY: a number the program read; closed since, it answers
        // EBADF, which says the call exists as well.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        ahead::residency::cachestat_supported(fd)
    })
}

/// The span the guard drops and reads around: 2 MiB, the largest folio
/// (a folio partly outside a `DONTNEED` range is not dropped).
const SPAN: u64 = 2 << 20;

/// Pages cached in the window ahead of a guarded read that say the
/// kernel's stream still goes: 256 (1 MiB, more than the reads of a walk
/// leave there).
const STREAM_PAGES: u64 = 256;

/// How long a guarded read waits for pages being read before it tries
/// again: 200 µs.
const WAIT: std::time::Duration = std::time::Duration::from_micros(200);

/// Tries of a guarded read before it reads plainly whatever is there:
/// 500 (about 100 ms of waits, longer than the steady device's throttle
/// holds a read).
const TRIES: u32 = 500;

/// Guarded reads after a drop before the guard ends whatever it finds:
/// 1,024.
const GUARDED_READS: u32 = 1024;

/// A descriptor's part of the trial.
#[derive(Default)]
pub(crate) struct TrialSlot {
    /// The helper asks for the reads to be timed.
    timed: AtomicBool,
    /// Readahead is off for the descriptor by a trial.
    off: AtomicBool,
    /// The program advised the file itself (or duplicated the descriptor
    /// while readahead was off): no trial again.
    advised: AtomicBool,
    ns: AtomicU64,
    reads: AtomicU32,
    fast: AtomicU32,
    /// Reads before this byte are guarded (0: none).
    guard_until: AtomicU64,
    /// The window ahead that the guard watches, in bytes.
    window: AtomicU64,
    /// Guarded reads left.
    guarded: AtomicU32,
}

impl TrialSlot {
    /// The descriptor means another file.
    pub(crate) fn forget(&self) {
        self.timed.store(false, Ordering::Relaxed);
        self.off.store(false, Ordering::Relaxed);
        self.advised.store(false, Ordering::Relaxed);
        self.guard_until.store(0, Ordering::Relaxed);
    }

    /// Whether the hooks are to time this descriptor's reads.
    pub(crate) fn timing(&self) -> bool {
        self.timed.load(Ordering::Relaxed)
    }

    /// A timed read that took `ns` and returned `r`.
    pub(crate) fn timed(&self, ns: u64, r: isize) {
        let bytes = r.max(0) as u64;
        self.ns.fetch_add(ns, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
        if ahead::ra::hints::trial::fast(ns, bytes) {
            self.fast.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The timed reads so far (the counts wrap at 2^32 reads; the trial
    /// takes differences of a few hundred).
    pub(crate) fn clock(&self) -> ahead::ra::hints::trial::Clock {
        ahead::ra::hints::trial::Clock {
            ns: self.ns.load(Ordering::Relaxed),
            reads: u64::from(self.reads.load(Ordering::Relaxed)),
            fast: u64::from(self.fast.load(Ordering::Relaxed)),
        }
    }

    /// The helper's step: time or not.
    pub(crate) fn set_timing(&self, on: bool) {
        self.timed.store(on, Ordering::Relaxed);
    }

    /// The helper's step: readahead off or on.
    pub(crate) fn set_off(&self, off: bool) {
        self.off.store(off, Ordering::Relaxed);
        if !off {
            self.guard_until.store(0, Ordering::Relaxed);
        }
    }

    /// The helper dropped `[from, to)`: reads before `to` are guarded.
    pub(crate) fn guard(&self, from: u64, to: u64) {
        self.window
            .store(to.saturating_sub(from).max(SPAN), Ordering::Relaxed);
        self.guarded.store(GUARDED_READS, Ordering::Relaxed);
        self.guard_until.store(to, Ordering::Relaxed);
    }

    /// Whether a trial turned the kernel's readahead off for the
    /// descriptor and it is still off.
    pub(crate) fn off(&self) -> bool {
        self.off.load(Ordering::Relaxed)
    }

    /// Whether the program advised the file itself.
    pub(crate) fn advised(&self) -> bool {
        self.advised.load(Ordering::Relaxed)
    }

    /// The program advised the file itself: its advice stands.
    pub(crate) fn program_advised(&self) {
        self.advised.store(true, Ordering::Relaxed);
        self.off.store(false, Ordering::Relaxed);
        self.timed.store(false, Ordering::Relaxed);
        self.guard_until.store(0, Ordering::Relaxed);
    }

    /// Turns the kernel's readahead back on for `fd`, if a trial had it
    /// off (a stream began, or the descriptor is about to be shared).
    /// Keeps `errno`.
    pub(crate) fn back_on(&self, fd: BorrowedFd<'_>) {
        if self.off.load(Ordering::Relaxed) && self.off.swap(false, Ordering::Relaxed) {
            self.guard_until.store(0, Ordering::Relaxed);
            let e = crate::errno();
            let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::Normal);
            crate::set_errno(e);
        }
    }

    /// Whether reads are guarded (the trial's transition).
    pub(crate) fn guarding(&self) -> bool {
        self.guard_until.load(Ordering::Relaxed) != 0
    }

    /// Whether a read at `offset` is to be made by [`guarded_read`].
    pub(crate) fn guards(&self, offset: u64) -> bool {
        let until = self.guard_until.load(Ordering::Relaxed);
        until != 0 && offset < until && self.off.load(Ordering::Relaxed)
    }
}

/// `old` was duplicated: a descriptor that shares its open file would read
/// with the kernel's readahead off, unseen by the trial, so it goes back
/// on and no trial runs on `old` again.
pub(crate) fn duplicated(old: std::ffi::c_int) {
    let Some(slot) = crate::slot(old) else { return };
    if slot.trial.off() {
        // SAFETY: the descriptor the program just duplicated.
        let fd = unsafe { BorrowedFd::borrow_raw(old) };
        slot.trial.back_on(fd);
        slot.trial.program_advised();
    }
}

/// The trial for a descriptor the helper begins to follow, in pages of
/// `page` bytes: none where told to keep the kernel's readahead, where the
/// kernel has no cachestat, or where the program advised the file before
/// this library was loaded.
pub(crate) fn trial(fd: c_int, page: u64) -> Option<Trial> {
    let how = KERNEL_RA.load(Ordering::Relaxed);
    if how == KEEP || !supported(fd) || advised_before(fd) {
        return None;
    }
    Some(if how == OFF {
        Trial::forced(page)
    } else {
        Trial::new(page)
    })
}

/// Whether the program advised `fd` how to read ahead before this library
/// was loaded (the shim's `ahead_shim_advised`; false without the shim).
pub(crate) fn advised_before(fd: std::ffi::c_int) -> bool {
    /// The shim's function.
    static SHIM: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(shim) = crate::hooks::shim_symbol(c"ahead_shim_advised", &SHIM) else {
        return false;
    };
    // SAFETY: the shim's `ahead_shim_advised` has this signature.
    let f = unsafe {
        std::mem::transmute::<usize, extern "C" fn(std::ffi::c_int) -> std::ffi::c_int>(shim)
    };
    f(fd) != 0
}

/// Readahead mode: a read made by the guard that ends the kernel's stream
/// on a walk ([`guarded_read`]), timed as the plain read would
/// be, and the file position moved as it would (`at_pos`).
pub(crate) fn guarded(
    slot: &crate::Slot,
    fd: std::os::fd::BorrowedFd<'_>,
    buf: *const c_void,
    n: usize,
    offset: u64,
    at_pos: bool,
    timing: bool,
) -> isize {
    let started = timing.then(std::time::Instant::now);
    // SAFETY: the program's buffer, valid for `n` bytes as its read
    // promised.
    let r = unsafe { guarded_read(slot, fd, buf.cast_mut(), n, offset) };
    if let Some(t0) = started {
        slot.trial.timed(t0.elapsed().as_nanos() as u64, r);
    }
    if at_pos && r >= 0 {
        let e = crate::errno();
        let to = offset.saturating_add(r as u64);
        let _ = rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(to));
        crate::moved_by(slot, r);
        crate::set_errno(e);
    }
    r
}

/// One read's step of the descriptor's trial of the kernel's readahead
/// ([`ahead::ra::hints::trial`]): the hooks' timing started or stopped,
/// the kernel advised.
pub(crate) fn step(t: &mut Trial, fd: c_int, offset: u64, len: u64, hinted: bool) {
    let Some(slot) = crate::slot(fd) else { return };
    let step = if slot.trial.advised() {
        t.advised()
    } else if hinted {
        t.hinted()
    } else {
        t.read(
            offset,
            len,
            slot.trial.clock(),
            slot.trial.off(),
            slot.trial.guarding(),
            || window_ahead(fd),
        )
    };
    if let Some(on) = step.time {
        slot.trial.set_timing(on);
    }
    // SAFETY: the caller checked the generation: the number still means
    // the file (advice that loses a race with a close goes to whatever
    // took the number, and changes how it is read ahead or what stays
    // cached, never its bytes).
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    if let Some(advice) = step.advise {
        let (advice, off) = match advice {
            trial::Advice::Random => (rustix::fs::Advice::Random, true),
            trial::Advice::Normal => (rustix::fs::Advice::Normal, false),
        };
        if rustix::fs::fadvise(bfd, 0, None, advice).is_err() {
            return;
        }
        slot.trial.set_off(off);
    }
    if let Some((from, to)) = step.drop.filter(|_| slot.trial.off()) {
        // From where the program has read to by now, which may be past
        // the read the helper is answering.
        let page = rustix::param::page_size() as u64;
        let at = slot.next.load(Ordering::Relaxed).next_multiple_of(page);
        let (from, to) = (
            from.max(at),
            to.saturating_sub(from).saturating_add(from.max(at)),
        );
        // The kernel's window ahead of the reader, and the mark in it that
        // would start the next. Clean pages only: dirty ones are written
        // back, not dropped.
        let _ = rustix::fs::fadvise(
            bfd,
            from,
            NonZeroU64::new(to.saturating_sub(from)),
            rustix::fs::Advice::DontNeed,
        );
        // What the drop could not take (folios still being read), the
        // hooks keep the reader from meeting ([`crate::walk`]).
        slot.trial.guard(from, to);
    }
}

/// How far past a read the kernel may have read ahead of it: twice the
/// largest window of the file's device (sysfs's `read_ahead_kb`), or 16
/// MiB where sysfs does not say.
fn window_ahead(fd: c_int) -> u64 {
    // SAFETY: a number; a closed one answers EBADF.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::fs::fstat(bfd)
        .ok()
        .and_then(|st| ahead::features::device_of(st.st_dev))
        .and_then(|d| d.read_ahead_kb)
        .map_or(16 << 20, |kb| 2 * (kb << 10))
}

/// Pages of `[from, to)` in the cache, if cachestat can say.
fn cached(fd: BorrowedFd<'_>, from: u64, to: u64) -> Option<u64> {
    ahead::residency::cached_pages(fd, from, to.saturating_sub(from))
}

fn drop_range(fd: BorrowedFd<'_>, from: u64, to: u64) {
    let _ = rustix::fs::fadvise(
        fd,
        from,
        std::num::NonZeroU64::new(to.saturating_sub(from)),
        rustix::fs::Advice::DontNeed,
    );
}

/// Reads `n` bytes at `offset` of `fd` into `buf` for a guarded descriptor
/// (see the module's documentation), continuing short reads until `n` or
/// the end of the file, as the plain read it replaces would have returned.
/// Returns what that read returns (`-1` with `errno` on an error).
///
/// # Safety
/// `buf` must be valid for writes of `n` bytes, as the program's read
/// promised.
pub(crate) unsafe fn guarded_read(
    slot: &crate::Slot,
    fd: BorrowedFd<'_>,
    buf: *mut c_void,
    n: usize,
    offset: u64,
) -> isize {
    // SAFETY: the caller's promise.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    let mut done = 0;
    let mut tries = 0;
    while done < n {
        let at = offset + done as u64;
        let nowait = (tries < TRIES).then(|| {
            let mut iov = [std::io::IoSliceMut::new(&mut buf[done..])];
            rustix::io::preadv2(fd, &mut iov, at, rustix::io::ReadWriteFlags::NOWAIT)
        });
        match nowait {
            Some(Ok(0)) => break,
            Some(Ok(k)) => {
                done += k;
                continue;
            }
            Some(Err(rustix::io::Errno::INTR)) => continue,
            Some(Err(rustix::io::Errno::AGAIN)) | None => {}
            // No RWF_NOWAIT here, or a real error: the plain read answers.
            Some(Err(_)) => tries = TRIES,
        }
        // The read's own pages: a folio of them still cached (the NOWAIT
        // read could not take it) is being read, or carries the mark.
        let end = offset + n as u64;
        if tries < TRIES && cached(fd, at, end) != Some(0) {
            // The largest folio holding them is within the span around.
            drop_range(
                fd,
                at / SPAN * SPAN,
                end.div_ceil(SPAN).saturating_mul(SPAN),
            );
            if cached(fd, at, end).is_some_and(|c| c > 0) {
                // Still being read (or dirty): wait for it.
                tries += 1;
                std::thread::sleep(WAIT);
                continue;
            }
        }
        match rustix::io::pread(fd, &mut buf[done..], at) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) if done == 0 => {
                crate::set_errno(e.raw_os_error());
                return -1;
            }
            Err(_) => break,
        }
    }
    watch_ahead(slot, fd, offset + done as u64);
    done as isize
}

/// After a guarded read that ended at `end`: the window ahead still
/// cached is the stream going on (dropped again); none, and the guard
/// ends.
fn watch_ahead(slot: &crate::Slot, fd: BorrowedFd<'_>, end: u64) {
    let t = &slot.trial;
    let window = t.window.load(Ordering::Relaxed);
    let next = end.div_ceil(SPAN).saturating_mul(SPAN);
    let left = t.guarded.load(Ordering::Relaxed).saturating_sub(1);
    t.guarded.store(left, Ordering::Relaxed);
    match cached(fd, next, next.saturating_add(window)) {
        Some(c) if c > STREAM_PAGES && left > 0 => {
            drop_range(fd, next, next.saturating_add(window));
            t.guard_until
                .store(next.saturating_add(window), Ordering::Relaxed);
        }
        _ => {
            let until = t.guard_until.load(Ordering::Relaxed);
            if left == 0 || end >= until.saturating_sub(window / 2) {
                t.guard_until.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A guarded read returns what a plain read would: the bytes asked,
    /// a short count at the end of the file, 0 past it, with readahead off
    /// and pages around the read dropped on the way.
    #[test]
    fn a_guarded_read_returns_what_a_plain_read_would() {
        let path = std::env::temp_dir().join(format!("ahead-walk-{}", std::process::id()));
        let bytes: Vec<u8> = (0..(3 * SPAN + 1000)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let fd = file.as_fd();
        if !supported(std::os::fd::AsRawFd::as_raw_fd(&file)) {
            eprintln!("SKIP: no cachestat(2) here");
            return;
        }
        let slot = crate::slot(std::os::fd::AsRawFd::as_raw_fd(&file)).unwrap();
        let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::Random);
        slot.trial.set_off(true);
        slot.trial.guard(0, 4 * SPAN);
        let size = bytes.len() as u64;
        for (offset, n) in [
            (5000u64, 70_000usize),
            (SPAN - 10, 20),
            (size - 300, 4096),
            (size + 5, 10),
        ] {
            let mut buf = vec![0u8; n];
            // SAFETY: `buf` holds `n` bytes.
            let r = unsafe { guarded_read(slot, fd, buf.as_mut_ptr().cast(), n, offset) };
            let want =
                &bytes[(offset.min(size) as usize)..((offset + n as u64).min(size) as usize)];
            assert_eq!(r, want.len() as isize, "at {offset}");
            assert_eq!(&buf[..want.len()], want, "at {offset}");
        }
        slot.trial.forget();
    }
}
