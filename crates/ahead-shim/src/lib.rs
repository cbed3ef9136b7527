//! The library `ahead run` and `ahead trace` preload: small, and idle until
//! a process first reads a regular file.
//!
//! Every process a command starts loads what `LD_PRELOAD` names, whether
//! or not it ever reads a file: a shell loop, a build's compiler driver,
//! `/bin/true`. This library is what they pay for. It exports the same
//! functions as the library that acts (`ahead-preload`, "the core") and,
//! until the core is loaded, passes each call on to the next definition
//! (the C library's) and does nothing else. Loading it costs what loading
//! any small library costs: a handful of page faults and the loader's
//! symbol lookups, where the core costs three times as many.
//!
//! The core is loaded with `dlopen`, from the directory this library was
//! loaded from, when it has work:
//! * `--stats` and `ahead trace`: at load, so that every process has its
//!   line or its reads recorded;
//! * uncached mode: at the process's first read or write of a regular
//!   file, found with one `fstat`. A descriptor found to be something else
//!   (a pipe, a terminal) is remembered, so a program reading only pipes
//!   makes no more calls than without ahead;
//! * readahead mode: at the first read of a regular file that readahead
//!   could help, which is later still. Reads that continue where the
//!   descriptor's last one ended are the kernel's to follow, and are told
//!   without a system call (`fds.rs`); a descriptor's first eight reads
//!   elsewhere are passed on too (`fds::HOLD`: a few jumps are no stream
//!   worth the core's start-up). The ninth read of a descriptor that is
//!   not forward loads the core, unless the file is small or cached where
//!   16 probes look (`fds::classify`): then its reads go on being passed
//!   on, a cached file's looked at again every 64th;
//! * `--off`: only with `--stats` (at load); without it, `ahead run` does
//!   not preload this library at all.
//!
//! From then on every hooked call goes to the core's function of the same
//! name, and the core finds the C library's through [`ahead_shim_next`].
//! The core starts with every descriptor unknown and learns each at its
//! next read, so what happened before it was loaded needs no replay.
//!
//! Loading takes the loader's lock and allocates, once per process: a
//! first read of a regular file from a signal handler that interrupted
//! `malloc` or `dlopen` could deadlock there (the core's own first read
//! already starts a thread). If the core cannot be loaded (removed, a
//! `noexec` mount), every call is passed on and the program runs as it
//! would without ahead. A fork while another thread is loading the core
//! leaves the child passing calls on.

#![allow(clippy::missing_safety_doc)]
// What `ahead run` ships is built without the standard library (the
// feature `no-std`, with `panic = "abort"`, as ahead-cli's build.rs builds
// it): see `panic` below.
#![cfg_attr(feature = "no-std", no_std)]

mod fds;
// The table of functions both libraries define (checked below).
#[path = "../../ahead-preload/src/interface.rs"]
#[macro_use]
mod interface;
// The unwinder's entry points, as the core has them: no libgcc_s.
#[cfg(not(feature = "no-std"))]
#[path = "../../ahead-preload/src/unwind.rs"]
mod unwind;

/// Without the standard library, a panic (which nothing here should
/// raise: the hooks index fixed tables by checked descriptors) aborts.
///
/// Why no standard library: every process under `ahead run` maps this
/// library, and what costs is the pages the loader and the constructor
/// touch, not the bytes. With std, the library was 288 KB, most of it the
/// panic hook's backtrace printer (gimli, addr2line, miniz_oxide), in four
/// segments with a relocated read-only part: 11.6 page faults per process
/// more than plain (500 fork+exec of `/bin/true` from `sh`, `perf stat`).
/// Without it, 24 KB and 7.5 more, where an empty C library takes 6.5
/// (docs/run.md has the times).
#[cfg(feature = "no-std")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: ends the process.
    unsafe { libc::abort() }
}

use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t, FILE};

/// The core's file name, in this library's directory.
const CORE: &[u8] = b"libahead_preload.so";

/// Nothing to do in this process: mode `off` without statistics (which
/// `ahead run` no longer preloads for), an unknown mode, or before the
/// constructor has run.
const IDLE: u8 = 0;
/// The core is loaded at the first read of a regular file.
const WAITING: u8 = 1;
const LOADING: u8 = 2;
const LOADED: u8 = 3;
/// The core could not be loaded: calls are passed on.
const FAILED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// Uncached mode: a write of a regular file loads the core too.
static WRITES: AtomicBool = AtomicBool::new(false);
/// Readahead mode: forward reads of tracked descriptors do not load the
/// core (`fds.rs`).
static FORWARD: AtomicBool = AtomicBool::new(false);
/// The core's `dlopen` handle.
static HANDLE: AtomicUsize = AtomicUsize::new(0);

fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno location is always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// What a call can ask of the core.
#[derive(Clone, Copy)]
enum Wants {
    /// Nothing: an open, close or mapping is passed on until the core is
    /// loaded for a read.
    Nothing,
    /// A read of `fd` at an offset (None: at its position).
    Read(c_int, Option<i64>),
    /// A write of `fd` (loads the core in uncached mode only) at an offset
    /// (None: at its position).
    Write(c_int, Option<i64>),
}

/// What the shim does with a call while the core is not loaded.
enum Decision {
    Pass,
    /// A read of a tracked descriptor passed on, forward or one of the
    /// first that are not (held): where it ended is noted when it returns.
    Note(Passed),
    /// Load the core for a read of this descriptor (or a write).
    Load(c_int),
}

/// Whether the call makes this process load the core now.
fn decide(wants: Wants) -> Decision {
    let fd = match wants {
        Wants::Nothing => return Decision::Pass,
        Wants::Read(fd, at) => {
            if FORWARD.load(Ordering::Relaxed) {
                if let Some(offset) = fds::forward(fd, at) {
                    return Decision::Note(Passed {
                        fd,
                        offset,
                        current: at.is_none(),
                        held: false,
                    });
                }
                if fds::quiet(fd, at) {
                    return passed_on(fd, at);
                }
            }
            fd
        }
        Wants::Write(fd, at) => {
            if at.is_none() {
                fds::untrack(fd);
            }
            if !WRITES.load(Ordering::Relaxed) {
                return Decision::Pass;
            }
            fd
        }
    };
    if fds::is_other(fd) {
        return Decision::Pass;
    }
    let e = errno();
    // SAFETY: an all-zero stat is a valid value of this plain C struct;
    // fstat fills it or fails (a bad number: EBADF, left to the call).
    let mut st: libc::stat64 = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is live and writable.
    let ok = unsafe { libc::fstat64(fd, &mut st) } == 0;
    set_errno(e);
    if !ok {
        return Decision::Pass;
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFREG {
        if let (Wants::Read(_, at), true) = (wants, FORWARD.load(Ordering::Relaxed)) {
            let size = u64::try_from(st.st_size).unwrap_or(0);
            if fds::hold(fd, size) {
                return held(fd, at);
            }
            // A small or cached file needs no core: its reads are the
            // kernel's alone, as the core would leave them. Looked at once,
            // at the first read past the held ones.
            if fds::looks(fd) && fds::classify(fd, size) {
                return passed_on(fd, at);
            }
            // Reads that jump at random: held on.
            if fds::scattered(fd) {
                return held(fd, at);
            }
        }
        // Reads with O_DIRECT bypass the page cache: the core would leave
        // them alone (its `DIRECT`), so they never load it. Asked where a
        // call would load the core, not remembered: `F_SETFL` may clear
        // the flag.
        if direct(fd) {
            return match wants {
                Wants::Read(_, at) => passed_on(fd, at),
                _ => Decision::Pass,
            };
        }
        return Decision::Load(fd);
    }
    fds::mark_other(fd);
    Decision::Pass
}

/// Whether `fd` reads with `O_DIRECT` (the `fcntl` system call, not the
/// hooked C function). Keeps errno.
fn direct(fd: c_int) -> bool {
    let e = errno();
    // SAFETY: asks the descriptor's flags; changes nothing.
    let r = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    set_errno(e);
    r >= 0 && r & libc::c_long::from(libc::O_DIRECT) != 0
}

/// A held read, passed on: where it ends is noted (`fds::held_done`).
fn held(fd: c_int, at: Option<i64>) -> Decision {
    noted(fd, at, true)
}

/// A read of a small or cached file passed on: where it ends is noted, as
/// for any read of a tracked descriptor, so that the next one is known
/// forward or not.
fn passed_on(fd: c_int, at: Option<i64>) -> Decision {
    noted(fd, at, false)
}

fn noted(fd: c_int, at: Option<i64>, held: bool) -> Decision {
    match fds::offset(fd, at) {
        Some(offset) => Decision::Note(Passed {
            fd,
            offset,
            current: at.is_none(),
            held,
        }),
        None => Decision::Pass,
    }
}

/// Loads the core (one thread; others meanwhile pass their calls on).
fn load() {
    if STATE
        .compare_exchange(WAITING, LOADING, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let e = errno();
    let handle = open_core();
    if !handle.is_null() {
        // SAFETY: a live handle and a NUL-terminated name.
        let exit = unsafe { libc::dlsym(handle, c"ahead_core_exit".as_ptr()) };
        CORE_EXIT.store(exit as usize, Ordering::Release);
    }
    set_errno(e);
    HANDLE.store(handle as usize, Ordering::Release);
    STATE.store(
        if handle.is_null() { FAILED } else { LOADED },
        Ordering::Release,
    );
}

/// `dlopen` of the core beside this library (null if it cannot be).
fn open_core() -> *mut c_void {
    // SAFETY: an all-zero Dl_info is a valid value of this plain C struct;
    // dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let here = open_core as *const c_void;
    // SAFETY: `info` is live and writable; `here` is this library's code.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: on success dli_fname is the NUL-terminated path the object
    // was loaded from, which stays while it is loaded.
    let own = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    let Some(slash) = own.iter().rposition(|&b| b == b'/') else {
        return core::ptr::null_mut();
    };
    // No allocation: the path is put together on the stack.
    let mut path = [0u8; 4096];
    let len = slash + 1 + CORE.len();
    if len >= path.len() {
        return core::ptr::null_mut();
    }
    path[..=slash].copy_from_slice(&own[..=slash]);
    path[slash + 1..len].copy_from_slice(CORE);
    // SAFETY: a NUL-terminated path (the rest of `path` is zeros).
    unsafe {
        libc::dlopen(
            path.as_ptr().cast(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE,
        )
    }
}

/// The next definition of `name` after this library (the C library's):
/// what the core calls where it passes a call on. Exported for the core,
/// which is loaded where `RTLD_NEXT` from it would not find it.
#[no_mangle]
pub unsafe extern "C" fn ahead_shim_next(name: *const c_char) -> *mut c_void {
    // SAFETY: the caller passes a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name) }
}

/// Whether the program advised `fd` how the kernel is to read it ahead
/// (`posix_fadvise`: normal, random or sequential) before the core was
/// loaded: the core's trial of the kernel's readahead leaves the file to
/// the program's advice. Exported for the core.
#[no_mangle]
pub extern "C" fn ahead_shim_advised(fd: c_int) -> c_int {
    c_int::from(fds::advised(fd))
}

/// The function a hooked call goes to: the core's once it is loaded (the
/// call may load it), else the next definition (0 if there is none); and,
/// for a forward read passed on, what to note when it returns.
fn target(
    next: &AtomicUsize,
    core: &AtomicUsize,
    name: &CStr,
    wants: Wants,
) -> (usize, Option<Passed>) {
    let mut state = STATE.load(Ordering::Acquire);
    let mut passed = None;
    if state == WAITING {
        match decide(wants) {
            Decision::Pass => {}
            Decision::Note(p) => passed = Some(p),
            Decision::Load(fd) => {
                load();
                state = STATE.load(Ordering::Acquire);
                if state == LOADED {
                    replay(fd);
                }
            }
        }
    }
    if state == LOADED {
        let mut p = core.load(Ordering::Relaxed);
        if p == 0 {
            let handle = HANDLE.load(Ordering::Acquire) as *mut c_void;
            // SAFETY: a live handle and a NUL-terminated name.
            p = unsafe { libc::dlsym(handle, name.as_ptr()) } as usize;
            core.store(p, Ordering::Relaxed);
        }
        if p != 0 {
            return (p, None);
        }
    }
    let mut p = next.load(Ordering::Relaxed);
    if p == 0 {
        // SAFETY: a NUL-terminated name; RTLD_NEXT from a shared object.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        next.store(p, Ordering::Relaxed);
    }
    (p, passed)
}

/// A read of a tracked descriptor passed on while the core was not loaded.
struct Passed {
    fd: c_int,
    offset: u64,
    /// At the file position (which it moves).
    current: bool,
    /// One of the descriptor's first reads that were not forward: where it
    /// read is noted too, for the core to see with the next.
    held: bool,
}

impl Passed {
    /// The read returned `r`.
    fn done(&self, r: isize) {
        fds::read_done(self.fd, self.offset, self.current, r);
        if self.held {
            fds::held_done(self.fd, self.offset, r);
        }
    }
}

/// The core was just loaded for a read of `fd`: the last read of it
/// passed on before, if there was one, goes to the core's policy first
/// (`ahead_core_held`), so that it sees two reads of the stream at once.
fn replay(fd: c_int) {
    let Some((offset, len)) = fds::held_read(fd) else {
        return;
    };
    let handle = HANDLE.load(Ordering::Acquire) as *mut c_void;
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, c"ahead_core_held".as_ptr()) };
    if p.is_null() {
        return;
    }
    // SAFETY: the core's `ahead_core_held` has this signature.
    let f =
        unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int, u64, u64)>(p) };
    let e = errno();
    // SAFETY: a descriptor the program is reading, and where it read.
    unsafe { f(fd, offset, len) };
    set_errno(e);
}

/// Defines an exported hook: the call goes to [`target`]'s function with
/// the caller's arguments; `$none` is returned (errno ENOSYS) where there
/// is no function to call; while the core is not loaded, a read (`read`
/// before the name) notes where a read it passed on ended, and `$after`
/// sees any call's result (to follow descriptors' positions, `fds.rs`).
macro_rules! hook {
    (read $name:ident($($a:ident: $t:ty),*) -> $r:ty, $wants:expr) => {
        hook!(@def read $name($($a: $t),*) -> $r, $wants, -1, |_r| {});
    };
    ($name:ident($($a:ident: $t:ty),*) -> $r:ty, $wants:expr, $none:expr) => {
        hook!(@def other $name($($a: $t),*) -> $r, $wants, $none, |_r| {});
    };
    ($name:ident($($a:ident: $t:ty),*) -> $r:ty, $wants:expr, $none:expr, |$res:ident| $after:expr) => {
        hook!(@def other $name($($a: $t),*) -> $r, $wants, $none, |$res| $after);
    };
    (@noted read, $passed:ident, $res:ident) => {
        if let Some(passed) = &$passed {
            passed.done($res);
        }
    };
    // Only reads are passed on with something to note.
    (@noted other, $passed:ident, $res:ident) => {
        debug_assert!($passed.is_none());
    };
    (@def $kind:ident $name:ident($($a:ident: $t:ty),*) -> $r:ty, $wants:expr, $none:expr, |$res:ident| $after:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            static CORE_FN: AtomicUsize = AtomicUsize::new(0);
            // Checked when the library is built, not at every call (the
            // check scanned the name: a fifth of a hook's time).
            const NAME: &CStr =
                match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("a function's name has no NUL inside"),
                };
            let (p, passed) = target(&NEXT, &CORE_FN, NAME, $wants);
            if p == 0 {
                set_errno(libc::ENOSYS);
                return $none;
            }
            // SAFETY: the symbol of this name has this C signature.
            let f = unsafe { core::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) };
            // SAFETY: the caller's arguments, passed on unchanged to the
            // function the caller meant to call (or the core's, which
            // passes them on).
            let $res = unsafe { f($($a),*) };
            if STATE.load(Ordering::Relaxed) != LOADED {
                let e = errno();
                hook!(@noted $kind, passed, $res);
                $after;
                set_errno(e);
            }
            $res
        }
    };
}

// Reads: the first of a regular file loads the core.
hook!(read read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t, Wants::Read(fd, None));
hook!(read pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t, Wants::Read(fd, Some(off as i64)));
hook!(read pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t, Wants::Read(fd, Some(off as i64)));
hook!(read readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t, Wants::Read(fd, None));
hook!(read preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t, Wants::Read(fd, Some(off as i64)));
hook!(read preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t, Wants::Read(fd, Some(off as i64)));
hook!(read preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t, Wants::Read(fd, (off != -1).then_some(off as i64)));
hook!(read preadv64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t, Wants::Read(fd, (off != -1).then_some(off as i64)));
hook!(read __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t, Wants::Read(fd, None));
hook!(read __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, buflen: size_t) -> ssize_t, Wants::Read(fd, Some(off as i64)));
hook!(read __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t, Wants::Read(fd, Some(off as i64)));

// Writes: the first of a regular file loads the core in uncached mode.
hook!(write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t, Wants::Write(fd, None), -1);
hook!(pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t, Wants::Write(fd, Some(off as i64)), -1);
hook!(pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t, Wants::Write(fd, Some(off as i64)), -1);
hook!(writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t, Wants::Write(fd, None), -1);
hook!(pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t, Wants::Write(fd, Some(off as i64)), -1);
hook!(pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t, Wants::Write(fd, Some(off as i64)), -1);
hook!(pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t, Wants::Write(fd, (off != -1).then_some(off as i64)), -1);
hook!(pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t, Wants::Write(fd, (off != -1).then_some(off as i64)), -1);
hook!(copy_file_range(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, len: size_t, flags: c_uint) -> ssize_t, Wants::Write(fd_in, Some(0)), -1, |_r| {
    fds::untrack(fd_in);
    fds::untrack(fd_out);
});

// Descriptors that now mean another file.
hook!(open(path: *const c_char, flags: c_int, m: mode_t) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(open64(path: *const c_char, flags: c_int, m: mode_t) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(openat(dir: c_int, path: *const c_char, flags: c_int, m: mode_t) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(openat64(dir: c_int, path: *const c_char, flags: c_int, m: mode_t) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(__open_2(path: *const c_char, flags: c_int) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(__open64_2(path: *const c_char, flags: c_int) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(__openat_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(__openat64_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(creat(path: *const c_char, m: mode_t) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(creat64(path: *const c_char, m: mode_t) -> c_int, Wants::Nothing, -1, |fd| fds::opened(fd));
hook!(dup(old: c_int) -> c_int, Wants::Nothing, -1, |fd| shared(old, fd));
hook!(dup2(old: c_int, new: c_int) -> c_int, Wants::Nothing, -1, |_r| shared(old, new));
hook!(dup3(old: c_int, new: c_int, flags: c_int) -> c_int, Wants::Nothing, -1, |_r| shared(old, new));
hook!(fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int, Wants::Nothing, -1, |r| dup_fd(fd, cmd, r));
hook!(fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int, Wants::Nothing, -1, |r| dup_fd(fd, cmd, r));
hook!(lseek(fd: c_int, off: off_t, whence: c_int) -> off_t, Wants::Nothing, -1, |r| fds::seeked(fd, r));
hook!(lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t, Wants::Nothing, -1, |r| fds::seeked(fd, r));
hook!(close(fd: c_int) -> c_int, Wants::Nothing, -1, |_r| fds::closed(fd));
hook!(close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int, Wants::Nothing, -1, |_r| {
    for fd in first..=last.min(u16::MAX.into()) {
        fds::closed(fd as c_int);
    }
});
hook!(fopen(path: *const c_char, m: *const c_char) -> *mut FILE, Wants::Nothing, core::ptr::null_mut(), |f| opened_stream(f));
hook!(fopen64(path: *const c_char, m: *const c_char) -> *mut FILE, Wants::Nothing, core::ptr::null_mut(), |f| opened_stream(f));
hook!(fclose(f: *mut FILE) -> c_int, Wants::Nothing, -1);

// Every function of the one table, defined above with its type.
preload_interface!(shim crate);

// Mappings (counted by the core for --stats).
hook!(mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void, Wants::Nothing, libc::MAP_FAILED);
hook!(mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void, Wants::Nothing, libc::MAP_FAILED);
hook!(munmap(addr: *mut c_void, len: size_t) -> c_int, Wants::Nothing, -1);

// Advice (recorded by the core in a trace). It returns an error number,
// not -1 and errno.
hook!(posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int, Wants::Nothing, libc::ENOSYS, |r| fds::advise(fd, advice, r));
hook!(posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int, Wants::Nothing, libc::ENOSYS, |r| fds::advise(fd, advice, r));

// The ends of a process that skip its exit handlers: the core writes its
// outputs first (`ahead_core_exit`), then the C library's ends it. The
// functions are looked up before (at load, and when the core is loaded),
// not here: a `vfork` child shares its parent's memory, and a lookup may
// write to it.
/// The C library's `_exit` and `_Exit` (0: none found).
static EXIT_NEXT: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// The core's `ahead_core_exit`, once it is loaded (0: not).
static CORE_EXIT: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) {
    // SAFETY: passed on to the C library's function of the same name.
    unsafe { end(&EXIT_NEXT[0], status) }
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) {
    // SAFETY: as above.
    unsafe { end(&EXIT_NEXT[1], status) }
}

/// `_exit` or `_Exit`: the core's outputs written if it is loaded, then
/// the next definition (`next`) called; it does not return (the exit
/// system call if there is none).
unsafe fn end(next: &AtomicUsize, status: c_int) -> ! {
    let core = CORE_EXIT.load(Ordering::Acquire);
    if core != 0 {
        // SAFETY: the core's `ahead_core_exit` has this signature.
        let f = unsafe { core::mem::transmute::<usize, unsafe extern "C" fn()>(core) };
        // SAFETY: it takes nothing and checks for itself whether it may
        // act (a vfork child, a signal handler).
        unsafe { f() };
    }
    let p = next.load(Ordering::Relaxed);
    if p != 0 {
        // SAFETY: the C library's `_exit`/`_Exit` take the status and do
        // not return.
        let f = unsafe { core::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> !>(p) };
        // SAFETY: ends the process with the caller's status.
        unsafe { f(status) }
    }
    loop {
        // SAFETY: ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `new` is a duplicate of `old`: the two share one position, which
/// either may move.
fn shared(old: c_int, new: c_int) {
    fds::untrack(old);
    fds::closed(new);
}

fn dup_fd(old: c_int, cmd: c_int, r: c_int) {
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        shared(old, r);
    }
}

/// A stream's reads are the C library's own, unseen.
fn opened_stream(f: *mut FILE) {
    if !f.is_null() {
        // SAFETY: a stream fopen just returned.
        fds::closed(unsafe { libc::fileno(f) });
    }
}

/// An environment variable, read with the C library's `getenv` (no
/// allocation, and none of the standard library's environment code).
fn env(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: a NUL-terminated name.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: getenv's answer, if any, is a NUL-terminated string of the
    // environment, which does not change before constructors have run.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}

extern "C" fn init() {
    for (slot, name) in EXIT_NEXT.iter().zip([c"_exit", c"_Exit"]) {
        // SAFETY: a NUL-terminated name; RTLD_NEXT from a shared object.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(p as usize, Ordering::Relaxed);
    }
    let mode = env(c"AHEAD_RUN_MODE");
    let acts = matches!(mode, Some(b"readahead" | b"uncached" | b"trace"));
    let eager = env(c"AHEAD_RUN_STATS").is_some()
        || env(c"AHEAD_RUN_TRACE").is_some()
        || mode == Some(b"trace");
    WRITES.store(mode == Some(b"uncached"), Ordering::Relaxed);
    FORWARD.store(mode == Some(b"readahead"), Ordering::Relaxed);
    if acts || eager {
        STATE.store(WAITING, Ordering::Release);
    }
    if eager {
        load();
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
