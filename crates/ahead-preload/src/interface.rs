//! The preload interface: the C library functions that both preload
//! libraries define, with their types, in one table. The shim
//! (crates/ahead-shim, which includes this file by path) and the core
//! (this crate) each invoke `preload_interface!` with the module their
//! definitions are in; the build fails if either library lacks a function
//! of its part of the table or defines it with another type. `run_cli`'s
//! `both_libraries_export_the_one_table` checks the other way: that
//! neither library exports a function the table does not list.

/// Checks at compile time that the module `$($m)::*` defines every
/// function of the table that library defines (`core`: the first part;
/// `shim`: both parts) with the table's type, and defines
/// `PRELOAD_FUNCTIONS`, their names.
macro_rules! preload_interface {
    ($which:ident $($m:ident)::*) => {
        preload_interface!(@pick $which [$($m)::*]
            // Both libraries.
            both {
                read(c_int, *mut c_void, size_t) -> ssize_t;
                pread(c_int, *mut c_void, size_t, off_t) -> ssize_t;
                pread64(c_int, *mut c_void, size_t, off64_t) -> ssize_t;
                readv(c_int, *const iovec, c_int) -> ssize_t;
                preadv(c_int, *const iovec, c_int, off_t) -> ssize_t;
                preadv64(c_int, *const iovec, c_int, off64_t) -> ssize_t;
                preadv2(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
                preadv64v2(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
                __read_chk(c_int, *mut c_void, size_t, size_t) -> ssize_t;
                __pread_chk(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
                __pread64_chk(c_int, *mut c_void, size_t, off64_t, size_t) -> ssize_t;
                write(c_int, *const c_void, size_t) -> ssize_t;
                pwrite(c_int, *const c_void, size_t, off_t) -> ssize_t;
                pwrite64(c_int, *const c_void, size_t, off64_t) -> ssize_t;
                writev(c_int, *const iovec, c_int) -> ssize_t;
                pwritev(c_int, *const iovec, c_int, off_t) -> ssize_t;
                pwritev64(c_int, *const iovec, c_int, off64_t) -> ssize_t;
                pwritev2(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
                pwritev64v2(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
                copy_file_range(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
                open(*const c_char, c_int, mode_t) -> c_int;
                open64(*const c_char, c_int, mode_t) -> c_int;
                openat(c_int, *const c_char, c_int, mode_t) -> c_int;
                openat64(c_int, *const c_char, c_int, mode_t) -> c_int;
                __open_2(*const c_char, c_int) -> c_int;
                __open64_2(*const c_char, c_int) -> c_int;
                __openat_2(c_int, *const c_char, c_int) -> c_int;
                __openat64_2(c_int, *const c_char, c_int) -> c_int;
                creat(*const c_char, mode_t) -> c_int;
                creat64(*const c_char, mode_t) -> c_int;
                dup(c_int) -> c_int;
                dup2(c_int, c_int) -> c_int;
                dup3(c_int, c_int, c_int) -> c_int;
                fcntl(c_int, c_int, usize) -> c_int;
                fcntl64(c_int, c_int, usize) -> c_int;
                lseek(c_int, off_t, c_int) -> off_t;
                lseek64(c_int, off64_t, c_int) -> off64_t;
                close(c_int) -> c_int;
                close_range(c_uint, c_uint, c_int) -> c_int;
                fopen(*const c_char, *const c_char) -> *mut FILE;
                fopen64(*const c_char, *const c_char) -> *mut FILE;
                fclose(*mut FILE) -> c_int;
                mmap(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
                mmap64(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void;
                munmap(*mut c_void, size_t) -> c_int;
                posix_fadvise(c_int, off_t, off_t, c_int) -> c_int;
                posix_fadvise64(c_int, off64_t, off64_t, c_int) -> c_int;
            }
            // The shim only: the ends of a process that skip its exit
            // handlers (the shim has the core write its outputs first).
            shim {
                _exit(c_int) -> ();
                _Exit(c_int) -> ();
            }
        );
    };
    (@pick core [$($m:tt)*] both { $($b:tt)* } shim { $($s:tt)* }) => {
        preload_interface!(@check [$($m)*] $($b)*);
    };
    (@pick shim [$($m:tt)*] both { $($b:tt)* } shim { $($s:tt)* }) => {
        preload_interface!(@check [$($m)*] $($b)* $($s)*);
    };
    (@check [$($m:tt)*] $($name:ident($($t:ty),*) -> $r:ty;)*) => {
        /// The C library functions this library defines (the table of
        /// `interface.rs`).
        #[allow(dead_code)]
        pub(crate) const PRELOAD_FUNCTIONS: &[&str] = &[$(stringify!($name)),*];
        const _: () = {
            use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t, FILE};
            use $($m)* as defs;
            $(let _: unsafe extern "C" fn($($t),*) -> $r = defs::$name;)*
        };
    };
}
