//! The core of `ahead run` and `ahead trace`.
//!
//! `ahead run` preloads a small shim (crates/ahead-shim) into every
//! process, which loads this library with `dlopen` when the process first
//! makes a read readahead could help (at once for `--stats` and traces),
//! and from then on sends it every hooked call; this library finds the C
//! library's functions through the shim (`hooks::next_definition`).
//! Preloaded directly with `LD_PRELOAD`, it works alone as well.
//!
//! It interposes the read family of the C
//! library (`read`, `pread`, `readv`, `preadv`, `preadv2` and their 64-bit
//! and fortified variants), the write family and `copy_file_range` (for the
//! uncached mode), and the calls that make a descriptor mean another file
//! (`open*`, `creat*`, `close`, `close_range`, `dup*`, `fcntl(F_DUPFD*)`,
//! `fclose`). What a program sees does not change: every hooked call makes
//! the call it replaces, or (uncached mode) the same read or write with
//! `RWF_DONTCACHE`, and `errno` is kept.
//!
//! The mode comes from `AHEAD_RUN_MODE` (set by `ahead run`):
//! * `readahead`: each read of a regular file is queued, with no lock and
//!   no allocation, for a helper thread. The helper feeds the file's
//!   requests to ahead's readahead policy ([`ahead::ra::hints::Hinter`])
//!   and sends the kernel `POSIX_FADV_WILLNEED` hints for the windows it
//!   decides on streams the kernel does not follow (backward, strided,
//!   interleaved). The program's thread never waits for a hint.
//! * `uncached`: reads and writes of regular files leave the page cache as
//!   they found it (see `uncached/`).
//! * `trace`: each read of a regular file is recorded (see `helper/`).
//! * `off`: the hooks only pass calls on (`--off --stats`: counting; for
//!   `--off` alone nothing is preloaded).
//!
//! Descriptors are tracked in a fixed table indexed by descriptor number
//! (numbers past [`SLOTS`] are passed through untouched). A slot says
//! whether the descriptor is a regular file, learnt with one `fstat` at its
//! first read, and carries a generation that every open, close or dup onto
//! the number bumps, so that the helper never takes a reused number for the
//! file it was.

#![allow(clippy::missing_safety_doc)]

#[macro_use]
mod interface;
mod bufs;
mod helper;
mod hooks;
mod quiet;
mod ring;
mod uncached;
mod unwind;
mod walk;

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

use libc::c_int;

// Every function of the one table, defined in `hooks` with its type.
preload_interface!(core crate::hooks);

/// Descriptors the table tracks (0..SLOTS).
pub const SLOTS: usize = 1 << 16;

/// What a slot knows of its descriptor.
const UNKNOWN: u8 = 0;
const REGULAR: u8 = 1;
const OTHER: u8 = 2;
/// A regular file open with `O_DIRECT`: its reads bypass the page cache,
/// so nothing the core could put there would ever be read from it (a
/// backward reader of 64 KiB blocks took 1.6x as long when its windows
/// were hinted: every page read twice, once for nothing), and the kernel
/// reads nothing ahead for it either. Left alone as any other descriptor
/// that is not a regular file, until `F_SETFL` clears the flag.
const DIRECT: u8 = 3;

/// One descriptor number's state. A new slot is all zeros (the table is
/// zeroed as a whole, [`TABLE`]): each field's zero is its state before
/// the descriptor's first call.
pub(crate) struct Slot {
    pub(crate) gen: AtomicU32,
    kind: AtomicU8,
    /// The file's size when it was classified.
    pub(crate) size: AtomicU64,
    /// Readahead mode: whether the file needs the helper ([`quiet`]).
    pub(crate) quiet: AtomicU8,
    /// Readahead mode: where the last read the library saw ended.
    pub(crate) next: AtomicU64,
    /// Readahead mode: reads of a quiet cached file since it was looked at.
    pub(crate) reads: AtomicU32,
    /// Readahead mode: reads in a row that each began where the last
    /// ended ([`quiet::FORWARD_RUN`]).
    pub(crate) run: AtomicU32,
    /// Readahead mode: reads that did not (up to 2: the file is not read
    /// only forward).
    pub(crate) jumps: AtomicU8,
    /// Readahead mode: the descriptor's forward sweep
    /// ([`ahead::ra::hints::preload::Sweep`]).
    pub(crate) sweep: quiet::SweepSlot,
    /// Readahead mode: reads in a row the helper found nothing to hint for
    /// (written by the helper; [`ahead::ra::hints::preload::MUTE_AFTER`]).
    pub(crate) idle: AtomicU32,
    /// Readahead mode: reads counted while muted ([`quiet::pass`]).
    pub(crate) muted: AtomicU32,
    /// Readahead mode with `--stats`: a read of the file was sent to the
    /// helper (the first always is, so that every file has its line).
    pub(crate) noted: AtomicU8,
    /// Readahead mode: the first read that needed the helper, held until a
    /// second one does ([`quiet::hold`]).
    pub(crate) held: AtomicU8,
    pub(crate) held_at: AtomicU64,
    pub(crate) held_len: AtomicU64,
    /// Uncached mode: RWF_DONTCACHE was refused on this descriptor.
    pub(crate) no_dontcache: AtomicU8,
    /// Uncached mode's write fallback: bytes written since the last flush.
    pub(crate) unflushed: AtomicU64,
    /// Uncached mode's read fallback: see [`uncached`].
    pub(crate) snap: uncached::SnapSlot,
    /// Readahead mode: the descriptor's file position as the library
    /// follows it ([`position`]), plus one; [`NO_POS`] where not known
    /// (zero, so that the table's initial value stays all zeros: .bss).
    pub(crate) pos: AtomicU64,
    /// Readahead mode: reads at the file position since the descriptor
    /// was opened, for [`position`]'s checks.
    pub(crate) pos_reads: AtomicU32,
    /// Readahead mode: a check found the followed position wrong (another
    /// descriptor or process moves it): asked of the kernel at every read.
    pub(crate) pos_wrong: AtomicU8,
    /// Readahead mode: the span of the file's hinted pages, while some are
    /// not yet read (written by the helper; [`quiet::hinted`]).
    pub(crate) hinted: AtomicU64,
    /// Readahead mode: the trial of the kernel's readahead on a walk
    /// ([`ahead::ra::hints::trial`], [`walk`]).
    pub(crate) trial: walk::TrialSlot,
}

/// [`Slot::pos`]: not known.
pub(crate) const NO_POS: u64 = 0;

/// Reads at the file position between two checks of the followed position
/// against the kernel's ([`position`]).
///
/// The library follows a descriptor's position through the calls that
/// move it (reads at the position, `lseek`; a write at the position, a
/// `copy_file_range` without offsets or a duplicate makes it unknown), so
/// that a read at the file position costs no system call of its own:
/// asking the kernel (`lseek(fd, 0, SEEK_CUR)`) at every read made `dd
/// bs=577` of 12 MiB 1.26-1.34x slower under `ahead run` on the steady
/// device (seed 75, case 7), 21,500 system calls more. What it cannot see
/// moves the position too: a duplicate or a forked child reading the same
/// open file, `sendfile`, stdio's own reads. So every `POS_CHECK`-th read
/// asks the kernel anyway, and a descriptor found wrong is asked at every
/// read from then on. Between checks a wrong position only misplaces what
/// the helper is told (the program's reads are its own), which the file's
/// speculation budget bounds like any other wrong guess.
pub(crate) const POS_CHECK: u32 = 64;

/// How many times [`position`] asked the kernel (`--stats`:
/// `positions_asked`).
pub(crate) static POSITIONS_ASKED: AtomicU64 = AtomicU64::new(0);

/// The file position of `fd` (slot `slot`) before a read at it: the one
/// the library followed, or the kernel's where it is not known, is found
/// wrong, or is due for a check ([`POS_CHECK`]).
pub(crate) fn position(slot: &Slot, fd: c_int) -> Option<u64> {
    let n = slot
        .pos_reads
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(1);
    let followed = slot.pos.load(Ordering::Relaxed);
    if followed != NO_POS
        && slot.pos_wrong.load(Ordering::Relaxed) == 0
        && !n.is_multiple_of(POS_CHECK)
    {
        return Some(followed - 1);
    }
    POSITIONS_ASKED.fetch_add(1, Ordering::Relaxed);
    let real = helper::position(fd)?;
    if followed != NO_POS && followed - 1 != real {
        slot.pos_wrong.store(1, Ordering::Relaxed);
    }
    slot.pos.store(real.saturating_add(1), Ordering::Relaxed);
    Some(real)
}

/// A read at the position of `fd` returned `r`: the position moved by it.
/// (Threads reading one descriptor at its position at once race here as
/// they do for the position itself; a check finds what that loses.)
pub(crate) fn moved_by(slot: &Slot, r: isize) {
    let p = slot.pos.load(Ordering::Relaxed);
    if r > 0 && p != NO_POS {
        slot.pos
            .store(p.saturating_add(r as u64), Ordering::Relaxed);
    }
}

/// The position of the descriptor of `slot` is not followed for now.
pub(crate) fn forget_position(slot: &Slot) {
    if slot.pos.load(Ordering::Relaxed) != NO_POS {
        slot.pos.store(NO_POS, Ordering::Relaxed);
    }
}

/// The position of `fd` is now `at` (an `lseek`'s answer), or not known
/// (None: a write at it, a copy without offsets, a duplicate).
pub(crate) fn position_is(fd: c_int, at: Option<u64>) {
    if let Some(s) = slot(fd) {
        let at = at.map_or(NO_POS, |a| a.saturating_add(1));
        if s.pos.load(Ordering::Relaxed) != at {
            s.pos.store(at, Ordering::Relaxed);
        }
    }
}

/// The slots, all zeros at start, so that the table costs the library
/// file nothing (.bss) and a process only the pages of the descriptors it
/// uses.
///
/// Written as an array of slots made by a `const fn`, that depended on
/// the optimiser: the compiler leaves a struct's padding undefined, and a
/// constant with undefined bytes is not all zeros to it. The core built
/// for `ahead run` (with LTO) had the table in .bss; the workspace's own
/// build of the same source put its 10 MiB in .data, an 11 MB file where
/// the code is under 1 MB. Zeroed as a whole, padding included, it is .bss
/// in every build.
struct Table(std::mem::MaybeUninit<[Slot; SLOTS]>);

// SAFETY: only ever read as `[Slot; SLOTS]` ([`slot`]), whose fields are
// atomics: shared between threads by design.
unsafe impl Sync for Table {}

// The named states a new slot starts in must be zero, so that the zeroed
// table is a table of new slots.
const _: () = assert!(
    UNKNOWN == 0
        && quiet::ACTIVE == 0
        && quiet::NONE_HELD == 0
        && NO_POS == 0
        && quiet::NO_HINTS == 0
);

static TABLE: Table = Table(std::mem::MaybeUninit::zeroed());

pub(crate) fn slot(fd: c_int) -> Option<&'static Slot> {
    // SAFETY: all zeros is a valid `Slot`: every field is an atomic
    // integer, bool or pointer (zero, false, null), in structs of the same.
    // It is a new slot's state (the named states asserted zero above).
    let table: &'static [Slot; SLOTS] = unsafe { TABLE.0.assume_init_ref() };
    usize::try_from(fd).ok().and_then(|i| table.get(i))
}

/// The descriptor now means another file (or none).
pub(crate) fn reset(fd: c_int) {
    if let Some(s) = slot(fd) {
        s.kind.store(UNKNOWN, Ordering::Release);
        s.quiet.store(quiet::ACTIVE, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        s.reads.store(0, Ordering::Relaxed);
        s.run.store(0, Ordering::Relaxed);
        s.jumps.store(0, Ordering::Relaxed);
        s.sweep.forget();
        s.idle.store(0, Ordering::Relaxed);
        s.muted.store(0, Ordering::Relaxed);
        s.noted.store(0, Ordering::Relaxed);
        s.held.store(quiet::NONE_HELD, Ordering::Relaxed);
        s.no_dontcache.store(0, Ordering::Relaxed);
        s.unflushed.store(0, Ordering::Relaxed);
        s.gen.fetch_add(1, Ordering::AcqRel);
        s.snap.forget();
        s.pos.store(NO_POS, Ordering::Relaxed);
        s.pos_reads.store(0, Ordering::Relaxed);
        s.pos_wrong.store(0, Ordering::Relaxed);
        s.hinted.store(quiet::NO_HINTS, Ordering::Relaxed);
        s.trial.forget();
    }
}

/// If `fd` is a tracked regular file: its slot and generation.
pub(crate) fn regular(fd: c_int) -> Option<(&'static Slot, u32)> {
    let s = slot(fd)?;
    match s.kind.load(Ordering::Acquire) {
        REGULAR => Some((s, s.gen.load(Ordering::Acquire))),
        OTHER | DIRECT => None,
        _ => {
            let gen = s.gen.load(Ordering::Acquire);
            // SAFETY: fstat on a number the program passed; a closed one
            // answers EBADF.
            let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let (kind, size) = match rustix::fs::fstat(bfd) {
                Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() => {
                    if direct(bfd) {
                        (DIRECT, 0)
                    } else {
                        (REGULAR, st.st_size as u64)
                    }
                }
                Ok(_) => (OTHER, 0),
                Err(_) => return None,
            };
            if s.gen.load(Ordering::Acquire) == gen {
                s.size.store(size, Ordering::Relaxed);
                if kind == REGULAR && mode() == Mode::Readahead {
                    s.quiet.store(quiet::classify(bfd, size), Ordering::Relaxed);
                }
                let won = s
                    .kind
                    .compare_exchange(UNKNOWN, kind, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
                if won && kind == REGULAR {
                    // Its name now, while the descriptor is surely open:
                    // the helper may come to it after the program closed it.
                    helper::name(fd, gen);
                }
            }
            (kind == REGULAR).then_some((s, gen))
        }
    }
}

/// Whether a descriptor reads with `O_DIRECT` (one `fcntl`, the system
/// call, not the hooked C function).
fn direct(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::DIRECT))
}

/// `F_SETFL` set `fd`'s flags to `flags`: a regular file's descriptor that
/// now reads with `O_DIRECT` is left alone from its next call, and one
/// that no longer does is learnt again at its next read. Keeps errno.
pub(crate) fn flags_set(fd: c_int, flags: usize) {
    let Some(s) = slot(fd) else { return };
    let now = flags & libc::O_DIRECT as usize != 0;
    match s.kind.load(Ordering::Acquire) {
        REGULAR if now => {
            let _ = s
                .kind
                .compare_exchange(REGULAR, DIRECT, Ordering::AcqRel, Ordering::Relaxed);
        }
        DIRECT if !now => reset(fd),
        _ => {}
    }
}

/// What the library does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Mode {
    Off = 0,
    Readahead = 1,
    Uncached = 2,
    Trace = 3,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Off as u8);
/// Uncached mode may use RWF_DONTCACHE (`AHEAD_RUN_DONTCACHE=0` says not).
static DONTCACHE: AtomicU8 = AtomicU8::new(1);

pub(crate) fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Readahead,
        2 => Mode::Uncached,
        3 => Mode::Trace,
        _ => Mode::Off,
    }
}

pub(crate) fn dontcache_allowed() -> bool {
    DONTCACHE.load(Ordering::Relaxed) == 1
}

thread_local! {
    /// Set on the helper thread and inside a hook's own work: hooks reached
    /// from there pass the call on and do nothing else.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread may act (not the helper, not inside a hook).
pub(crate) fn may_act() -> bool {
    BUSY.try_with(|b| !b.get()).unwrap_or(false)
}

pub(crate) fn set_busy_forever() {
    let _ = BUSY.try_with(|b| b.set(true));
}

/// The C library's `errno`.
pub(crate) fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno location is always valid.
    unsafe { *libc::__errno_location() }
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// The helper's runtime of this process (replaced in a fork's child).
pub(crate) static RUNTIME: AtomicPtr<helper::Runtime> = AtomicPtr::new(std::ptr::null_mut());

/// An environment variable's bytes, read with the C library's `getenv`:
/// no allocation and no lock, and none of the Rust standard library's
/// environment code, so that loading the library touches as few pages as
/// it can (every process under `ahead run` pays for them).
fn env_bytes(name: &std::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: a NUL-terminated name.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv's answer is a NUL-terminated string of the
    // environment, which stays while the program does not change that
    // variable (it does not before its constructors have run).
    Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// A path variable as a `String` (statistics, trace), if set and UTF-8.
fn env_string(name: &std::ffi::CStr) -> Option<String> {
    env_bytes(name).and_then(|b| std::str::from_utf8(b).ok().map(str::to_owned))
}

extern "C" fn init() {
    let mode = match env_bytes(c"AHEAD_RUN_MODE") {
        Some(b"readahead") => Mode::Readahead,
        Some(b"uncached") => Mode::Uncached,
        Some(b"trace") => Mode::Trace,
        _ => Mode::Off,
    };
    let stats = env_string(c"AHEAD_RUN_STATS");
    let trace = env_string(c"AHEAD_RUN_TRACE");
    if mode == Mode::Off && stats.is_none() && trace.is_none() {
        // Nothing to do in this process: no helper, no fork handler.
        return;
    }
    set_busy_forever_during(|| {
        if env_bytes(c"AHEAD_RUN_DONTCACHE") == Some(b"0") {
            DONTCACHE.store(0, Ordering::Relaxed);
        }
        match env_bytes(c"AHEAD_RUN_KERNEL_RA") {
            Some(b"keep") => walk::KERNEL_RA.store(walk::KEEP, Ordering::Relaxed),
            Some(b"off") => walk::KERNEL_RA.store(walk::OFF, Ordering::Relaxed),
            _ => {}
        }
        quiet::STATS.store(stats.is_some(), Ordering::Relaxed);
        helper::install(helper::Config { stats, trace });
        MODE.store(mode as u8, Ordering::Release);
        PID.store(
            rustix::process::getpid().as_raw_nonzero().get(),
            Ordering::Relaxed,
        );
        // SAFETY: registering plain functions.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
        }
    });
}

/// The process this library's state belongs to: set at load and in a
/// child after `fork` (the fork handler). A `vfork` child, which shares
/// the parent's memory and runs no fork handler, has another pid.
static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The outputs were written (at `_exit` or at exit, whichever came first).
static FINISHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `f` with this thread marked as inside the library.
pub(crate) fn busy_during<T>(f: impl FnOnce() -> T) -> T {
    let was = BUSY.try_with(|b| b.replace(true)).unwrap_or(true);
    let r = f();
    let _ = BUSY.try_with(|b| b.set(was));
    r
}

fn set_busy_forever_during(f: impl FnOnce()) {
    let was = BUSY.try_with(|b| b.replace(true)).unwrap_or(true);
    f();
    let _ = BUSY.try_with(|b| b.set(was));
}

/// Called by the shim (crates/ahead-shim) just after it loaded this
/// library for a read of `fd`: the read of `len` bytes at `offset` it
/// passed on before, the descriptor's first that was not forward. The
/// policy sees it with the read that follows, as if this library had held
/// it (`quiet::hold`).
#[no_mangle]
pub extern "C" fn ahead_core_held(fd: c_int, offset: u64, len: u64) {
    if mode() != Mode::Readahead || !may_act() {
        return;
    }
    busy_during(|| {
        if let Some((slot, _)) = regular(fd) {
            quiet::held_before(slot, offset, len);
        }
    });
}

extern "C" fn after_fork_child() {
    PID.store(
        rustix::process::getpid().as_raw_nonzero().get(),
        Ordering::Relaxed,
    );
    FINISHED.store(false, Ordering::Relaxed);
    helper::after_fork();
}

extern "C" fn fini() {
    finish();
}

/// What a process does at its end: uncached mode's restoring, and the
/// statistics and trace written. Once per process.
fn finish() {
    if FINISHED.swap(true, Ordering::AcqRel) {
        return;
    }
    if mode() == Mode::Uncached {
        busy_during(uncached::at_exit);
    }
    helper::at_exit();
}

/// Called by the shim's `_exit` and `_Exit`, which end a process without
/// the exit handlers that call `fini`: fio's job processes and Python's
/// `os._exit` in `multiprocessing`'s children end so, and their files'
/// statistics and traces were lost. Does nothing in a `vfork` child (it
/// shares its parent's memory: this library's state is the parent's) or
/// where any signal is blocked, as it is in a signal handler: the outputs
/// are written with allocations and locks, which a handler must not take.
#[no_mangle]
pub extern "C" fn ahead_core_exit() {
    if PID.load(Ordering::Relaxed) != rustix::process::getpid().as_raw_nonzero().get() {
        return;
    }
    // SAFETY: an all-zero sigset_t is valid; pthread_sigmask with no new
    // set only reads the calling thread's mask into `old`, and sigismember
    // reads it.
    let blocked = unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old) != 0
            || (1..=64).any(|sig| libc::sigismember(&old, sig) == 1)
    };
    if blocked {
        return;
    }
    busy_during(finish);
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
