//! The interposed functions. Each one makes the call it replaces (the
//! next definition, [`next_definition`]), and around it tells the helper
//! what was read or, in uncached mode, reads or writes with
//! `RWF_DONTCACHE` instead.

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t, FILE};

use crate::bufs::{iovs, one, with_iov, Bufs};
use crate::helper::{self, Kind};
use crate::{may_act, mode, regular, reset, Mode};
use crate::{quiet, uncached};

/// The next definition of a C library function, resolved once.
macro_rules! real {
    ($name:ident: fn($($t:ty),*) -> $r:ty) => {{
        static P: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = P.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            p = $crate::hooks::next_definition(concat!(stringify!($name), "\0").as_ptr() as *const libc::c_char);
            P.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: the symbol has this C signature (or is absent: None).
        unsafe { std::mem::transmute::<usize, Option<unsafe extern "C" fn($($t),*) -> $r>>(p) }
    }};
}
pub(crate) use real;

/// The next definition of the C library function `name` (NUL-terminated),
/// or 0. Loaded by the shim (crates/ahead-shim, with `dlopen` and
/// `RTLD_LOCAL`), the core is in no search list `RTLD_NEXT` could walk
/// from it: the shim's `ahead_shim_next` answers what comes after the
/// shim. Preloaded directly, `RTLD_NEXT` from here.
pub(crate) fn next_definition(name: *const c_char) -> usize {
    use std::sync::atomic::AtomicUsize;
    /// The shim's function.
    static SHIM: AtomicUsize = AtomicUsize::new(0);
    if let Some(shim) = shim_symbol(c"ahead_shim_next", &SHIM) {
        // SAFETY: the shim's `ahead_shim_next` has this signature.
        let f = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(*const c_char) -> *mut c_void>(shim)
        };
        // SAFETY: a NUL-terminated name, as the caller passes.
        return unsafe { f(name) } as usize;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT from a shared object.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name) as usize }
}

/// The shim's exported function `name`, looked up once (`cache`: 0 not
/// yet, 1 not there); None where the core was preloaded without the shim.
pub(crate) fn shim_symbol(
    name: &std::ffi::CStr,
    cache: &std::sync::atomic::AtomicUsize,
) -> Option<usize> {
    use std::sync::atomic::Ordering;
    let mut p = cache.load(Ordering::Relaxed);
    if p == 0 {
        // SAFETY: a NUL-terminated name, looked up in the global scope.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        p = if f.is_null() { 1 } else { f as usize };
        cache.store(p, Ordering::Relaxed);
    }
    (p != 1).then_some(p)
}

/// Calls the next definition, or fails with ENOSYS where there is none.
macro_rules! call {
    ($name:ident: fn($($t:ty),*) -> $r:ty; $($a:expr),*) => {{
        match real!($name: fn($($t),*) -> $r) {
            // SAFETY: the caller's arguments, passed on unchanged.
            Some(f) => unsafe { f($($a),*) },
            None => {
                crate::set_errno(libc::ENOSYS);
                -1
            }
        }
    }};
}

/// Where a read or write happens: at an offset or at the file position.
#[derive(Clone, Copy)]
pub(crate) enum Pos {
    At(i64),
    Current,
}

/// The slot and generation of a call the library acts on: from a thread
/// that may act, on a regular file, at a valid offset (a negative one is
/// the kernel's to refuse, and -1 would mean "the file position" to
/// `preadv2`).
fn acts_on(fd: c_int, pos: Pos) -> Option<(&'static crate::Slot, u32)> {
    if !may_act() || matches!(pos, Pos::At(o) if o < 0) {
        return None;
    }
    regular(fd)
}

/// The common path of every read: `call` is the original call, `bufs`
/// the buffers it reads into. Only the uncached mode, which makes the read
/// itself, needs the buffers; the other modes need a length, which a plain
/// read gives and a vectored one is noted by after the call (what it
/// returned), so that its iovecs are never copied on this path.
fn around_read(
    fd: c_int,
    pos: Pos,
    bufs: Bufs,
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let m = mode();
    if m == Mode::Off {
        return call();
    }
    let Some((slot, gen)) = acts_on(fd, pos) else {
        return call();
    };
    if m == Mode::Uncached {
        return with_iov(bufs, call, |iov, call| {
            uncached::read(fd, slot, gen, pos, iov, flags, call)
        });
    }
    let ahead = m == Mode::Readahead;
    // Readahead mode follows the position ([`crate::position`]); a trace
    // asks the kernel at every read.
    let at_pos = ahead && matches!(pos, Pos::Current);
    if ahead && quiet::pass_early(slot) {
        // Not followed here: learned again when the file next needs it.
        if at_pos {
            crate::forget_position(slot);
        }
        return call();
    }
    // A trial of the kernel's readahead times the descriptor's reads
    // while it asks (two clock reads of the vDSO: tens of nanoseconds).
    let timing = ahead && slot.trial.timing();
    let call = || {
        let started = timing.then(std::time::Instant::now);
        let r = call();
        if let Some(t0) = started {
            slot.trial.timed(t0.elapsed().as_nanos() as u64, r);
        }
        if at_pos {
            crate::moved_by(slot, r);
        }
        r
    };
    let e = crate::errno();
    let offset = match pos {
        Pos::At(o) => Some(o as u64),
        Pos::Current if ahead => crate::position(slot, fd),
        Pos::Current => helper::position(fd),
    };
    crate::set_errno(e);
    let Some(offset) = offset else {
        return call();
    };
    // SAFETY: the descriptor the program passed, for this call.
    let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    // Readahead mode notes a plain read before it, so that hints are on
    // their way while it runs; a trace records what came back.
    if let (Mode::Readahead, Bufs::One(p, n)) = (m, bufs) {
        if !quiet::pass(slot, bfd, offset, n as u64) {
            send(slot, fd, gen, offset, n as u64);
        }
        crate::set_errno(e);
        let r = if slot.trial.guards(offset) {
            crate::walk::guarded(slot, bfd, p, n, offset, at_pos, timing)
        } else {
            call()
        };
        // A short read (at the end of the file) ends the stream where it
        // did end.
        if r >= 0 && (r as u64) < n as u64 {
            quiet::ended(slot, offset + r as u64);
        }
        return r;
    }
    let r = call();
    if r > 0 {
        let e = crate::errno();
        if !ahead {
            helper::note(Kind::Read, fd, gen, offset, r as u64);
        } else if !quiet::pass(slot, bfd, offset, r as u64) {
            send(slot, fd, gen, offset, r as u64);
        }
        crate::set_errno(e);
    }
    r
}

/// Readahead mode: a read the helper is to see, unless it is the file's
/// first (held: [`quiet::hold`]).
fn send(slot: &crate::Slot, fd: c_int, gen: u32, offset: u64, len: u64) {
    if let Some(held) = quiet::hold(slot, offset, len) {
        if let Some((at, n)) = held {
            helper::note(Kind::Read, fd, gen, at, n);
        }
        helper::note(Kind::Read, fd, gen, offset, len);
    }
}

fn around_write(
    fd: c_int,
    pos: Pos,
    bufs: Bufs,
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    match mode() {
        Mode::Uncached => {}
        Mode::Readahead if matches!(pos, Pos::Current) => {
            // The position moved by what was written (or to the end).
            let r = call();
            crate::position_is(fd, None);
            return r;
        }
        _ => return call(),
    }
    let Some((slot, gen)) = acts_on(fd, pos) else {
        return call();
    };
    with_iov(bufs, call, |iov, call| {
        uncached::write(fd, slot, gen, pos, iov, flags, call)
    })
}

// ---- reads and writes ----

/// Defines a hooked read or write: `$around` (around_read, around_write)
/// with the position and buffers the arguments give, around the call to
/// the next definition with the same arguments.
macro_rules! io_hook {
    ($around:ident, $name:ident($fd:ident: c_int $(, $a:ident: $t:ty)*), $pos:expr, $iov:expr, $flags:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($fd: c_int $(, $a: $t)*) -> ssize_t {
            $around($fd, $pos, $iov, $flags, || {
                call!($name: fn(c_int $(, $t)*) -> ssize_t; $fd $(, $a)*)
            })
        }
    };
}

/// The fortified variants (`_FORTIFY_SOURCE`): a length past the buffer
/// goes straight to the C library, which aborts as it should.
macro_rules! chk_hook {
    ($name:ident($fd:ident: c_int, $buf:ident: *mut c_void, $n:ident: size_t $(, $a:ident: $t:ty)*; $buflen:ident), $pos:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $fd: c_int,
            $buf: *mut c_void,
            $n: size_t
            $(, $a: $t)*,
            $buflen: size_t,
        ) -> ssize_t {
            let f = || call!($name: fn(c_int, *mut c_void, size_t $(, $t)*, size_t) -> ssize_t; $fd, $buf, $n $(, $a)*, $buflen);
            if $n > $buflen {
                return f();
            }
            around_read($fd, $pos, one($buf, $n), 0, f)
        }
    };
}

io_hook!(around_read, read(fd: c_int, buf: *mut c_void, n: size_t), Pos::Current, one(buf, n), 0);
io_hook!(around_read, pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t), Pos::At(off), one(buf, n), 0);
io_hook!(around_read, pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t), Pos::At(off), one(buf, n), 0);
io_hook!(around_read, readv(fd: c_int, iov: *const iovec, cnt: c_int), Pos::Current, iovs(iov, cnt), 0);
io_hook!(around_read, preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t), Pos::At(off), iovs(iov, cnt), 0);
io_hook!(around_read, preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t), Pos::At(off), iovs(iov, cnt), 0);
chk_hook!(__read_chk(fd: c_int, buf: *mut c_void, n: size_t; buflen), Pos::Current);
chk_hook!(__pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t; buflen), Pos::At(off));
chk_hook!(__pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t; buflen), Pos::At(off));

fn pos_of(off: i64) -> Pos {
    if off == -1 {
        Pos::Current
    } else {
        Pos::At(off)
    }
}

/// `preadv2`: an `RWF_NOWAIT` call is a probe that reads nothing from the
/// device (and a hint for it would follow the program's own fallback
/// read anyway), so it passes untouched.
fn preadv2_hook(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    if flags & libc::RWF_NOWAIT != 0 {
        return call();
    }
    around_read(fd, pos_of(off), iovs(iov, cnt), flags, call)
}

/// `preadv2` and its 64-bit twin ([`preadv2_hook`]).
macro_rules! preadv2_hook {
    ($name:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            cnt: c_int,
            off: $off,
            flags: c_int,
        ) -> ssize_t {
            preadv2_hook(fd, iov, cnt, off, flags, || {
                call!($name: fn(c_int, *const iovec, c_int, $off, c_int) -> ssize_t; fd, iov, cnt, off, flags)
            })
        }
    };
}
preadv2_hook!(preadv2, off_t);
preadv2_hook!(preadv64v2, off64_t);

// Writes: acted on in uncached mode only.
io_hook!(around_write, write(fd: c_int, buf: *const c_void, n: size_t), Pos::Current, one(buf, n), 0);
io_hook!(around_write, pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t), Pos::At(off), one(buf, n), 0);
io_hook!(around_write, pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t), Pos::At(off), one(buf, n), 0);
io_hook!(around_write, writev(fd: c_int, iov: *const iovec, cnt: c_int), Pos::Current, iovs(iov, cnt), 0);
io_hook!(around_write, pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t), Pos::At(off), iovs(iov, cnt), 0);
io_hook!(around_write, pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t), Pos::At(off), iovs(iov, cnt), 0);
io_hook!(around_write, pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int), pos_of(off), iovs(iov, cnt), flags);
io_hook!(around_write, pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int), pos_of(off), iovs(iov, cnt), flags);

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let f = || {
        call!(copy_file_range: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
            fd_in, off_in, fd_out, off_out, len, flags)
    };
    if mode() == Mode::Readahead {
        let r = f();
        // Without an offset, the call moves the descriptor's position.
        if off_in.is_null() {
            crate::position_is(fd_in, None);
        }
        if off_out.is_null() {
            crate::position_is(fd_out, None);
        }
        return r;
    }
    if mode() != Mode::Uncached || !may_act() || flags != 0 {
        return f();
    }
    match (regular(fd_in), regular(fd_out)) {
        (Some(_), Some(_)) if !same_file(fd_in, fd_out) && !appends(fd_out) => {
            uncached::copy_file_range(fd_in, off_in, fd_out, off_out, len, f)
        }
        // Within one file the kernel has rules of its own (overlapping
        // ranges are EINVAL): the call goes to it as it is.
        _ => f(),
    }
}

/// Whether a descriptor writes at the end (copy_file_range refuses such a
/// destination with EBADF, so the kernel is left to say so).
fn appends(fd: c_int) -> bool {
    // SAFETY: a descriptor the program passed; F_GETFL only.
    rustix::fs::fcntl_getfl(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        .map_or(true, |f| f.contains(rustix::fs::OFlags::APPEND))
}

/// Whether two descriptors are the same file.
fn same_file(a: c_int, b: c_int) -> bool {
    // SAFETY: descriptors the program passed; fstat only.
    let st = |fd| rustix::fs::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).ok();
    match (st(a), st(b)) {
        (Some(x), Some(y)) => x.st_dev == y.st_dev && x.st_ino == y.st_ino,
        _ => true,
    }
}

// ---- descriptors changing meaning ----

fn opened(fd: c_int) -> c_int {
    if fd >= 0 {
        let e = crate::errno();
        reset(fd);
        crate::set_errno(e);
    }
    fd
}

/// Defines a hooked call that returns a new descriptor: the call, then
/// the descriptor's slot starts afresh.
macro_rules! open_hook {
    ($name:ident($($a:ident: $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            opened(call!($name: fn($($t),*) -> c_int; $($a),*))
        }
    };
}

// `open` and friends are variadic in C; the mode, when there is one, is the
// next integer argument, which a fixed third parameter receives the same
// way on the x86-64 and AArch64 Linux ABIs.
open_hook!(open(path: *const c_char, flags: c_int, m: mode_t));
open_hook!(open64(path: *const c_char, flags: c_int, m: mode_t));
open_hook!(openat(dir: c_int, path: *const c_char, flags: c_int, m: mode_t));
open_hook!(openat64(dir: c_int, path: *const c_char, flags: c_int, m: mode_t));
open_hook!(__open_2(path: *const c_char, flags: c_int));
open_hook!(__open64_2(path: *const c_char, flags: c_int));
open_hook!(__openat_2(dir: c_int, path: *const c_char, flags: c_int));
open_hook!(__openat64_2(dir: c_int, path: *const c_char, flags: c_int));
open_hook!(creat(path: *const c_char, m: mode_t));
open_hook!(creat64(path: *const c_char, m: mode_t));

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    duplicated(fd, call!(dup: fn(c_int) -> c_int; fd))
}

/// `lseek` and its 64-bit twin: the position it answers is the one the
/// library follows from then on ([`crate::position`]).
macro_rules! seek_hook {
    ($name:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, off: $off, whence: c_int) -> $off {
            let r = call!($name: fn(c_int, $off, c_int) -> $off; fd, off, whence);
            if r >= 0 && mode() == Mode::Readahead && may_act() {
                crate::position_is(fd, Some(r as u64));
            }
            r
        }
    };
}
seek_hook!(lseek, off_t);
seek_hook!(lseek64, off64_t);

/// `fopen` and its 64-bit twin: the real call, then the stream's
/// descriptor noted as opened.
macro_rules! fopen_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, m: *const c_char) -> *mut FILE {
            let Some(real) = real!($name: fn(*const c_char, *const c_char) -> *mut FILE) else {
                return std::ptr::null_mut();
            };
            // SAFETY: the caller's arguments, passed on unchanged to the
            // function the caller meant to call.
            let f = unsafe { real(path, m) };
            if !f.is_null() {
                // SAFETY: `f` is the stream the real call just opened.
                opened(unsafe { libc::fileno(f) });
            }
            f
        }
    };
}
fopen_hook!(fopen);
fopen_hook!(fopen64);

/// Before the descriptor goes: the uncached mode flushes what it wrote.
fn closing(fd: c_int) {
    if mode() == Mode::Uncached && may_act() {
        let e = crate::errno();
        uncached::closing(fd);
        crate::set_errno(e);
    }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    closing(fd);
    let r = call!(close: fn(c_int) -> c_int; fd);
    let e = crate::errno();
    reset(fd);
    crate::set_errno(e);
    r
}

#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    let fd = if f.is_null() {
        -1
    } else {
        // SAFETY: a stream the caller is closing, so still open here.
        unsafe { libc::fileno(f) }
    };
    closing(fd);
    let r = call!(fclose: fn(*mut FILE) -> c_int; f);
    let e = crate::errno();
    reset(fd);
    crate::set_errno(e);
    r
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let r = call!(close_range: fn(c_uint, c_uint, c_int) -> c_int; first, last, flags);
    let e = crate::errno();
    let end = (last as u64).min(crate::SLOTS as u64 - 1);
    for fd in first as u64..=end {
        reset(fd as c_int);
    }
    crate::set_errno(e);
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        closing(new);
    }
    duplicated(old, call!(dup2: fn(c_int, c_int) -> c_int; old, new))
}

/// `new` is a duplicate of `old` (or the call failed: negative): its slot
/// starts afresh, and the position the two now share, which either may
/// move, is learned again at the next read of `old` (a check finds it if
/// both are read: [`crate::POS_CHECK`]).
fn duplicated(old: c_int, new: c_int) -> c_int {
    if new >= 0 && new != old {
        crate::position_is(old, None);
        crate::walk::duplicated(old);
    }
    opened(new)
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    closing(new);
    duplicated(
        old,
        call!(dup3: fn(c_int, c_int, c_int) -> c_int; old, new, flags),
    )
}

// fcntl is variadic too; its one optional argument is an integer or a
// pointer, passed on as the same machine word.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let r = call!(fcntl: fn(c_int, c_int, usize) -> c_int; fd, cmd, arg);
    if cmd == libc::F_SETFL && r == 0 {
        crate::flags_set(fd, arg);
    }
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        duplicated(fd, r)
    } else {
        r
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let r = call!(fcntl64: fn(c_int, c_int, usize) -> c_int; fd, cmd, arg);
    if cmd == libc::F_SETFL && r == 0 {
        crate::flags_set(fd, arg);
    }
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        duplicated(fd, r)
    } else {
        r
    }
}

// ---- advice (recorded in a trace, for a replay's kernel) ----

/// `posix_fadvise` and its 64-bit twin: the real call, then, in a trace,
/// the advice taken on a regular file noted (a replay reads a file advised
/// random as the kernel then does, each miss as asked).
macro_rules! fadvise_hook {
    ($name:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, off: $off, len: $off, advice: c_int) -> c_int {
            let Some(real) = real!($name: fn(c_int, $off, $off, c_int) -> c_int) else {
                return libc::ENOSYS;
            };
            // SAFETY: the caller's arguments, passed on unchanged.
            let r = unsafe { real(fd, off, len, advice) };
            if r == 0
                && matches!(mode(), Mode::Readahead)
                && matches!(
                    advice,
                    libc::POSIX_FADV_NORMAL | libc::POSIX_FADV_RANDOM | libc::POSIX_FADV_SEQUENTIAL
                )
                && may_act()
            {
                // The program's own advice for the file stands: no trial
                // of the kernel's readahead on it.
                if let Some(slot) = crate::slot(fd) {
                    slot.trial.program_advised();
                }
            }
            if r == 0 && matches!(mode(), Mode::Trace) && may_act() {
                let e = crate::errno();
                if let Some((_, gen)) = regular(fd) {
                    helper::note(Kind::Advise, fd, gen, advice.max(0) as u64, 0);
                }
                crate::set_errno(e);
            }
            r
        }
    };
}
fadvise_hook!(posix_fadvise, off_t);
fadvise_hook!(posix_fadvise64, off64_t);

// ---- mappings (counted: reads through them are not seen) ----

fn mapped(fd: c_int, addr: *mut c_void, len: size_t, offset: i64) {
    if fd < 0 || !may_act() || matches!(mode(), Mode::Off) {
        return;
    }
    let e = crate::errno();
    if let Some((_, gen)) = regular(fd) {
        if matches!(mode(), Mode::Trace) {
            // Before the program touches the mapping.
            helper::faults::watch_this_thread();
        }
        helper::note_map(
            Kind::Map,
            fd,
            gen,
            addr as u64,
            len as u64,
            offset.max(0) as u64,
        );
    }
    crate::set_errno(e);
}

/// `mmap` and its 64-bit twin: the real call, then a mapping of a file
/// counted (what is read through it is not seen).
macro_rules! mmap_hook {
    ($name:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            addr: *mut c_void,
            len: size_t,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: $off,
        ) -> *mut c_void {
            let real = real!($name: fn(*mut c_void, size_t, c_int, c_int, c_int, $off) -> *mut c_void);
            // SAFETY: the caller's arguments, passed on unchanged to the
            // function the caller meant to call.
            let r = real.map(|f| unsafe { f(addr, len, prot, flags, fd, off) });
            noted_map(r, flags, fd, len, off as i64)
        }
    };
}
mmap_hook!(mmap, off_t);
mmap_hook!(mmap64, off64_t);

/// What a mapping call returns (`None`: the real call was not found,
/// ENOSYS), having counted a mapping of a file.
fn noted_map(
    r: Option<*mut c_void>,
    flags: c_int,
    fd: c_int,
    len: size_t,
    offset: i64,
) -> *mut c_void {
    let Some(r) = r else {
        crate::set_errno(libc::ENOSYS);
        return libc::MAP_FAILED;
    };
    if r != libc::MAP_FAILED && flags & libc::MAP_ANONYMOUS == 0 {
        mapped(fd, r, len, offset);
    }
    r
}

/// `munmap`: in a trace, the faults of the addresses it frees are no
/// longer the file's.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let r = call!(munmap: fn(*mut c_void, size_t) -> c_int; addr, len);
    if r == 0 && matches!(mode(), Mode::Trace) && may_act() {
        let e = crate::errno();
        helper::note_map(Kind::Unmap, -1, 0, addr as u64, len as u64, 0);
        crate::set_errno(e);
    }
    r
}
