//! Readahead mode's early "nothing to do": files and reads that readahead
//! cannot help cost nothing beyond what `--off` costs — no event, no
//! policy, no wake-up of the helper.
//!
//! * **Small files.** A file of at most [`SMALL_FILE`] bytes is read by
//!   the kernel's first readahead window whole, whatever order the
//!   program reads it in: it is decided once, at its first read, from the
//!   `fstat` that classifies the descriptor anyway.
//! * **Cached files.** A file whose pages are cached wherever it is looked
//!   at, at its first read, has nothing to read ahead: [`PROBES`] pages
//!   spread over it, one cachestat(2) (Linux 6.5) each, not the whole file
//!   at once, which costs the kernel about 46 ns a page it holds or once
//!   held ([`classify`]). It is looked at again every [`RECHECK`] reads, on
//!   the range of that read: a file that lost pages (evicted, or grown),
//!   or that had holes the probes passed between, becomes an ordinary one.
//!   Until then its reads are the kernel's alone, as without ahead.
//! * **Forward reads.** A read that begins where the descriptor's last one
//!   ended continues a forward stream, which the kernel's own readahead
//!   follows: it is not sent to the helper, but for the first
//!   [`FORWARD_RUN`] of a run in a file that is not read only forward
//!   (two reads of it did not continue the last). Those are sent: a
//!   backward scan of rows that span
//!   pages (sqlite3's 8 KiB rows, a leaf and its overflow pages read
//!   forward, the rows backward) makes short forward runs, and the policy
//!   must see their pages taken, or it judges its backward windows unread
//!   and holds the stream.
//!
//! * **Sweeps.** A run of [`ahead::ra::hints::preload::SWEEP_RUN`] reads
//!   that each begin within a few pages of the furthest byte read, and
//!   read most of what they pass, is a forward sweep whose reads step
//!   back and forth (a `WITHOUT ROWID` table's leaves and their overflow
//!   pages): the kernel's readahead follows it, and its reads are not
//!   sent ([`Sweep`]).
//!
//!   Except where the helper hinted: a read that falls within the span
//!   of the file's hinted pages not yet read is sent ([`hinted`]), so that
//!   the helper sees its hints taken. A forward window hinted on a read
//!   that stepped back in a `WITHOUT ROWID` table's scan was read whole
//!   by the sweep that followed, which the helper never saw: `--stats`
//!   counted 10 of its 32 pages read (accuracy 0.31), and the policy
//!   judged the window wasted (generator seed 85, case 7).
//!
//! * **Muted files.** A file whose last 512 reads sent gave the helper
//!   nothing to hint for sends it only 64 reads of every 512 until one
//!   does (random reads, which the kernel's readahead leaves alone too).
//!
//! * **One read.** The first read of a file that does need the helper is
//!   held in the file's slot, not sent: a file read once (a lookup at the
//!   end of a certificate bundle, a database's header) has no stream to
//!   follow, and sending it would start the helper's thread for nothing.
//!   A second read sends both, in order, before the helper could have
//!   acted on the first anyway: no stream the policy detects is detected
//!   later.
//!
//! Reads passed over are counted for `--stats` (`reads_passed`, for the
//! process). With `--stats`, each file's first read still goes to the
//! helper, so that every file read has its line.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use ahead::ra::hints::preload::Sweep;

use crate::Slot;

/// The file needs the helper.
pub(crate) const ACTIVE: u8 = 0;
/// At most [`SMALL_FILE`] bytes when first read.
pub(crate) const SMALL: u8 = 1;
/// Wholly cached when first read (or last looked at).
pub(crate) const CACHED: u8 = 2;

/// At most this many bytes when first read: the kernel's first window
/// reads the file whole ([`ahead::ra::hints::preload::SMALL_FILE`]).
pub(crate) const SMALL_FILE: u64 = ahead::ra::hints::preload::SMALL_FILE;

/// Reads in a row that continue the last one and are still sent to the
/// helper ([`ahead::ra::hints::preload::FORWARD_RUN`]).
pub(crate) const FORWARD_RUN: u32 = ahead::ra::hints::preload::FORWARD_RUN;

/// A cached file is looked at again every this many reads
/// ([`ahead::ra::hints::preload::CACHED_RECHECK`]).
pub(crate) const RECHECK: u32 = ahead::ra::hints::preload::CACHED_RECHECK;

/// Reads the library passed over, for `--stats`.
pub(crate) static PASSED: AtomicU64 = AtomicU64::new(0);

/// `--stats` is on (set at load).
pub(crate) static STATS: AtomicBool = AtomicBool::new(false);

/// With `--stats`, whether this is the file's first read (which is sent).
fn first_for_stats(slot: &Slot) -> bool {
    STATS.load(Ordering::Relaxed) && slot.noted.swap(1, Ordering::Relaxed) == 0
}

/// Pages of a file looked at before it is taken for cached
/// ([`ahead::ra::hints::preload::CACHED_PROBES`]).
pub(crate) const PROBES: u64 = ahead::ra::hints::preload::CACHED_PROBES;

/// What a regular file of `size` bytes, read for the first time, needs.
pub(crate) fn classify(fd: BorrowedFd<'_>, size: u64) -> u8 {
    if size <= SMALL_FILE {
        return SMALL;
    }
    let page = rustix::param::page_size() as u64;
    let last = (size - 1) / page;
    // A cold file answers at the first probe.
    let cached = (0..PROBES).all(|i| {
        let at = last * i / (PROBES - 1) * page;
        ahead::residency::all_cached(fd, at, page, size) == Some(true)
    });
    if cached {
        CACHED
    } else {
        ACTIVE
    }
}

/// Before the read's offset is known: whether the read can be passed over
/// for what the file is (small, or cached and not due for a look).
pub(crate) fn pass_early(slot: &Slot) -> bool {
    if STATS.load(Ordering::Relaxed) && slot.noted.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let pass = match slot.quiet.load(Ordering::Relaxed) {
        SMALL => true,
        CACHED => !slot
            .reads
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
            .is_multiple_of(RECHECK),
        _ => false,
    };
    if pass {
        PASSED.fetch_add(1, Ordering::Relaxed);
    }
    pass
}

/// With the read's offset and length: whether it can be passed over — a
/// cached file still cached there, or a read that continues the last. A
/// cached file found missing pages becomes an ordinary one.
pub(crate) fn pass(slot: &Slot, fd: BorrowedFd<'_>, offset: u64, len: u64) -> bool {
    let end = offset.saturating_add(len);
    let sweeps = slot.sweep.read(offset, len);
    let follows = if slot.next.swap(end, Ordering::Relaxed) == offset {
        let run = slot.run.fetch_add(1, Ordering::Relaxed);
        if run + 1 >= ahead::ra::hints::trial::REVERT_RUN {
            slot.trial.back_on(fd);
        }
        run >= FORWARD_RUN || slot.jumps.load(Ordering::Relaxed) < 2
    } else {
        slot.run.store(0, Ordering::Relaxed);
        if slot.jumps.load(Ordering::Relaxed) < 2 {
            slot.jumps.fetch_add(1, Ordering::Relaxed);
        }
        false
    };
    if sweeps {
        slot.trial.back_on(fd);
    }
    if first_for_stats(slot) {
        return false;
    }
    if hints_out(slot, offset, end) {
        return false;
    }
    let pass = if slot.quiet.load(Ordering::Relaxed) == CACHED {
        let size = slot.size.load(Ordering::Relaxed);
        let still =
            end <= size && ahead::residency::all_cached(fd, offset, len, size) == Some(true);
        if !still {
            slot.quiet.store(ACTIVE, Ordering::Relaxed);
        }
        still || follows || sweeps
    } else {
        follows || sweeps
    };
    let pass = pass || muted(slot);
    if pass {
        PASSED.fetch_add(1, Ordering::Relaxed);
    }
    pass
}

/// [`Slot::hinted`] with no hinted page waiting to be read. Otherwise it
/// holds the span's first 4 KiB unit in its low 32 bits and the unit past
/// its end in the high ones (files of up to 16 TiB; past that, clipped).
pub(crate) const NO_HINTS: u64 = 0;

/// The 4 KiB unit holding byte `at` (clipped to 32 bits).
fn unit(at: u64) -> u64 {
    (at >> 12).min(u64::from(u32::MAX))
}

/// The first 4 KiB unit at or past byte `at`.
fn unit_up(at: u64) -> u64 {
    unit(at.saturating_add(4095))
}

/// The helper hinted bytes `[from, to)` of the descriptor's file: the
/// span of hinted pages waiting to be read grows to cover them.
pub(crate) fn hinted(fd: std::ffi::c_int, from: u64, to: u64) {
    let Some(slot) = crate::slot(fd) else { return };
    let (lo, hi) = (unit(from), unit_up(to).max(1));
    let old = slot.hinted.load(Ordering::Relaxed);
    let span = if old == NO_HINTS {
        (lo, hi)
    } else {
        (lo.min(old & 0xffff_ffff), hi.max(old >> 32))
    };
    slot.hinted.store(span.0 | span.1 << 32, Ordering::Relaxed);
}

/// Leaves out of `runs`, byte ranges about to be hinted, what the
/// descriptor's forward sweep has already read (from where it began up to
/// its front, in whole pages of `page` bytes): the reader may be well past
/// the read the helper is answering, and pages it read through passed-over
/// reads are cached, not to be hinted or counted. Returns the pages left
/// out.
pub(crate) fn unswept(fd: std::ffi::c_int, runs: &mut Vec<(u64, u64)>, page: u64) -> u64 {
    let Some(slot) = crate::slot(fd) else {
        return 0;
    };
    let sw = &slot.sweep;
    let (start, front) = (
        sw.start.load(Ordering::Relaxed),
        sw.front.load(Ordering::Relaxed),
    );
    let dense = sw.bytes.load(Ordering::Relaxed).saturating_mul(8)
        >= front.saturating_sub(start).saturating_mul(7);
    if sw.reads.load(Ordering::Relaxed) < ahead::ra::hints::preload::SWEEP_RUN || !dense {
        return 0;
    }
    let page = page.max(1);
    let front = front.div_ceil(page) * page;
    let mut cut = 0;
    runs.retain_mut(|(off, len)| {
        if *off < start || *off >= front {
            return true;
        }
        let n = (front - *off).min(*len);
        cut += n;
        *off += n;
        *len -= n;
        *len > 0
    });
    cut / page
}

/// Every hinted page of the descriptor's file has been read.
pub(crate) fn hints_taken(fd: std::ffi::c_int) {
    let Some(slot) = crate::slot(fd) else { return };
    if slot.hinted.load(Ordering::Relaxed) != NO_HINTS {
        slot.hinted.store(NO_HINTS, Ordering::Relaxed);
    }
}

/// Whether bytes `[offset, end)` fall within the span of hinted pages
/// waiting to be read.
fn hints_out(slot: &Slot, offset: u64, end: u64) -> bool {
    let span = slot.hinted.load(Ordering::Relaxed);
    span != NO_HINTS && unit(offset) < span >> 32 && unit_up(end) > span & 0xffff_ffff
}

/// The helper's verdict on a read it was sent: whether the policy was at
/// work (it hinted, or the read took hinted pages). Only reads that were
/// neither count toward muting the file.
pub(crate) fn helper_saw(slot: &Slot, working: bool) {
    let idle = if working {
        0
    } else {
        slot.idle.load(Ordering::Relaxed).saturating_add(1)
    };
    slot.idle.store(idle, Ordering::Relaxed);
}

/// Whether a read the rules above would send is passed over because the
/// helper has found nothing to hint for in the file's last
/// [`ahead::ra::hints::preload::MUTE_AFTER`] reads (it sees one short run
/// of reads in each cycle, and its next hint ends this).
fn muted(slot: &Slot) -> bool {
    let idle = slot.idle.load(Ordering::Relaxed);
    if idle < ahead::ra::hints::preload::MUTE_AFTER {
        return false;
    }
    ahead::ra::hints::preload::muted(idle, slot.muted.fetch_add(1, Ordering::Relaxed))
}

/// A descriptor's [`Sweep`], kept in atomics as the rest of its slot is
/// (no lock: a fork while one was held would leave it held in the child).
/// Two threads reading one descriptor at once may each see the other's
/// half-written sweep; the worst that does is send a read the sweep would
/// have passed, or pass one it would have sent, which the helper then
/// learns of at the next read that goes to it.
pub(crate) struct SweepSlot {
    start: AtomicU64,
    front: AtomicU64,
    bytes: AtomicU64,
    reads: AtomicU32,
    away: AtomicBool,
}

impl SweepSlot {
    /// The descriptor means another file: no sweep yet.
    pub(crate) fn forget(&self) {
        self.reads.store(0, Ordering::Relaxed);
    }

    /// [`Sweep::read`] on this descriptor's sweep.
    fn read(&self, offset: u64, len: u64) -> bool {
        let mut s = Sweep {
            start: self.start.load(Ordering::Relaxed),
            front: self.front.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            away: self.away.load(Ordering::Relaxed),
        };
        let pass = s.read(offset, len);
        self.start.store(s.start, Ordering::Relaxed);
        self.front.store(s.front, Ordering::Relaxed);
        self.bytes.store(s.bytes, Ordering::Relaxed);
        self.reads.store(s.reads, Ordering::Relaxed);
        self.away.store(s.away, Ordering::Relaxed);
        pass
    }
}

/// [`Slot::held`]: no read held yet.
pub(crate) const NONE_HELD: u8 = 0;
/// A read is held.
const HOLDING: u8 = 1;
/// The held read was sent: every read is sent from here on.
const SENT: u8 = 2;

/// A read of `len` bytes at `offset` that needs the helper: `None` if it is
/// held (the file's first such read; never with `--stats`, whose first
/// read is sent), else the held read to send before it, if there is one.
pub(crate) fn hold(slot: &Slot, offset: u64, len: u64) -> Option<Option<(u64, u64)>> {
    if STATS.load(Ordering::Relaxed) {
        return Some(None);
    }
    match slot.held.load(Ordering::Relaxed) {
        SENT => Some(None),
        NONE_HELD => {
            slot.held_at.store(offset, Ordering::Relaxed);
            slot.held_len.store(len, Ordering::Relaxed);
            if slot
                .held
                .compare_exchange(NONE_HELD, HOLDING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                None
            } else {
                Some(None)
            }
        }
        _ => {
            let at = slot.held_at.load(Ordering::Relaxed);
            let len = slot.held_len.load(Ordering::Relaxed);
            // One thread sends it (reads of one descriptor may race).
            let mine = slot.held.swap(SENT, Ordering::AcqRel) == HOLDING;
            Some(mine.then_some((at, len)))
        }
    }
}

/// A read of `len` bytes at `offset` made before the library was loaded
/// (the shim passed it on): held as the file's first, and the stream's
/// end where it ended.
pub(crate) fn held_before(slot: &Slot, offset: u64, len: u64) {
    slot.next
        .store(offset.saturating_add(len), Ordering::Relaxed);
    if STATS.load(Ordering::Relaxed) {
        return;
    }
    slot.held_at.store(offset, Ordering::Relaxed);
    slot.held_len.store(len, Ordering::Relaxed);
    let _ = slot
        .held
        .compare_exchange(NONE_HELD, HOLDING, Ordering::AcqRel, Ordering::Relaxed);
}

/// A read at `offset` asked for more than it got: the next read that
/// continues it begins at `end`.
pub(crate) fn ended(slot: &Slot, end: u64) {
    slot.next.store(end, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::fd::AsFd as _;

    use super::*;

    /// A file of `pages` pages, written, synced and so cached whole.
    fn cached_file(pages: u64) -> std::fs::File {
        let page = rustix::param::page_size() as u64;
        let mut f = tempfile::tempfile().unwrap();
        let block = vec![7u8; page as usize];
        for _ in 0..pages {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        f
    }

    /// Whether this kernel answers cachestat for `f` (Linux 6.5).
    fn cachestat_answers(f: &std::fs::File) -> bool {
        let ok = ahead::residency::all_cached(f.as_fd(), 0, 1, 1).is_some();
        if !ok {
            eprintln!("SKIPPED: no cachestat(2) on this kernel");
        }
        ok
    }

    /// Small files are small whatever is cached; a file cached whole is
    /// cached; one that lost the page of any one probe (its first, its
    /// last, or one between) is not. A file cold but where the probes
    /// look is taken for cached: the trade the probes make.
    #[test]
    fn classify_finds_a_file_cached_or_not_by_its_probes() {
        let page = rustix::param::page_size() as u64;
        let pages = SMALL_FILE / page * 4;
        let f = cached_file(pages);
        if !cachestat_answers(&f) {
            return;
        }
        let size = pages * page;
        assert_eq!(classify(f.as_fd(), SMALL_FILE), SMALL);
        assert_eq!(classify(f.as_fd(), size), CACHED);
        let last = pages - 1;
        for i in 0..PROBES {
            let probe = last * i / (PROBES - 1);
            let f = cached_file(pages);
            ahead::residency::evict(f.as_fd(), probe * page, page).unwrap();
            assert_eq!(
                classify(f.as_fd(), size),
                ACTIVE,
                "page {probe} (probe {i}) evicted"
            );
        }
        // Evicted all but where the probes look: taken for cached, as the
        // probes' trade (the first read's recheck finds the truth).
        let f = cached_file(pages);
        ahead::residency::evict(f.as_fd(), 0, 0).unwrap();
        // Each probe's page alone: no readahead around it.
        rustix::fs::fadvise(f.as_fd(), 0, None, rustix::fs::Advice::Random).unwrap();
        for i in 0..PROBES {
            let probe = last * i / (PROBES - 1);
            let mut b = [0u8; 1];
            rustix::io::pread(f.as_fd(), &mut b, probe * page).unwrap();
        }
        assert_eq!(classify(f.as_fd(), size), CACHED);
        let misses = (0..pages).filter(|&p| {
            ahead::residency::all_cached(f.as_fd(), p * page, page, size) == Some(false)
        });
        assert!(misses.count() > 0, "the pages between the probes are cold");
    }
}
