//! `ahead trace`'s record of what a program reads through mappings of
//! files. A page a program touches through `mmap` is no read call that a
//! hook could see: the kernel's page fault reads it. So in trace mode the
//! thread that maps a file asks the kernel for a sample of each of its
//! page faults (`perf_event_open`: the software page-fault event, one
//! sample per fault, with the address, the thread and the
//! `CLOCK_MONOTONIC` time),
//! the helper keeps where each file is mapped, and the faults that fall in
//! a mapping go into the trace as one-page reads marked `map=1`, in time
//! order with the reads. `ahead sim replay` serves them as the kernel
//! serves faults (read-around).
//!
//! A fault the kernel cannot sample (no `perf_event_open`: a seccomp
//! filter, `perf_event_paranoid` at 3 without privilege) leaves a comment
//! in the trace saying so; samples the ring had no room for are counted in
//! another. Only threads that map a file are followed: a thread that
//! touches a mapping another thread made is not.

use ahead::perf;
use std::cell::Cell;
use std::fmt::Write as _;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Mutex;

/// Pages of samples per ring, the first size the kernel grants: 256 KiB
/// (8,192 faults between two drains, a millisecond apart), or 32 KiB. A
/// user without privilege may lock `perf_event_mlock_kb` (516 KiB) per
/// CPU in rings, for all its events together.
const RING_PAGES: [usize; 2] = [64, 8];

const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_ADDR: u64 = 1 << 3;
/// `exclude_kernel`, `exclude_hv`, `use_clockid`. Not `inherit`: the
/// kernel refuses to map the ring of an inherited event of one task on
/// every CPU (EINVAL).
const FLAGS: u64 = perf::FLAG_EXCLUDE_KERNEL | perf::FLAG_EXCLUDE_HV | perf::FLAG_USE_CLOCKID;
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;
/// Where `data_head` and `data_tail` sit in the ring's first page.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

/// One thread's samples: its event's ring, mapped for the life of the
/// process (the event's descriptor is never closed). Slots are claimed
/// and never given back, with atomics only: a fork while a lock was held
/// would leave the child's copy of the lock held for good.
struct Slot {
    /// The process that opened it (0: free). A fork's child inherits the
    /// mapping, but the samples are the parent's to take.
    pid: AtomicU32,
    /// The ring's address (0 until it is mapped).
    base: AtomicUsize,
    /// Its pages of samples.
    pages: AtomicUsize,
}

/// Threads whose faults one process samples, at most.
const SLOTS: usize = 64;
/// A slot's `pid` while a thread fills it in.
const CLAIMING: u32 = u32::MAX;

static RINGS: [Slot; SLOTS] = [const {
    Slot {
        pid: AtomicU32::new(0),
        base: AtomicUsize::new(0),
        pages: AtomicUsize::new(0),
    }
}; SLOTS];
/// Why sampling could not start, if it could not (the first reason).
static FAILED: Mutex<Option<String>> = Mutex::new(None);
/// The process some of whose threads' faults are sampled (0: none).
static SAMPLING: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// The process in which this thread asked (a fork's child is a new
    /// thread that has not).
    static WATCHED: Cell<u32> = const { Cell::new(0) };
}

/// A fault in the process: its thread, when, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fault {
    pub(super) tid: u32,
    pub(super) t: u64,
    pub(super) addr: u64,
}

/// Called in the thread that maps a file, before the mapping is returned
/// to it: from here on its page faults are sampled.
pub(crate) fn watch_this_thread() {
    let pid = std::process::id();
    if WATCHED.with(|w| w.replace(pid)) == pid {
        return;
    }
    if let Err(why) = open_ring() {
        // Not lock(), for the same reason as the slots.
        if let Ok(mut f) = FAILED.try_lock() {
            f.get_or_insert(why);
        }
    }
}

fn open_ring() -> Result<(), String> {
    let attr = perf::Attr {
        sample_period: 1,
        sample_type: SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR,
        flags: FLAGS,
        clockid: libc::CLOCK_MONOTONIC,
        ..perf::Attr::new(perf::TYPE_SOFTWARE, perf::COUNT_SW_PAGE_FAULTS)
    };
    let fd = perf::open(&attr, 0).map_err(|e| format!("perf_event_open: {e}"))?;
    let page = rustix::param::page_size();
    let mut mapped = None;
    for pages in RING_PAGES {
        let len = (1 + pages) * page;
        // SAFETY: a fresh shared mapping of the event's ring.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base != libc::MAP_FAILED {
            mapped = Some((base, len, pages));
            break;
        }
    }
    let Some((base, len, pages)) = mapped else {
        return Err(format!(
            "mmap of the samples: {}",
            std::io::Error::last_os_error()
        ));
    };
    let pid = std::process::id();
    let Some(slot) = RINGS.iter().find(|s| {
        // Free, or a slot of the process this one was forked from: its
        // copy here is this process's to reuse.
        // Claimed first, so that no drain reads the old ring as ours.
        let held = s.pid.load(Ordering::Acquire);
        held != pid
            && held != CLAIMING
            && s.pid
                .compare_exchange(held, CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }) else {
        // SAFETY: our mapping, of the length mapped.
        unsafe { libc::munmap(base, len) };
        return Err(format!("more than {SLOTS} threads map files"));
    };
    slot.base.store(base as usize, Ordering::Release);
    slot.pages.store(pages, Ordering::Release);
    slot.pid.store(pid, Ordering::Release);
    // The descriptor stays open as long as the ring is read.
    std::mem::forget(fd);
    SAMPLING.store(pid, Ordering::Release);
    Ok(())
}

/// Whether any thread of this process has its faults sampled.
pub(super) fn sampling() -> bool {
    SAMPLING.load(Ordering::Acquire) == std::process::id()
}

/// Why faults are not sampled, if a mapping asked and they are not.
pub(super) fn failure() -> Option<String> {
    FAILED.try_lock().ok().and_then(|f| f.clone())
}

/// A ring being read.
struct Ring {
    base: usize,
    page: usize,
}

/// Takes every sample the rings hold: this process's faults into `out`;
/// returns how many samples the kernel lost for want of room.
pub(super) fn drain(out: &mut Vec<Fault>) -> u64 {
    let pid = std::process::id();
    let page = rustix::param::page_size();
    let mut lost = 0;
    for slot in RINGS
        .iter()
        .filter(|s| s.pid.load(Ordering::Acquire) == pid)
    {
        let base = slot.base.load(Ordering::Acquire);
        if base == 0 {
            continue;
        }
        let r = Ring { base, page };
        let data = r.base + r.page;
        let size = (slot.pages.load(Ordering::Acquire) * r.page) as u64;
        // The first page of a live ring: the kernel writes data_head, we
        // write data_tail (perf_event_open(2)).
        let head_p = (r.base + DATA_HEAD) as *const u64;
        let tail_p = (r.base + DATA_TAIL) as *mut u64;
        // SAFETY: an aligned word of the ring's first page, mapped for
        // the life of the process.
        let head = unsafe { std::ptr::read_volatile(head_p) };
        fence(Ordering::Acquire);
        // SAFETY: as above.
        let mut tail = unsafe { std::ptr::read_volatile(tail_p) };
        let byte = |at: u64| -> u8 {
            // SAFETY: inside the ring's data pages.
            unsafe { *((data + (at % size) as usize) as *const u8) }
        };
        let word = |at: u64, n: usize| -> u64 {
            (0..n).fold(0u64, |v, i| v | (byte(at + i as u64) as u64) << (8 * i))
        };
        while tail + 8 <= head {
            let kind = word(tail, 4) as u32;
            let rec = word(tail + 6, 2);
            if rec < 8 || tail + rec > head {
                break;
            }
            match kind {
                RECORD_SAMPLE if rec >= 32 => {
                    let (p, tid) = (word(tail + 8, 4) as u32, word(tail + 12, 4) as u32);
                    if p == pid {
                        out.push(Fault {
                            tid,
                            t: word(tail + 16, 8),
                            addr: word(tail + 24, 8),
                        });
                    }
                }
                // id, then the count lost.
                RECORD_LOST if rec >= 24 => lost += word(tail + 16, 8),
                _ => {}
            }
            tail += rec;
        }
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(tail_p, tail) };
    }
    lost
}

/// A file mapped into the process, as the trace names it.
#[derive(Clone, Debug)]
pub(super) struct Mapping {
    pub(super) start: u64,
    pub(super) end: u64,
    /// The file offset at `start`.
    pub(super) offset: u64,
    pub(super) fd: i32,
    pub(super) id: u64,
    /// When it was mapped, and when unmapped: faults outside that span
    /// are not its.
    pub(super) since: u64,
    pub(super) gone: Option<u64>,
}

/// The file and offset `f` read, if it fell in a mapping: the latest one
/// that covered the address when the fault happened.
pub(super) fn place(maps: &[Mapping], f: &Fault, page: u64) -> Option<(u64, i32, u64)> {
    maps.iter()
        .rev()
        .find(|m| {
            f.addr >= m.start && f.addr < m.end && f.t >= m.since && m.gone.is_none_or(|g| f.t < g)
        })
        .map(|m| (m.id, m.fd, (m.offset + (f.addr - m.start)) / page * page))
}

/// `[addr, addr + len)` was unmapped at `t`: the mappings it covers end
/// there (a part unmapped ends the whole mapping's claim to it).
pub(super) fn unmapped(maps: &mut [Mapping], addr: u64, len: u64, t: u64) {
    for m in maps.iter_mut().filter(|m| m.gone.is_none()) {
        if addr < m.end && addr.saturating_add(len) > m.start {
            m.gone = Some(t);
        }
    }
}

impl super::State {
    /// Takes what the rings hold and writes, in time order, the faults up
    /// to time `until` that fell in a mapping of a file: one page read,
    /// `map=1`, at the page's offset in the file.
    pub(super) fn write_faults(&mut self, until: u64) {
        let mut fresh = Vec::new();
        self.faults_lost += drain(&mut fresh);
        if !fresh.is_empty() {
            self.faults.extend(fresh);
            self.faults.sort_by_key(|f| f.t);
        }
        let n = self.faults.partition_point(|f| f.t <= until);
        let page = rustix::param::page_size() as u64;
        let pid = std::process::id();
        for f in self.faults.drain(..n) {
            if let Some((id, fd, off)) = place(&self.maps, &f, page) {
                let _ = writeln!(
                    self.trace,
                    "{off} {page} {fd} file={pid}:{id} tid={} t={} map=1",
                    f.tid, f.t
                );
            }
        }
    }

    /// At exit: every fault left, and what the trace lacks.
    pub(super) fn end_faults(&mut self) {
        if super::mode() != super::Mode::Trace {
            return;
        }
        if sampling() {
            self.write_faults(u64::MAX);
        }
        if self.faults_lost > 0 {
            let _ = writeln!(
                self.trace,
                "# page faults lost (the sample ring was full): {}",
                self.faults_lost
            );
        }
        if let (Some(why), false) = (failure(), self.maps.is_empty()) {
            let _ = writeln!(
                self.trace,
                "# page faults in mapped files not recorded: {why}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_placed_in_the_mapping_that_held_them() {
        let mut maps = vec![
            Mapping {
                start: 0x10000,
                end: 0x20000,
                offset: 8192,
                fd: 3,
                id: 1,
                since: 0,
                gone: None,
            },
            Mapping {
                start: 0x40000,
                end: 0x50000,
                offset: 0,
                fd: 4,
                id: 2,
                since: 3,
                gone: None,
            },
        ];
        let f = |addr, t| Fault { tid: 1, t, addr };
        assert_eq!(place(&maps, &f(0x10123, 5), 4096), Some((1, 3, 8192)));
        assert_eq!(place(&maps, &f(0x11000, 5), 4096), Some((1, 3, 12288)));
        assert_eq!(place(&maps, &f(0x30000, 5), 4096), None);
        // Before its mapping was made, an address is not the file's.
        assert_eq!(place(&maps, &f(0x41000, 2), 4096), None);
        unmapped(&mut maps, 0x40000, 0x1000, 10);
        assert_eq!(place(&maps, &f(0x41000, 9), 4096), Some((2, 4, 4096)));
        assert_eq!(place(&maps, &f(0x41000, 11), 4096), None);
    }

    /// The kernel samples this thread's faults in a mapping of a file.
    #[test]
    fn a_mapped_file_s_faults_are_sampled() {
        let dir = std::env::temp_dir().join(format!("ahead-faults-{}", std::process::id()));
        std::fs::write(&dir, vec![7u8; 1 << 20]).unwrap();
        let f = std::fs::File::open(&dir).unwrap();
        std::thread::spawn(move || {
            if let Err(why) = open_ring() {
                eprintln!("SKIP: faults cannot be sampled here: {why}");
                return;
            }
            // Sixteen mappings of 64 KiB each, one touch each: a fault maps
            // pages of its own mapping only, so each takes at least one
            // whatever the kernel maps around it (a CI kernel mapped all of
            // one 1 MiB mapping, a large folio, at its first fault).
            let mut maps = Vec::new();
            let mut sum = 0u64;
            for i in 0..16 {
                // SAFETY: a private read-only mapping of a file we opened.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        64 << 10,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE,
                        f.as_raw_fd(),
                        i * (64 << 10),
                    )
                };
                assert_ne!(p, libc::MAP_FAILED);
                // SAFETY: inside the mapping.
                sum += unsafe { std::ptr::read_volatile(p as *const u8) } as u64;
                maps.push(p as u64);
            }
            assert_eq!(sum, 16 * 7);
            let mut out = Vec::new();
            drain(&mut out);
            let within = |f: &&Fault, m: u64| f.addr >= m && f.addr < m + (64 << 10);
            let ours: Vec<_> = out
                .iter()
                .filter(|f| maps.iter().any(|&m| within(f, m)))
                .collect();
            for &m in &maps {
                assert!(
                    ours.iter().any(|f| within(f, m)),
                    "no fault in the mapping at {m:#x}: {out:?}"
                );
            }
            assert!(ours.windows(2).all(|w| w[0].t <= w[1].t));
            assert!(ours.iter().all(|f| f.tid != 0));
        })
        .join()
        .unwrap();
        let _ = std::fs::remove_file(&dir);
    }
}
