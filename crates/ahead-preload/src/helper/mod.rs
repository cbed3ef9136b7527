//! The helper thread: it takes the reads the hooks queue, runs the
//! readahead policy of each file, sends the kernel its hints, keeps the
//! per-file counters of `--stats`, and writes the lines of `ahead trace`.
//!
//! The queue is a bounded lock-free array ([`crate::ring::Ring`], mapped
//! once, its pages touched as it is used): a hook's push neither locks nor
//! allocates, and wakes the helper with one futex call only when the
//! helper sleeps. A full queue drops the event (counted) in readahead
//! mode; `trace` waits for room, as a recording must be whole.
//!
//! **Trace format** (`ahead sim replay` reads it): `#` lines are comments;
//! `# file ID SIZE PATH` names a file, and `# readahead ID BYTES` gives
//! the kernel's largest readahead window for its device (sysfs's
//! `read_ahead_kb`, where sysfs names the device), and `# advice ID WORD`
//! the program's `posix_fadvise` of it (`random`, `sequential`, `normal`,
//! `willneed`, `dontneed`, `noreuse`), where it was given; each read is
//! `OFFSET LENGTH STREAM file=ID tid=TID t=NS`, where STREAM is the
//! descriptor, ID is `PID:N` (N counts the files a process opened), TID the
//! thread and NS `CLOCK_MONOTONIC` in nanoseconds. LENGTH is what the read
//! returned.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::num::NonZeroU64;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ahead::ra::hints::trial::Trial;
use ahead::ra::hints::{self, Hinter};
use ahead::ra::{new_policy, PolicyKind};
use libc::c_int;

use crate::ring::Ring;
use crate::{mode, Mode, RUNTIME};

pub(crate) mod faults;
mod report;

pub(crate) use report::at_exit;
use report::FileStats;

/// Events the queue holds where every read is traced or counted; 2 MiB.
const QUEUE: usize = 1 << 15;
/// Events the queue holds for hints alone: 256 KiB, of which a process
/// touches what its events reach (`ring.rs`). A process reading faster
/// than the helper takes its events loses hints, never reads: with 512, a
/// reader stepping back a page at a time through a half-cached file lost
/// 18% of its events; with this many, none.
const HINT_QUEUE: usize = 1 << 12;
/// The policy's largest window ([`hints::preload::MAX_WINDOW`]).
const MAX_WINDOW: u64 = hints::preload::MAX_WINDOW;
/// Pages remembered per file for the accuracy count.
const HINTED_SET_MAX: usize = 1 << 20;
/// Trace bytes kept before they are appended to the file.
const TRACE_FLUSH: usize = 1 << 20;

/// What happened.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Read,
    Write,
    /// The file was mapped (`mmap`): what is read through the mapping is
    /// not seen (but in a trace, its page faults are: `faults.rs`).
    Map,
    /// `[addr, addr + len)` was unmapped (traced only).
    Unmap,
    /// `posix_fadvise` took the advice in `offset` (traced only).
    Advise,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    kind: Kind,
    fd: c_int,
    gen: u32,
    /// The file's size when first read through this descriptor.
    size: u64,
    offset: u64,
    len: u64,
    /// Where a mapping begins (`Map`, `Unmap`).
    addr: u64,
    tid: u32,
    t: u64,
}

/// Where the outputs go.
#[derive(Clone, Default)]
pub(crate) struct Config {
    pub(crate) stats: Option<String>,
    pub(crate) trace: Option<String>,
}

/// Longest path kept for a file's name (longer ones are cut, marked `…`).
const NAME_MAX: usize = 240;
/// Names the queue holds.
const NAMES: usize = 1 << 10;

/// A descriptor's file name, sent once per (descriptor, generation).
#[derive(Clone, Copy)]
struct Name {
    fd: c_int,
    gen: u32,
    len: u16,
    bytes: [u8; NAME_MAX],
}

/// One process's queue, helper and state.
pub(crate) struct Runtime {
    queue: Ring<Event>,
    names: Ring<Name>,
    /// The helper's state: [`AWAKE`], [`NAP`] or [`DEEP`].
    sleeping: AtomicU32,
    started: AtomicBool,
    /// The helper has taken every event pushed so far and is idle.
    dropped: AtomicU64,
    exiting: AtomicBool,
    /// The helper thread's CPU time so far, nanoseconds.
    cpu_ns: AtomicU64,
    state: Mutex<State>,
    config: Config,
}

impl Runtime {
    fn new(config: Config) -> Runtime {
        // Names are sent only to be printed (`name`).
        let reports = config.stats.is_some() || config.trace.is_some();
        Runtime {
            queue: Ring::new(if reports { QUEUE } else { HINT_QUEUE }),
            names: Ring::new(if reports { NAMES } else { 1 }),
            sleeping: AtomicU32::new(0),
            started: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            exiting: AtomicBool::new(false),
            cpu_ns: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            config,
        }
    }
}

fn runtime() -> Option<&'static Runtime> {
    let p = RUNTIME.load(Ordering::Acquire);
    // SAFETY: runtimes are leaked, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Where the outputs go, from the environment at load.
static CONFIG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();

/// At load: remember the configuration. The runtime (its 1 MiB queue, the
/// helper) is made at the first read of a regular file: a process that
/// reads none, like most of the commands a shell script forks and execs,
/// pays nothing for it (making it at load cost every process about 1 ms).
pub(crate) fn install(config: Config) {
    let _ = CONFIG.set(config);
}

fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// The runtime, made on first use (in a hooked read: one allocation, once
/// per process).
fn runtime_or_make() -> Option<&'static Runtime> {
    if let Some(rt) = runtime() {
        return Some(rt);
    }
    let fresh = Box::into_raw(Box::new(Runtime::new(config()?.clone())));
    match RUNTIME.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => runtime(),
        Err(_) => {
            // Another thread made it first.
            // SAFETY: ours, never shared.
            drop(unsafe { Box::from_raw(fresh) });
            runtime()
        }
    }
}

/// In a fork's child: the parent's helper is not here, and its queue and
/// state may have been mid-change. The child starts afresh at its first
/// read (the old runtime leaks: it cannot be proven free). Nothing is
/// allocated here.
pub(crate) fn after_fork() {
    RUNTIME.store(std::ptr::null_mut(), Ordering::Release);
}

/// The file position of `fd` (None if it has none).
pub(crate) fn position(fd: c_int) -> Option<u64> {
    // SAFETY: a descriptor the program passed; lseek(0, SEEK_CUR) moves nothing.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::fs::seek(bfd, rustix::fs::SeekFrom::Current(0)).ok()
}

fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Sends the helper the name of a regular file just classified (only
/// when a trace or stats will print it): readlink of /proc/self/fd/N into
/// a stack buffer, no allocation.
pub(crate) fn name(fd: c_int, gen: u32) {
    let Some(c) = config() else { return };
    if c.stats.is_none() && c.trace.is_none() {
        return;
    }
    let Some(rt) = crate::busy_during(runtime_or_make) else {
        return;
    };
    let mut link = [0u8; 32];
    let mut w = std::io::Cursor::new(&mut link[..]);
    if std::io::Write::write_fmt(&mut w, format_args!("/proc/self/fd/{fd}\0")).is_err() {
        return;
    }
    let mut n = Name {
        fd,
        gen,
        len: 0,
        bytes: [0; NAME_MAX],
    };
    // SAFETY: a NUL-terminated path and a buffer of NAME_MAX bytes.
    let got = unsafe {
        libc::readlink(
            link.as_ptr() as *const libc::c_char,
            n.bytes.as_mut_ptr() as *mut libc::c_char,
            NAME_MAX,
        )
    };
    if got <= 0 {
        return;
    }
    n.len = got as u16;
    let _ = rt.names.push(n);
}

/// Queues one read or write for the helper.
pub(crate) fn note(kind: Kind, fd: c_int, gen: u32, offset: u64, len: u64) {
    crate::busy_during(|| note_inner(kind, fd, gen, offset, len, 0))
}

/// A mapping of `len` bytes at `addr` of the file `fd` from `offset`
/// (`Map`), or an unmapping of `[addr, addr + len)` (`Unmap`, `fd` -1).
pub(crate) fn note_map(kind: Kind, fd: c_int, gen: u32, addr: u64, len: u64, offset: u64) {
    crate::busy_during(|| note_inner(kind, fd, gen, offset, len, addr))
}

fn note_inner(kind: Kind, fd: c_int, gen: u32, offset: u64, len: u64, addr: u64) {
    let Some(rt) = runtime_or_make() else { return };
    if rt.exiting.load(Ordering::Relaxed) {
        return;
    }
    let trace = mode() == Mode::Trace;
    let ev = Event {
        kind,
        fd,
        gen,
        size: crate::slot(fd).map_or(0, |s| s.size.load(Ordering::Relaxed)),
        offset,
        len,
        addr,
        tid: if trace {
            rustix::thread::gettid().as_raw_nonzero().get() as u32
        } else {
            0
        },
        t: if trace { now_ns() } else { 0 },
    };
    if !rt.started.load(Ordering::Acquire) && !start(rt) {
        return;
    }
    let mut ev = ev;
    loop {
        match rt.queue.push(ev) {
            Ok(()) => break,
            Err(back) if trace => {
                ev = back;
                wake(rt, true);
                std::thread::yield_now();
            }
            Err(_) => {
                rt.dropped.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    wake(rt, false);
}

/// The helper's states (`Runtime::sleeping`).
const AWAKE: u32 = 0;
/// Napping [`NAP_NS`] at a time: hooks do not wake it.
const NAP: u32 = 1;
/// Asleep until woken.
const DEEP: u32 = 2;
/// The nap: a hint decided up to 1 ms late still lands well ahead of a
/// stream whose windows are hundreds of KiB ahead of the reader.
const NAP_NS: i64 = 1_000_000;
/// After this long without an event the helper sleeps deeply (no
/// thousand wake-ups a second in an idle program).
const QUIET: Duration = Duration::from_millis(50);

/// Wakes the helper if it sleeps deeply (`force`: if it naps as well).
fn wake(rt: &Runtime, force: bool) {
    let st = rt.sleeping.load(Ordering::SeqCst);
    if st == DEEP || (force && st == NAP) {
        rt.sleeping.store(AWAKE, Ordering::SeqCst);
        let _ = rustix::thread::futex::wake(&rt.sleeping, rustix::thread::futex::Flags::PRIVATE, 1);
    }
}

/// Starts the helper (once per process); false if it cannot run.
fn start(rt: &'static Runtime) -> bool {
    if rt
        .started
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return true;
    }
    std::thread::Builder::new()
        .name("ahead-run".into())
        .stack_size(256 << 10)
        .spawn(move || {
            crate::set_busy_forever();
            batch_priority();
            helper_loop(rt)
        })
        .is_ok()
}

/// The helper runs at SCHED_BATCH: a hook's wake-up never preempts the
/// program's own thread (a woken helper on the program's CPU delayed each
/// cold sqlite3 point lookup by 14 µs), and the helper works while the
/// program waits for the device, which is when hints matter.
///
/// Not SCHED_IDLE, which it was: an idle-policy thread waits for a CPU
/// nothing else wants, and a hint it was in the middle of sending held the
/// program up meanwhile. A cold sqlite3 query of 7 ms (`limit 1028` of
/// 11,423 rows, `order by id desc`; 114 pages hinted) took 11–26 ms in 10
/// of 15 runs with the helper at SCHED_IDLE, the program's `pread`s asleep
/// in `folio_wait_bit_common`; with SCHED_BATCH, which keeps the ordinary
/// share of the CPU and gives up only wake-up preemption, 1 run of 15
/// (docs/run.md). The reading: WILLNEED readahead puts its pages in the
/// page cache locked and submits their reads at the end, so a program
/// reading one of them waits until the helper runs again.
fn batch_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets this thread's own policy (pid 0 = the caller).
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
    }
}

fn helper_loop(rt: &'static Runtime) {
    let page = rustix::param::page_size() as u64;
    let mut runs = Vec::new();
    let mut last_event = std::time::Instant::now();
    loop {
        let mut any = false;
        // Faults up to here are written after the events queued before it.
        let faults_until = (mode() == Mode::Trace && faults::sampling()).then(now_ns);
        if let Ok(mut st) = rt.state.lock() {
            while let Some(ev) = rt.queue.pop() {
                any = true;
                // A file's name is queued before its first event, so
                // taking the names after the event has been popped
                // always finds it (taking them once before the batch
                // missed names pushed while the batch was drained).
                while let Some(n) = rt.names.pop() {
                    st.names.insert((n.fd, n.gen), n);
                }
                st.handle(ev, page, &mut runs);
            }
            if let Some(t) = faults_until {
                st.write_faults(t);
            }
            st.flush_trace(&rt.config, false);
        }
        if any {
            last_event = std::time::Instant::now();
            let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            rt.cpu_ns.store(
                cpu.tv_sec as u64 * 1_000_000_000 + cpu.tv_nsec as u64,
                Ordering::Relaxed,
            );
            continue;
        }
        // Idle. While the program is active, nap a millisecond at a time
        // and let hooks queue without waking us (a wake-up is a system
        // call per read); after a quiet spell, sleep until a hook wakes us.
        // Faults wake no one: while they are sampled, nap.
        let quiet = last_event.elapsed() > QUIET && faults_until.is_none();
        let state = if quiet { DEEP } else { NAP };
        rt.sleeping.store(state, Ordering::SeqCst);
        if !rt.queue.is_empty() {
            rt.sleeping.store(AWAKE, Ordering::SeqCst);
            continue;
        }
        let limit = if quiet {
            rustix::time::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            }
        } else {
            rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: NAP_NS,
            }
        };
        let _ = rustix::thread::futex::wait(
            &rt.sleeping,
            rustix::thread::futex::Flags::PRIVATE,
            state,
            Some(&limit),
        );
        rt.sleeping.store(AWAKE, Ordering::SeqCst);
    }
}

/// One open descriptor of a regular file.
struct Open {
    gen: u32,
    id: u64,
    size: u64,
    last_end: u64,
    hinter: Option<Hinter>,
    hinted: hints::Unread,
    /// The trial of the kernel's readahead on the descriptor (readahead
    /// mode; none where [`crate::walk::trial`] says).
    trial: Option<Trial>,
    stats: FileStats,
}

impl Open {
    /// The read `ev`'s step of the descriptor's trial of the kernel's
    /// readahead, while the number still means the file.
    fn trial_step(&mut self, ev: &Event) {
        if let Some(t) = self.trial.as_mut().filter(|_| still(ev.fd, ev.gen)) {
            crate::walk::step(t, ev.fd, ev.offset, ev.len, self.stats.hints > 0);
        }
    }

    /// The counters, with the policy's last view of the streams.
    fn finish(self) -> FileStats {
        let mut stats = self.stats;
        if let Some(h) = &self.hinter {
            stats.streams = h.describe();
        }
        stats.kernel_readahead = self.trial.and_then(|t| t.outcome());
        stats
    }
}

#[derive(Default)]
pub(crate) struct State {
    open: HashMap<c_int, Open>,
    /// Names of descriptors not yet seen in an event.
    names: HashMap<(c_int, u32), Name>,
    done: Vec<FileStats>,
    trace: String,
    files: u64,
    /// Trace mode: where files are mapped, and faults sampled but not yet
    /// written (`faults.rs`).
    maps: Vec<faults::Mapping>,
    faults: Vec<faults::Fault>,
    faults_lost: u64,
}

fn fd_size(fd: c_int) -> Option<u64> {
    // SAFETY: a number; a closed one answers EBADF.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::fs::fstat(bfd).ok().map(|s| s.st_size as u64)
}

fn fd_path(fd: c_int) -> String {
    rustix::fs::readlink(format!("/proc/self/fd/{fd}"), Vec::new())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("(fd {fd})"))
}

fn still(fd: c_int, gen: u32) -> bool {
    crate::slot(fd).is_some_and(|s| s.gen.load(Ordering::Acquire) == gen)
}

impl State {
    /// The name of the file `ev` is the first event of: the one the core
    /// sent, else read from /proc while the descriptor still means it.
    fn name_of(&mut self, ev: &Event) -> String {
        match self.names.remove(&(ev.fd, ev.gen)) {
            Some(n) => {
                let mut p = String::from_utf8_lossy(&n.bytes[..n.len as usize]).into_owned();
                if n.len as usize == NAME_MAX {
                    p.push('…');
                }
                p
            }
            None => {
                let p = fd_path(ev.fd);
                if still(ev.fd, ev.gen) {
                    p
                } else {
                    format!("(descriptor {} closed before it was named)", ev.fd)
                }
            }
        }
    }

    /// Starts the record of the file `ev` is the first event of: its name
    /// where it will be printed ([`State::name_of`]), its number, its hinter
    /// (readahead mode) and its trace header (trace mode).
    fn track(&mut self, ev: &Event, page: u64) {
        let size = ev.size;
        // The name is printed only in a trace or the statistics: for hints
        // alone, no readlink of /proc per file.
        let printed = config().is_some_and(|c| c.stats.is_some() || c.trace.is_some());
        let path = if printed {
            self.name_of(ev)
        } else {
            String::new()
        };
        // Names of descriptors that never had an event go too.
        if self.names.len() > NAMES {
            self.names.clear();
        }
        self.files += 1;
        let trial = (mode() == Mode::Readahead)
            .then(|| crate::walk::trial(ev.fd, page))
            .flatten();
        let hinter = (mode() == Mode::Readahead).then(|| {
            Hinter::new(
                new_policy(PolicyKind::Ahead, hints::config(MAX_WINDOW, page)),
                size,
                page,
            )
        });
        if mode() == Mode::Trace {
            let id = format!("{}:{}", std::process::id(), self.files);
            let _ = writeln!(self.trace, "# file {id} {size} {path}");
            // The kernel's largest readahead window for the file's device,
            // which a replay of the trace gives the kernel's policy.
            if let Some(kb) = std::fs::metadata(&path)
                .ok()
                .and_then(|m| ahead::features::device_of(m.dev()))
                .and_then(|d| d.read_ahead_kb)
            {
                let _ = writeln!(self.trace, "# readahead {id} {}", kb << 10);
            }
        }
        self.open.insert(
            ev.fd,
            Open {
                gen: ev.gen,
                id: self.files,
                size,
                last_end: 0,
                stats: FileStats {
                    path,
                    policy: if hinter.is_some() { "ahead" } else { "" },
                    ..FileStats::default()
                },
                hinter,
                hinted: hints::Unread::default(),
                trial,
            },
        );
    }

    fn handle(&mut self, ev: Event, page: u64, runs: &mut Vec<(u64, u64)>) {
        if mode() == Mode::Trace && faults::sampling() {
            self.write_faults(ev.t);
        }
        if ev.kind == Kind::Unmap {
            faults::unmapped(&mut self.maps, ev.addr, ev.len, ev.t);
            return;
        }
        let stale = self.open.get(&ev.fd).is_some_and(|o| o.gen != ev.gen);
        if stale {
            if let Some(o) = self.open.remove(&ev.fd) {
                self.done.push(o.finish());
            }
        }
        if !self.open.contains_key(&ev.fd) {
            self.track(&ev, page);
        }
        let Some(o) = self.open.get_mut(&ev.fd) else {
            return;
        };
        if ev.kind == Kind::Map {
            o.stats.maps += 1;
            if mode() == Mode::Trace {
                self.maps.push(faults::Mapping {
                    start: ev.addr,
                    end: ev.addr.saturating_add(ev.len),
                    offset: ev.offset,
                    fd: ev.fd,
                    id: o.id,
                    since: ev.t,
                    gone: None,
                });
            }
            return;
        }
        if ev.kind == Kind::Write {
            o.stats.writes += 1;
            o.stats.written += ev.len;
            return;
        }
        if ev.kind == Kind::Advise {
            if mode() == Mode::Trace {
                let word = match ev.offset as c_int {
                    libc::POSIX_FADV_NORMAL => "normal",
                    libc::POSIX_FADV_RANDOM => "random",
                    libc::POSIX_FADV_SEQUENTIAL => "sequential",
                    libc::POSIX_FADV_WILLNEED => "willneed",
                    libc::POSIX_FADV_DONTNEED => "dontneed",
                    libc::POSIX_FADV_NOREUSE => "noreuse",
                    _ => return,
                };
                let _ = writeln!(
                    self.trace,
                    "# advice {}:{} {word}",
                    std::process::id(),
                    o.id
                );
            }
            return;
        }
        o.stats.requests += 1;
        o.stats.bytes += ev.len;
        let mut used = 0;
        if ev.len > 0 && !o.hinted.is_empty() {
            let end = (ev.offset + ev.len).div_ceil(page);
            used = o.hinted.read(ev.offset / page, end).0;
            o.stats.hinted_read += used;
            if o.hinted.is_empty() && still(ev.fd, ev.gen) {
                crate::quiet::hints_taken(ev.fd);
            }
        }
        if mode() == Mode::Trace {
            let _ = writeln!(
                self.trace,
                "{} {} {} file={}:{} tid={} t={}",
                ev.offset,
                ev.len,
                ev.fd,
                std::process::id(),
                o.id,
                ev.tid,
                ev.t
            );
        }
        o.trial_step(&ev);
        let Some(h) = o.hinter.as_mut() else { return };
        let end = ev.offset.saturating_add(ev.len);
        if end > o.size {
            if let Some(size) = fd_size(ev.fd) {
                if size != o.size {
                    o.size = size;
                    h.set_size(size);
                }
            }
        }
        let sequential = o.last_end == ev.offset;
        o.last_end = end;
        runs.clear();
        let pages = h.request(ev.offset, ev.len, false, sequential, runs);
        if let Some(slot) = crate::slot(ev.fd).filter(|_| still(ev.fd, ev.gen)) {
            crate::quiet::helper_saw(slot, !runs.is_empty() || used > 0);
        }
        if runs.is_empty() || !still(ev.fd, ev.gen) {
            return;
        }
        // SAFETY: the generation says the number still means this file
        // (a hint that loses the race with a close is advice to whatever
        // file took the number: it reads pages, never changes them).
        let bfd = unsafe { BorrowedFd::borrow_raw(ev.fd) };
        let pages = pages - crate::quiet::unswept(ev.fd, runs, page);
        for &(off, len) in runs.iter() {
            let _ =
                rustix::fs::fadvise(bfd, off, NonZeroU64::new(len), rustix::fs::Advice::WillNeed);
            o.hinted
                .hinted(off / page, (off + len) / page, HINTED_SET_MAX);
            crate::quiet::hinted(ev.fd, off, off + len);
        }
        o.stats.hints += runs.len() as u64;
        o.stats.hinted_pages += pages;
    }
}
