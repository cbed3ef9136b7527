//! What the shim knows of each descriptor while the core is not loaded:
//! enough to tell, without a system call, that a read continues the last
//! one; and whether its file is small or cached, which the core would
//! pass every read of on too ([`classify`]).
//!
//! A forward read is the kernel's to follow (its own readahead does), and
//! the core passes it over too. So a process whose reads of regular files
//! all continue where the descriptor's last read ended (`cat`, `grep`, a
//! compiler reading its sources, Python reading its modules) never needs
//! the core, nor even an `fstat` per file. This holds for descriptors the
//! shim saw opened, whose every change of position it sees: reads and
//! `lseek` move it, `pread` does not. A descriptor that was inherited,
//! duplicated, opened by stdio (whose reads are internal to the C library)
//! or written at its position has a position the shim does not know, and
//! its first read of a regular file loads the core as before.
//!
//! A position the shim gets wrong (a forked child reading a shared
//! descriptor, `sendfile` moving it) never changes what the program sees:
//! at worst a read is taken for forward and passed over, or the core is
//! loaded where it was not needed.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use libc::c_int;

/// Descriptors tracked (0..SLOTS); others are never "forward".
const SLOTS: usize = 1 << 16;

/// The position is unknown.
const UNTRACKED: u8 = 0;
/// Opened here, every move of its position seen.
const TRACKED: u8 = 1;
/// A read found it is not a regular file (a pipe, a terminal).
const OTHER: u8 = 2;

/// Reads of a descriptor that are not forward passed on before the core is
/// loaded: the core is loaded at the ninth. Loading it costs a process
/// about 0.6 ms here (the library mapped, its queue made, a helper thread
/// started: a cold sqlite3 lookup of 7.7 ms took 0.74 ms longer with it,
/// medians of 41 alternated runs on this machine's disk). Eight reads of
/// a fast device take about that long (75 µs each under the steady
/// device's 20,000 IOPS), so a program that jumps fewer times in a file
/// could not win back
/// what the core costs even if every read were hinted: `tail -n` of a few
/// hundred lines, a database's header and a lookup or two. A stream of
/// more reads is seen by the core from its ninth, and the eighth is
/// handed to it first; reads that jump at random are held longer
/// ([`scattered`]). The simulator's model of the preload takes the same
/// number from `ahead::ra::hints::preload::SHIM_HOLD` (checked below).
pub(crate) const HOLD: u8 = 8;

/// Reads that look scattered, passed on up to this many in all; then the
/// core is loaded whatever they look like
/// (`ahead::ra::hints::preload::SHIM_HOLD_SCATTERED`, which says why;
/// checked below).
pub(crate) const HOLD_SCATTERED: u8 = 64;

/// Of the last eight steps between held reads, how many must continue
/// one of the two reads before for the core to load
/// (`ahead::ra::hints::preload::SHIM_ORDERED`).
const ORDERED: u32 = 6;

/// How near an earlier read a held read must begin to continue it: this,
/// or 1/64 of the file if more (`ahead::ra::hints::preload::SHIM_NEAR`).
const NEAR: u64 = 256 << 10;

struct Fd {
    state: AtomicU8,
    /// Reads that were not forward passed on ([`hold`]), up to [`HOLD`].
    held: AtomicU8,
    /// Where the last of them read, once it returned: its offset, and
    /// its length plus one (0: not known).
    held_at: AtomicU64,
    held_len: AtomicU64,
    /// The file position (tracked descriptors).
    pos: AtomicU64,
    /// Where the last read ended.
    next: AtomicU64,
    /// The program advised the file (`POSIX_FADV_NORMAL`, `RANDOM` or
    /// `SEQUENTIAL`) before the core was loaded: the core's trial of the
    /// kernel's readahead leaves it alone ([`advised`]).
    advised: AtomicU8,
    /// What the file was found to be when it would have loaded the core:
    /// [`NEEDED`], [`SMALL`] or [`CACHED`] ([`quiet`]).
    quiet: AtomicU8,
    /// Reads of a [`CACHED`] file since it was last looked at.
    reads: AtomicU32,
    /// Held reads in a row that each ended at or before where the one
    /// before it began: a stream going backward ([`classify`]).
    back: AtomicU8,
    /// The held read before the last (as `held_at` and `held_len`).
    before_at: AtomicU64,
    before_len: AtomicU64,
    /// A bit for each of the last eight steps between held reads: whether
    /// it continued one of the two reads before it ([`continues`]).
    steps: AtomicU8,
    /// How near counts as continuing for this file ([`hold`] sets it from
    /// the file's size).
    near: AtomicU64,
    /// Where the read before the one being held ended (any read: a
    /// forward run's last), as [`hold`] found it.
    from: AtomicU64,
}

/// The file's reads need the core (or it was not looked at yet).
pub(crate) const NEEDED: u8 = 0;
/// At most [`SMALL_FILE`] bytes: the kernel's first window reads it whole.
pub(crate) const SMALL: u8 = 1;
/// Cached where it was probed: nothing to read ahead while it stays so.
pub(crate) const CACHED: u8 = 2;

/// The kernel's first readahead window (the core's and the simulator's
/// `ahead::ra::hints::preload::SMALL_FILE`, checked below).
pub(crate) const SMALL_FILE: u64 = 128 << 10;

/// A [`CACHED`] file is looked at again every this many reads, at the
/// page the read begins at (the core looks at the read's range;
/// `ahead::ra::hints::preload::CACHED_RECHECK`, checked below).
pub(crate) const RECHECK: u32 = 64;

/// All zeros at start (.bss): a process pays only for the pages of the
/// descriptors it uses.
static FDS: [Fd; SLOTS] = [const {
    Fd {
        state: AtomicU8::new(UNTRACKED),
        held: AtomicU8::new(0),
        held_at: AtomicU64::new(0),
        held_len: AtomicU64::new(0),
        pos: AtomicU64::new(0),
        next: AtomicU64::new(0),
        advised: AtomicU8::new(0),
        quiet: AtomicU8::new(NEEDED),
        reads: AtomicU32::new(0),
        back: AtomicU8::new(0),
        before_at: AtomicU64::new(0),
        before_len: AtomicU64::new(0),
        steps: AtomicU8::new(0),
        near: AtomicU64::new(0),
        from: AtomicU64::new(0),
    }
}; SLOTS];

fn fd(fd: c_int) -> Option<&'static Fd> {
    usize::try_from(fd).ok().and_then(|i| FDS.get(i))
}

/// `fd` was just opened: at position 0, nothing read.
pub(crate) fn opened(n: c_int) {
    if let Some(f) = fd(n) {
        f.pos.store(0, Ordering::Relaxed);
        f.next.store(0, Ordering::Relaxed);
        f.held.store(0, Ordering::Relaxed);
        f.held_len.store(0, Ordering::Relaxed);
        f.back.store(0, Ordering::Relaxed);
        f.before_len.store(0, Ordering::Relaxed);
        f.steps.store(0, Ordering::Relaxed);
        f.advised.store(0, Ordering::Relaxed);
        f.quiet.store(NEEDED, Ordering::Relaxed);
        f.state.store(TRACKED, Ordering::Release);
    }
}

/// The number `fd` was closed, or now names another open file (a
/// duplicate put there): nothing known of it holds.
pub(crate) fn closed(n: c_int) {
    if let Some(f) = fd(n) {
        if f.state.load(Ordering::Relaxed) != UNTRACKED {
            f.state.store(UNTRACKED, Ordering::Release);
        }
        if f.held.load(Ordering::Relaxed) != 0 {
            f.held.store(0, Ordering::Relaxed);
            f.held_len.store(0, Ordering::Relaxed);
            f.back.store(0, Ordering::Relaxed);
            f.before_len.store(0, Ordering::Relaxed);
            f.steps.store(0, Ordering::Relaxed);
        }
        if f.advised.load(Ordering::Relaxed) != 0 {
            f.advised.store(0, Ordering::Relaxed);
        }
        if f.quiet.load(Ordering::Relaxed) != NEEDED {
            f.quiet.store(NEEDED, Ordering::Relaxed);
        }
    }
}

/// What a read of `fd` at `at` (None: at its position, which the shim
/// may not know) is, for a file found [`SMALL`] or [`CACHED`]: true to
/// pass it on without the core. A cached file's every [`RECHECK`]th read
/// looks at the page it begins at (at its position, asked of the kernel
/// where the shim does not follow it), and a page missing there makes the
/// file one that needs the core.
pub(crate) fn quiet(n: c_int, at: Option<i64>) -> bool {
    let Some(f) = fd(n) else { return false };
    match f.quiet.load(Ordering::Relaxed) {
        SMALL => true,
        CACHED => {
            if !f
                .reads
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_add(1)
                .is_multiple_of(RECHECK)
            {
                return true;
            }
            let still = offset(n, at).or_else(|| position(n)).is_some_and(|o| {
                let page = page_size();
                cached(n, o / page * page, page)
            });
            if !still {
                f.quiet.store(NEEDED, Ordering::Relaxed);
            }
            still
        }
        _ => false,
    }
}

/// A regular file of `size` bytes, about to load the core at a read:
/// whether its reads can pass on without it ([`SMALL`], [`CACHED`]), as
/// the core would pass them (its `quiet::classify`, by the same 16
/// probes: its first page, its last and 14 evenly between). The reads the
/// shim held stay with it: the core, loaded later, starts afresh.
pub(crate) fn classify(n: c_int, size: u64) -> bool {
    let Some(f) = fd(n) else { return false };
    let page = page_size();
    let kind = if size <= SMALL_FILE {
        SMALL
    } else {
        let last = (size - 1) / page;
        let all = (0..PROBES).all(|i| cached(n, last * i / (PROBES - 1) * page, page));
        if !all && !cached_behind(f, n, page) {
            return false;
        }
        CACHED
    };
    f.held_len.store(0, Ordering::Relaxed);
    f.reads.store(0, Ordering::Relaxed);
    f.quiet.store(kind, Ordering::Relaxed);
    true
}

/// A stream going backward, every held read a step back from the one
/// before, with [`BEHIND`] bytes cached behind the last: where it reads
/// next is cached, as the kernel never reads ahead backward — an earlier
/// run left it there (`tail` of a log read before, whose head the kernel
/// has since reclaimed, so the probes of the whole file miss). Its reads
/// are the kernel's alone as a cached file's are, and the first recheck
/// that finds a page missing loads the core for the cold part. Forward
/// readers are not judged so: pages ahead of them may be the kernel's own
/// readahead of this very stream, whose reads through gaps the core's
/// trial may be there to stop.
fn cached_behind(f: &Fd, n: c_int, page: u64) -> bool {
    if f.back.load(Ordering::Relaxed) + 1 < HOLD {
        return false;
    }
    let Some((at, _)) = held_read(n) else {
        return false;
    };
    let from = at.saturating_sub(BEHIND) / page * page;
    let end = at / page * page;
    end > from && cached(n, from, end - from)
}

/// How much behind a backward stream's last read must be cached: the
/// kernel's default window (128 KiB), sixteen 8 KiB reads of `tail`.
const BEHIND: u64 = 128 << 10;

/// The file position of a descriptor the shim does not track (one
/// `lseek` system call, not the hooked C function). Keeps errno.
fn position(fd: c_int) -> Option<u64> {
    // SAFETY: errno's location is valid for the thread.
    let e = unsafe { *libc::__errno_location() };
    // SAFETY: asks the position; changes nothing.
    let r = unsafe { libc::syscall(libc::SYS_lseek, fd, 0 as libc::off_t, libc::SEEK_CUR) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
    u64::try_from(r).ok()
}

/// Pages a file is probed at (`ahead::ra::hints::preload::CACHED_PROBES`,
/// which the core uses; checked below).
pub(crate) const PROBES: u64 = 16;

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// cachestat(2)'s range and answer (Linux 6.5, `include/uapi/linux/mman.h`).
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    cache: u64,
    dirty: u64,
    writeback: u64,
    evicted: u64,
    recently_evicted: u64,
}

/// cachestat(2)'s number, the same on every architecture but alpha.
const SYS_CACHESTAT: libc::c_long = 451;

/// Whether every page of `len` bytes at `off` of `fd` is cached (false
/// where the kernel cannot say: no cachestat before Linux 6.5, EPERM for
/// a file the user may neither write nor owns on 6.14 and later). Keeps
/// errno as it was.
fn cached(fd: c_int, off: u64, len: u64) -> bool {
    let range = CachestatRange { off, len };
    let mut st = Cachestat::default();
    // SAFETY: errno's location is valid for the thread.
    let e = unsafe { *libc::__errno_location() };
    // SAFETY: cachestat reads `range` and writes `st`, both live; a bad
    // descriptor answers EBADF.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CachestatRange,
            &mut st as *mut Cachestat,
            0u32,
        )
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
    r == 0 && st.cache >= len.div_ceil(page_size())
}

/// `posix_fadvise(fd, …, advice)` returned `r`: advice on how the kernel
/// reads ahead, taken, is remembered for the core.
pub(crate) fn advise(n: c_int, advice: c_int, r: c_int) {
    let reads_ahead = matches!(
        advice,
        libc::POSIX_FADV_NORMAL | libc::POSIX_FADV_RANDOM | libc::POSIX_FADV_SEQUENTIAL
    );
    if let (Some(f), true) = (fd(n), r == 0 && reads_ahead) {
        f.advised.store(1, Ordering::Relaxed);
    }
}

/// Whether the program advised `fd` how to read ahead ([`advise`]) while
/// the core was not loaded.
pub(crate) fn advised(n: c_int) -> bool {
    fd(n).is_some_and(|f| f.advised.load(Ordering::Relaxed) != 0)
}

/// A read of a regular file that is not forward: whether it is one of the
/// descriptor's first [`HOLD`], which are passed on without the core. A
/// few reads at offsets (the end of a certificate bundle, a database's
/// header and a lookup) are no stream worth the core's start-up; the core
/// is loaded at the next, and its policy then sees the stream from there.
pub(crate) fn hold(n: c_int, size: u64) -> bool {
    fd(n).is_some_and(|f| {
        f.near.store(NEAR.max(size / 64), Ordering::Relaxed);
        f.from
            .store(f.next.load(Ordering::Relaxed), Ordering::Relaxed);
        f.held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
                (h < HOLD).then_some(h + 1)
            })
            .is_ok()
    })
}

/// Whether the read after [`HOLD`] held ones is the first to be looked at
/// ([`classify`]), none of them held as scattered yet.
pub(crate) fn looks(n: c_int) -> bool {
    fd(n).is_some_and(|f| f.held.load(Ordering::Relaxed) == HOLD)
}

/// A read that is not forward, after [`HOLD`] held ones: whether it is
/// held too, the reads so far scattered (fewer than [`ORDERED`] of the
/// last eight steps continued an earlier read) and fewer than
/// [`HOLD_SCATTERED`] held. A program that jumps at random through a cold
/// file gets nothing from the core but its cost. Only a descriptor the
/// shim follows (whose every held read it saw where it read): of another
/// it knows nothing, and the core is loaded as before.
pub(crate) fn scattered(n: c_int) -> bool {
    fd(n).is_some_and(|f| {
        let ordered = f.steps.load(Ordering::Relaxed).count_ones() >= ORDERED;
        f.state.load(Ordering::Acquire) == TRACKED
            && !ordered
            && f.held
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
                    (h < HOLD_SCATTERED).then_some(h + 1)
                })
                .is_ok()
    })
}

/// Whether a read of `len` bytes at `at` continues the read `prev`
/// (offset, length): it begins at most `near` bytes past its end, or ends
/// at most `near` bytes before its start
/// (`ahead::ra::hints::preload::shim_continues`, checked below).
fn continues(prev: (u64, u64), at: u64, len: u64, near: u64) -> bool {
    let end = prev.0.saturating_add(prev.1);
    let last = at.saturating_add(len);
    (at >= end && at - end <= near) || (last <= prev.0 && prev.0 - last <= near)
}

/// A held read of a tracked `fd` at `offset` returned `r`.
pub(crate) fn held_done(n: c_int, offset: u64, r: isize) {
    let (Some(f), Ok(r)) = (fd(n), u64::try_from(r)) else {
        return;
    };
    let last = held_read(n);
    // A step back: this read ends where the last one began, or before it.
    let back = last.is_some_and(|(at, _)| offset < at && offset.saturating_add(r) <= at);
    let steps = if back {
        f.back.load(Ordering::Relaxed).saturating_add(1)
    } else {
        0
    };
    f.back.store(steps, Ordering::Relaxed);
    if let Some(prev) = last {
        // It continues where the read before it ended (a forward run's
        // jump ahead), or one of the last two held reads (a step back, or
        // two streams taking turns).
        let near = f.near.load(Ordering::Relaxed);
        let len = f.before_len.load(Ordering::Relaxed);
        let before = (len != 0).then(|| (f.before_at.load(Ordering::Relaxed), len - 1));
        let on = continues((f.from.load(Ordering::Relaxed), 0), offset, r, near)
            || continues(prev, offset, r, near)
            || before.is_some_and(|b| continues(b, offset, r, near));
        let bits = f.steps.load(Ordering::Relaxed);
        f.steps.store((bits << 1) | u8::from(on), Ordering::Relaxed);
        f.before_at.store(prev.0, Ordering::Relaxed);
        f.before_len
            .store(prev.1.saturating_add(1), Ordering::Relaxed);
    }
    f.held_at.store(offset, Ordering::Relaxed);
    f.held_len.store(r.saturating_add(1), Ordering::Release);
}

/// Where the last held read of `fd` read (offset, length), if it is known.
pub(crate) fn held_read(n: c_int) -> Option<(u64, u64)> {
    let f = fd(n)?;
    let len = f.held_len.load(Ordering::Acquire);
    (len != 0).then(|| (f.held_at.load(Ordering::Relaxed), len - 1))
}

/// Where a tracked descriptor reads from (None: untracked).
pub(crate) fn offset(n: c_int, at: Option<i64>) -> Option<u64> {
    let f = fd(n)?;
    if f.state.load(Ordering::Acquire) != TRACKED {
        return None;
    }
    match at {
        Some(o) => u64::try_from(o).ok(),
        None => Some(f.pos.load(Ordering::Relaxed)),
    }
}

/// The position of `fd` may have moved unseen (it is shared with a
/// duplicate, used by stdio, or written at).
pub(crate) fn untrack(n: c_int) {
    if let Some(f) = fd(n) {
        // What it is (a pipe, a socket) has not changed: only a tracked
        // position is lost.
        let _ = f
            .state
            .compare_exchange(TRACKED, UNTRACKED, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// `lseek` on `fd` answered `r`.
pub(crate) fn seeked(n: c_int, r: i64) {
    if let Some(f) = fd(n) {
        if let Ok(r) = u64::try_from(r) {
            f.pos.store(r, Ordering::Relaxed);
        }
    }
}

/// Whether a read found `fd` not to be a regular file.
pub(crate) fn is_other(n: c_int) -> bool {
    fd(n).is_some_and(|f| f.state.load(Ordering::Acquire) == OTHER)
}

pub(crate) fn mark_other(n: c_int) {
    if let Some(f) = fd(n) {
        f.state.store(OTHER, Ordering::Release);
    }
}

/// A read of a tracked `fd` at `at` (None: at its position): the offset
/// it reads from, if that is where the last read ended.
pub(crate) fn forward(n: c_int, at: Option<i64>) -> Option<u64> {
    let offset = offset(n, at)?;
    let f = fd(n)?;
    (f.next.load(Ordering::Relaxed) == offset).then_some(offset)
}

/// A read of a tracked `fd` at `offset` (at the position if `current`),
/// passed on, returned `r`.
pub(crate) fn read_done(n: c_int, offset: u64, current: bool, r: isize) {
    let (Some(f), Ok(r)) = (fd(n), u64::try_from(r)) else {
        return;
    };
    let end = offset.saturating_add(r);
    f.next.store(end, Ordering::Relaxed);
    if current {
        f.pos.store(end, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_simulator_models_the_shim_by_its_own_numbers() {
        assert_eq!(super::HOLD, ahead::ra::hints::preload::SHIM_HOLD);
        assert_eq!(
            super::HOLD_SCATTERED,
            ahead::ra::hints::preload::SHIM_HOLD_SCATTERED
        );
        assert_eq!(super::ORDERED, ahead::ra::hints::preload::SHIM_ORDERED);
        assert_eq!(super::NEAR, ahead::ra::hints::preload::SHIM_NEAR);
        assert_eq!(super::SMALL_FILE, ahead::ra::hints::preload::SMALL_FILE);
        assert_eq!(super::PROBES, ahead::ra::hints::preload::CACHED_PROBES);
        assert_eq!(super::RECHECK, ahead::ra::hints::preload::CACHED_RECHECK);
    }

    #[test]
    fn the_simulator_models_what_continues_a_held_read_as_the_shim_does() {
        use ahead::ra::hints::preload::{shim_continues, shim_near};
        let near = |size: u64| super::NEAR.max(size / 64);
        let edges = [
            0,
            1,
            4095,
            4096,
            256 << 10,
            (256 << 10) + 1,
            1 << 30,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200_000u64 {
            let mut pick = |scale: u64| match next() % 4 {
                0 => edges[(next() % edges.len() as u64) as usize],
                _ => next() % scale,
            };
            let size = pick(1 << 34);
            let prev = (pick(1 << 30), pick(1 << 20));
            let (at, len) = (pick(1 << 30), pick(1 << 20));
            assert_eq!(near(size), shim_near(size), "{size}");
            let n = if i % 2 == 0 {
                near(size)
            } else {
                pick(1 << 24)
            };
            assert_eq!(
                super::continues(prev, at, len, n),
                shim_continues(prev, at, len, n),
                "{prev:?} {at} {len} {n}"
            );
        }
        // Forward within reach, backward within reach, and neither.
        assert!(super::continues(
            (0, 4096),
            4096 + (256 << 10),
            4096,
            256 << 10
        ));
        assert!(super::continues(
            (1 << 20, 4096),
            (1 << 20) - 8192,
            4096,
            256 << 10
        ));
        assert!(!super::continues(
            (0, 4096),
            8192 + (256 << 10),
            4096,
            256 << 10
        ));
        assert!(!super::continues((1 << 20, 4096), 0, 4096, 256 << 10));
    }
}
