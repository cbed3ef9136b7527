//! A hooked call's buffers as the program passed them, and the program's
//! memory read and written without faulting where it is not readable or
//! writable (the kernel answers EFAULT then, as it would have).

use libc::{c_int, c_void, iovec, size_t, ssize_t};

/// Runs `f` with the call's buffers as iovecs, or makes the call as it is
/// where they cannot be had ([`Bufs::read_into`]).
pub(crate) fn with_iov<C: FnOnce() -> ssize_t>(
    bufs: Bufs,
    call: C,
    f: impl FnOnce(&[iovec], C) -> ssize_t,
) -> ssize_t {
    let mut store = [EMPTY_IOV; MAX_IOV];
    match bufs.read_into(&mut store) {
        Some(iov) => f(iov, call),
        None => call(),
    }
}

/// Most buffers of a vectored call the library acts on; a call with more
/// is passed on untouched.
const MAX_IOV: usize = 64;
const EMPTY_IOV: iovec = iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// A call's buffers, as the program passed them.
#[derive(Clone, Copy)]
pub(crate) enum Bufs {
    One(*const c_void, size_t),
    Many(*const iovec, c_int),
}

pub(crate) fn one(buf: *const c_void, n: size_t) -> Bufs {
    Bufs::One(buf, n)
}

pub(crate) fn iovs(iov: *const iovec, cnt: c_int) -> Bufs {
    Bufs::Many(iov, cnt)
}

impl Bufs {
    /// The buffers as iovecs in `store`. A vector is copied out of the
    /// program's memory with `process_vm_readv`, which fails where the
    /// memory is not readable instead of faulting: the call is then passed
    /// on, and the kernel answers EFAULT as it would have. None also for
    /// more than [`MAX_IOV`] buffers.
    pub(crate) fn read_into(self, store: &mut [iovec; MAX_IOV]) -> Option<&[iovec]> {
        match self {
            Bufs::One(p, n) => {
                store[0] = iovec {
                    iov_base: p as *mut c_void,
                    iov_len: n,
                };
                Some(&store[..1])
            }
            Bufs::Many(p, cnt) => {
                let n = usize::try_from(cnt).ok().filter(|&n| n <= MAX_IOV)?;
                if n == 0 {
                    return Some(&store[..0]);
                }
                let bytes = n * std::mem::size_of::<iovec>();
                copy_from_program(p as *const c_void, store.as_mut_ptr() as *mut c_void, bytes)
                    .then_some(&store[..n])
            }
        }
    }
}

/// Copies `bytes` from the program's memory at `from` into `to`, without
/// faulting on memory that is not readable (false then).
pub(crate) fn copy_from_program(from: *const c_void, to: *mut c_void, bytes: usize) -> bool {
    let local = iovec {
        iov_base: to,
        iov_len: bytes,
    };
    let remote = iovec {
        iov_base: from as *mut c_void,
        iov_len: bytes,
    };
    // SAFETY: `to` holds `bytes`; the kernel checks `from`.
    let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    r == bytes as ssize_t
}

/// Copies `bytes` from `from` into the program's memory at `to`, without
/// faulting on memory that is not writable (false then).
pub(crate) fn copy_to_program(from: *const c_void, to: *mut c_void, bytes: usize) -> bool {
    let local = iovec {
        iov_base: from as *mut c_void,
        iov_len: bytes,
    };
    let remote = iovec {
        iov_base: to,
        iov_len: bytes,
    };
    // SAFETY: `from` holds `bytes`; the kernel checks `to`.
    let r = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    r == bytes as ssize_t
}
