//! The interposed functions. Each one makes the call it replaces (found
//! with `dlsym(RTLD_NEXT)`), and around it tells the helper what was read
//! or, in uncached mode, reads or writes with `RWF_DONTCACHE` instead.

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t, FILE};

use crate::helper::{self, Kind};
use crate::uncached;
use crate::{may_act, mode, regular, reset, Mode};

/// The next definition of a C library function, resolved once.
macro_rules! real {
    ($name:ident: fn($($t:ty),*) -> $r:ty) => {{
        static P: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = P.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            // SAFETY: a NUL-terminated name; RTLD_NEXT from a shared object.
            p = unsafe {
                libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr() as *const libc::c_char)
            } as usize;
            P.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: the symbol has this C signature (or is absent: None).
        unsafe { std::mem::transmute::<usize, Option<unsafe extern "C" fn($($t),*) -> $r>>(p) }
    }};
}
pub(crate) use real;

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

/// Total length of an iovec array (0 when it cannot be read).
fn iov_len(iov: *const iovec, cnt: c_int) -> u64 {
    if iov.is_null() || cnt <= 0 || cnt > 1024 {
        return 0;
    }
    // SAFETY: the program passes `cnt` iovecs; the kernel will read them too.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    v.iter().map(|i| i.iov_len as u64).sum()
}

/// The common path of every read: `call` is the original call, `iov` the
/// buffers it reads into (for the uncached mode's own read).
fn around_read(
    fd: c_int,
    pos: Pos,
    iov: &[iovec],
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let m = mode();
    if m == Mode::Off || !may_act() {
        return call();
    }
    let Some((slot, gen)) = regular(fd) else {
        return call();
    };
    if let Pos::At(o) = pos {
        if o < 0 {
            return call();
        }
    }
    let len: u64 = iov.iter().map(|i| i.iov_len as u64).sum();
    match m {
        Mode::Readahead | Mode::Trace => {
            let e = crate::errno();
            let offset = match pos {
                Pos::At(o) => Some(o as u64),
                Pos::Current => helper::position(fd),
            };
            crate::set_errno(e);
            let Some(offset) = offset else {
                return call();
            };
            if m == Mode::Readahead {
                helper::note(Kind::Read, fd, gen, offset, len);
                call()
            } else {
                let r = call();
                if r > 0 {
                    let e = crate::errno();
                    helper::note(Kind::Read, fd, gen, offset, r as u64);
                    crate::set_errno(e);
                }
                r
            }
        }
        Mode::Uncached => uncached::read(fd, slot, gen, pos, iov, flags, call),
        Mode::Off => call(),
    }
}

fn around_write(
    fd: c_int,
    pos: Pos,
    iov: &[iovec],
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    if mode() != Mode::Uncached || !may_act() {
        return call();
    }
    let Some((slot, gen)) = regular(fd) else {
        return call();
    };
    if let Pos::At(o) = pos {
        if o < 0 {
            return call();
        }
    }
    uncached::write(fd, slot, gen, pos, iov, flags, call)
}

fn one(buf: *const c_void, n: size_t) -> [iovec; 1] {
    [iovec {
        iov_base: buf as *mut c_void,
        iov_len: n,
    }]
}

fn iovs<'a>(iov: *const iovec, cnt: c_int) -> &'a [iovec] {
    if iov.is_null() || cnt <= 0 || cnt > 1024 || iov_len(iov, cnt) > isize::MAX as u64 {
        return &[];
    }
    // SAFETY: as in iov_len.
    unsafe { std::slice::from_raw_parts(iov, cnt as usize) }
}

// ---- reads ----

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    around_read(
        fd,
        Pos::Current,
        &one(buf, n),
        0,
        || call!(read: fn(c_int, *mut c_void, size_t) -> ssize_t; fd, buf, n),
    )
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        return call!(__read_chk: fn(c_int, *mut c_void, size_t, size_t) -> ssize_t; fd, buf, n, buflen);
    }
    around_read(
        fd,
        Pos::Current,
        &one(buf, n),
        0,
        || call!(__read_chk: fn(c_int, *mut c_void, size_t, size_t) -> ssize_t; fd, buf, n, buflen),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    around_read(
        fd,
        Pos::At(off),
        &one(buf, n),
        0,
        || call!(pread: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t; fd, buf, n, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    around_read(
        fd,
        Pos::At(off),
        &one(buf, n),
        0,
        || call!(pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t; fd, buf, n, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    buflen: size_t,
) -> ssize_t {
    let f = || call!(__pread_chk: fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t; fd, buf, n, off, buflen);
    if n > buflen {
        return f();
    }
    around_read(fd, Pos::At(off), &one(buf, n), 0, f)
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    let f = || call!(__pread64_chk: fn(c_int, *mut c_void, size_t, off64_t, size_t) -> ssize_t; fd, buf, n, off, buflen);
    if n > buflen {
        return f();
    }
    around_read(fd, Pos::At(off), &one(buf, n), 0, f)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    around_read(
        fd,
        Pos::Current,
        iovs(iov, cnt),
        0,
        || call!(readv: fn(c_int, *const iovec, c_int) -> ssize_t; fd, iov, cnt),
    )
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    around_read(
        fd,
        Pos::At(off),
        iovs(iov, cnt),
        0,
        || call!(preadv: fn(c_int, *const iovec, c_int, off_t) -> ssize_t; fd, iov, cnt, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    around_read(
        fd,
        Pos::At(off),
        iovs(iov, cnt),
        0,
        || call!(preadv64: fn(c_int, *const iovec, c_int, off64_t) -> ssize_t; fd, iov, cnt, off),
    )
}

fn pos_of(off: i64) -> Pos {
    if off == -1 {
        Pos::Current
    } else {
        Pos::At(off)
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let f = || call!(preadv2: fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t; fd, iov, cnt, off, flags);
    if flags & libc::RWF_NOWAIT != 0 {
        // A probe: it reads nothing from the device, and a hint for it
        // would follow the program's own fallback read anyway.
        return f();
    }
    around_read(fd, pos_of(off), iovs(iov, cnt), flags, f)
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    let f = || call!(preadv64v2: fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t; fd, iov, cnt, off, flags);
    if flags & libc::RWF_NOWAIT != 0 {
        return f();
    }
    around_read(fd, pos_of(off), iovs(iov, cnt), flags, f)
}

// ---- writes (acted on in uncached mode only) ----

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    around_write(
        fd,
        Pos::Current,
        &one(buf, n),
        0,
        || call!(write: fn(c_int, *const c_void, size_t) -> ssize_t; fd, buf, n),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    around_write(
        fd,
        Pos::At(off),
        &one(buf, n),
        0,
        || call!(pwrite: fn(c_int, *const c_void, size_t, off_t) -> ssize_t; fd, buf, n, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    around_write(
        fd,
        Pos::At(off),
        &one(buf, n),
        0,
        || call!(pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t; fd, buf, n, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    around_write(
        fd,
        Pos::Current,
        iovs(iov, cnt),
        0,
        || call!(writev: fn(c_int, *const iovec, c_int) -> ssize_t; fd, iov, cnt),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    around_write(
        fd,
        Pos::At(off),
        iovs(iov, cnt),
        0,
        || call!(pwritev: fn(c_int, *const iovec, c_int, off_t) -> ssize_t; fd, iov, cnt, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    around_write(
        fd,
        Pos::At(off),
        iovs(iov, cnt),
        0,
        || call!(pwritev64: fn(c_int, *const iovec, c_int, off64_t) -> ssize_t; fd, iov, cnt, off),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    around_write(
        fd,
        pos_of(off),
        iovs(iov, cnt),
        flags,
        || call!(pwritev2: fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t; fd, iov, cnt, off, flags),
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    around_write(
        fd,
        pos_of(off),
        iovs(iov, cnt),
        flags,
        || call!(pwritev64v2: fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t; fd, iov, cnt, off, flags),
    )
}

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
    if mode() != Mode::Uncached || !may_act() || flags != 0 {
        return f();
    }
    match (regular(fd_in), regular(fd_out)) {
        (Some(_), Some(_)) => uncached::copy_file_range(fd_in, off_in, fd_out, off_out, len, f),
        _ => f(),
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

// `open` and friends are variadic in C; the mode, when there is one, is the
// next integer argument, which a fixed third parameter receives the same
// way on the x86-64 and AArch64 Linux ABIs.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, m: mode_t) -> c_int {
    opened(call!(open: fn(*const c_char, c_int, mode_t) -> c_int; path, flags, m))
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, m: mode_t) -> c_int {
    opened(call!(open64: fn(*const c_char, c_int, mode_t) -> c_int; path, flags, m))
}

#[no_mangle]
pub unsafe extern "C" fn openat(dir: c_int, path: *const c_char, flags: c_int, m: mode_t) -> c_int {
    opened(call!(openat: fn(c_int, *const c_char, c_int, mode_t) -> c_int; dir, path, flags, m))
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    m: mode_t,
) -> c_int {
    opened(call!(openat64: fn(c_int, *const c_char, c_int, mode_t) -> c_int; dir, path, flags, m))
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    opened(call!(__open_2: fn(*const c_char, c_int) -> c_int; path, flags))
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    opened(call!(__open64_2: fn(*const c_char, c_int) -> c_int; path, flags))
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    opened(call!(__openat_2: fn(c_int, *const c_char, c_int) -> c_int; dir, path, flags))
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    opened(call!(__openat64_2: fn(c_int, *const c_char, c_int) -> c_int; dir, path, flags))
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, m: mode_t) -> c_int {
    opened(call!(creat: fn(*const c_char, mode_t) -> c_int; path, m))
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, m: mode_t) -> c_int {
    opened(call!(creat64: fn(*const c_char, mode_t) -> c_int; path, m))
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, m: *const c_char) -> *mut FILE {
    let f = match real!(fopen: fn(*const c_char, *const c_char) -> *mut FILE) {
        Some(f) => f(path, m),
        None => return std::ptr::null_mut(),
    };
    if !f.is_null() {
        opened(libc::fileno(f));
    }
    f
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, m: *const c_char) -> *mut FILE {
    let f = match real!(fopen64: fn(*const c_char, *const c_char) -> *mut FILE) {
        Some(f) => f(path, m),
        None => return std::ptr::null_mut(),
    };
    if !f.is_null() {
        opened(libc::fileno(f));
    }
    f
}

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
    let fd = if f.is_null() { -1 } else { libc::fileno(f) };
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
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    opened(call!(dup: fn(c_int) -> c_int; fd))
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        closing(new);
    }
    opened(call!(dup2: fn(c_int, c_int) -> c_int; old, new))
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    closing(new);
    opened(call!(dup3: fn(c_int, c_int, c_int) -> c_int; old, new, flags))
}

// fcntl is variadic too; its one optional argument is an integer or a
// pointer, passed on as the same machine word.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let r = call!(fcntl: fn(c_int, c_int, usize) -> c_int; fd, cmd, arg);
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        opened(r)
    } else {
        r
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let r = call!(fcntl64: fn(c_int, c_int, usize) -> c_int; fd, cmd, arg);
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        opened(r)
    } else {
        r
    }
}

// ---- mappings (counted: reads through them are not seen) ----

fn mapped(fd: c_int) {
    if fd < 0 || !may_act() || matches!(mode(), Mode::Off) {
        return;
    }
    let e = crate::errno();
    if let Some((_, gen)) = regular(fd) {
        helper::note(Kind::Map, fd, gen, 0, 0);
    }
    crate::set_errno(e);
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let r = match real!(mmap: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void) {
        Some(f) => f(addr, len, prot, flags, fd, off),
        None => {
            crate::set_errno(libc::ENOSYS);
            return libc::MAP_FAILED;
        }
    };
    if r != libc::MAP_FAILED && flags & libc::MAP_ANONYMOUS == 0 {
        mapped(fd);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    let r = match real!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void)
    {
        Some(f) => f(addr, len, prot, flags, fd, off),
        None => {
            crate::set_errno(libc::ENOSYS);
            return libc::MAP_FAILED;
        }
    };
    if r != libc::MAP_FAILED && flags & libc::MAP_ANONYMOUS == 0 {
        mapped(fd);
    }
    r
}
