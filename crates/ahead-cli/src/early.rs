//! `ahead run`'s plain forms started before the C library starts.
//!
//! `ahead` is the program's entry point here (`ahead_early`, which build.rs
//! names to the linker), not the C library's `_start`. It reads the
//! arguments and the environment from the stack the kernel left, and for
//! `ahead run [--readahead|--uncached|--off|--no-dontcache] -- PROGRAM …`
//! with the preload libraries in place it makes the same checks and builds
//! the same environment as [`launch::Quick::exec`], with system calls of
//! its own, and execs the program. Anything else, and any check that fails
//! or that it cannot make, returns to `_start`, and the launcher runs as it
//! always did: glibc and Rust's standard library start, `main` parses the
//! arguments again, and [`launch::Quick`] or `ahead-full` takes over. A
//! check this path does not make is never skipped: it is left to those.
//!
//! Why: the C library's start-up is most of what the launcher costs. In
//! a virtual machine glibc's start reads the processor's features and its
//! caches' geometry with `cpuid`, dozens of times (`handle_amd`,
//! `get_common_indices` and `update_active` were the top of `perf record`
//! over a statically linked C program that only execs), and each `cpuid`
//! traps to the hypervisor. Measured on this machine (2026-11-29, 200
//! spawns per batch, 21 alternated batches, medians), each in front of
//! `/bin/true` (0.75 ms alone): a static C program that only execs added
//! 0.37 ms, one without the C library 0.10 ms, and the launcher 0.56 ms.
//! The program under `ahead run` starts the C library once, as it does
//! without `ahead`; the launcher in front of it need not.
//!
//! What runs here cannot use the C library, nor anything that calls it:
//! no allocation, no `memcpy`, `memset` or `memcmp` (glibc selects them
//! at start-up; the crate is `no_builtins`, so the compiler does not turn
//! loops into them, and bytes are compared one by one), no thread-local
//! storage, no panics (a panic's handler is the standard library's). The
//! entry applies the program's relative relocations first (below), so
//! calls into Rust's core library work. The program's environment
//! differs from the standard library's in one way only: it is passed in
//! its own order, with the variables set here replaced, where
//! `Command` sorts it and drops entries with no `=`.

use core::arch::{asm, global_asm};

use crate::launch;

// The entry. The kernel (or, for a dynamically linked launcher, the
// loader) leaves the argument count, the arguments and the environment on
// the stack, and in `rdx` a function for `atexit` (the loader's, or null);
// both are kept for `_start`.
//
// First it applies the program's relative relocations. A static
// position-independent executable relocates itself in the C library's
// start-up, which has not run yet, and until then every pointer in its data
// holds its link-time value, the global offset table's among them (calls
// into Rust's core library go through it where the compiler does not
// inline them, as in a debug build). A relative relocation sets its word to
// the load address (`__ehdr_start`) plus its addend, so glibc's own pass
// over the same table later writes the same values; a word that holds its
// value already is not written, so a launcher a loader relocated (and whose
// relocated data it then made read-only) is left as it is. Packed
// relocations (`DT_RELR`) add to the word instead and cannot be applied
// twice: a program that has them goes straight to `_start`.
//
// Then `quick`, on an aligned stack; if it returns, `_start`, with the
// stack and `rdx` as they were.
global_asm!(
    ".globl ahead_early",
    ".type ahead_early, @function",
    "ahead_early:",
    "mov r12, rsp",
    "mov r13, rdx",
    "lea rsi, [rip + __ehdr_start]",
    "lea rdi, [rip + _DYNAMIC]",
    // rcx: DT_RELA, r8: DT_RELASZ, r9: DT_RELAENT.
    "xor ecx, ecx",
    "xor r8d, r8d",
    "mov r9d, 24",
    "2:",
    "mov rax, qword ptr [rdi]",
    "test rax, rax",
    "jz 4f",
    "cmp rax, 36",
    "je 8f",
    "cmp rax, 7",
    "cmove rcx, qword ptr [rdi + 8]",
    "cmp rax, 8",
    "cmove r8, qword ptr [rdi + 8]",
    "cmp rax, 9",
    "cmove r9, qword ptr [rdi + 8]",
    "add rdi, 16",
    "jmp 2b",
    "4:",
    "test r9, r9",
    "jz 8f",
    "add rcx, rsi",
    "lea r10, [rcx + r8]",
    "5:",
    "cmp rcx, r10",
    "jae 7f",
    // R_X86_64_RELATIVE: *(base + r_offset) = base + r_addend.
    "cmp dword ptr [rcx + 8], 8",
    "jne 6f",
    "mov rax, qword ptr [rcx]",
    "mov rdx, qword ptr [rcx + 16]",
    "add rdx, rsi",
    "cmp qword ptr [rsi + rax], rdx",
    "je 6f",
    "mov qword ptr [rsi + rax], rdx",
    "6:",
    "add rcx, r9",
    "jmp 5b",
    "7:",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {quick}",
    "mov rsp, r12",
    "8:",
    "mov rdx, r13",
    "jmp _start",
    quick = sym quick,
);

// The numbers are the libc crate's (constants only: no C library code).
const SYS_READ: usize = libc::SYS_read as usize;
const SYS_CLOSE: usize = libc::SYS_close as usize;
const SYS_FSTAT: usize = libc::SYS_fstat as usize;
const SYS_PREAD64: usize = libc::SYS_pread64 as usize;
const SYS_EXECVE: usize = libc::SYS_execve as usize;
const SYS_GETEUID: usize = libc::SYS_geteuid as usize;
const SYS_OPENAT: usize = libc::SYS_openat as usize;
const SYS_MKDIRAT: usize = libc::SYS_mkdirat as usize;
const SYS_NEWFSTATAT: usize = libc::SYS_newfstatat as usize;

const AT_FDCWD: isize = libc::AT_FDCWD as isize;
const O_RDONLY: usize = libc::O_RDONLY as usize;
const O_NONBLOCK: usize = libc::O_NONBLOCK as usize;
const O_DIRECTORY: usize = libc::O_DIRECTORY as usize;
const O_NOFOLLOW: usize = libc::O_NOFOLLOW as usize;
const O_CLOEXEC: usize = libc::O_CLOEXEC as usize;

const EACCES: isize = libc::EACCES as isize;
const ENOENT: isize = libc::ENOENT as isize;
const ENODEV: isize = libc::ENODEV as isize;
const ENOTDIR: isize = libc::ENOTDIR as isize;
const EEXIST: isize = libc::EEXIST as isize;
const EINTR: isize = libc::EINTR as isize;
const ETIMEDOUT: isize = libc::ETIMEDOUT as isize;
const ESTALE: isize = libc::ESTALE as isize;

const S_IFMT: u32 = libc::S_IFMT;
const S_IFREG: u32 = libc::S_IFREG;

/// A system call of up to four arguments: its result, or `-errno`.
///
/// # Safety
/// The arguments must be what call `n` takes (valid pointers where it
/// reads or writes memory).
unsafe fn sys(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let r: isize;
    // SAFETY: the caller passes what call `n` takes; `syscall` clobbers
    // rcx and r11 and nothing else the compiler holds.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    r
}

/// `struct stat` of x86-64, as `fstat` fills it.
#[repr(C)]
struct Stat([u64; 18]);

impl Stat {
    fn mode(&self) -> u32 {
        // st_mode: the low half of the fourth word.
        self.0[3] as u32
    }
    fn uid(&self) -> u32 {
        (self.0[3] >> 32) as u32
    }
    fn size(&self) -> u64 {
        self.0[6]
    }
}

/// The memory this path works in: static and zeroed (no allocator, no
/// large stack frames to clear).
struct Scratch {
    stat: Stat,
    /// A path being made: a directory of PATH and a name, the state
    /// directory's.
    path: Buf<4096>,
    /// `LD_PRELOAD=…`.
    preload: Buf<8192>,
    /// A program's ELF header and program headers ([`launch::cannot_act`]
    /// reads up to 64 KiB of them).
    head: [u8; 1 << 16],
    /// The program's environment.
    envp: [*const u8; 1024],
}

/// [`Scratch`], for the one thread that runs before the C library starts.
struct Only(core::cell::UnsafeCell<Scratch>);

// SAFETY: used by `quick` alone, which runs once, before there is any
// other thread.
unsafe impl Sync for Only {}

static SCRATCH: Only = Only(core::cell::UnsafeCell::new(Scratch {
    stat: Stat([0; 18]),
    path: Buf::new(),
    preload: Buf::new(),
    head: [0; 1 << 16],
    envp: [core::ptr::null(); 1024],
}));

/// A NUL-terminated byte string being made.
struct Buf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Buf<N> {
    const fn new() -> Self {
        Buf {
            bytes: [0; N],
            len: 0,
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends `s`; false if it does not fit with the final NUL.
    fn push(&mut self, s: &[u8]) -> bool {
        for &b in s {
            match self.bytes.get_mut(self.len) {
                Some(slot) if self.len + 1 < N => *slot = b,
                _ => return false,
            }
            self.len += 1;
        }
        true
    }

    /// Appends a `/` unless the string is empty or ends with one, then
    /// `name`: as `PathBuf::push` joins a relative name.
    fn join(&mut self, name: &[u8]) -> bool {
        let sep = self.len > 0 && self.bytes.get(self.len - 1) != Some(&b'/');
        (!sep || self.push(b"/")) && self.push(name)
    }

    /// The string, NUL-terminated, for a system call.
    fn c(&mut self) -> *const u8 {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = 0;
        }
        self.bytes.as_ptr()
    }
}

/// The bytes of a NUL-terminated string (the NUL is right after them).
///
/// # Safety
/// `p` points to a NUL-terminated string that outlives `'a`.
unsafe fn cstr<'a>(p: *const u8) -> &'a [u8] {
    let mut n = 0;
    // SAFETY: the string runs up to its NUL.
    unsafe {
        while *p.add(n) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

/// The environment's first value of `name` (NUL-terminated where it lies).
fn var(env: &[*const u8], name: &[u8]) -> Option<&'static [u8]> {
    env.iter()
        // SAFETY: the environment's strings, there for the process's life.
        .map(|&p| unsafe { cstr(p) })
        .find(|e| named(e, name))
        .and_then(|e| e.get(name.len() + 1..))
}

/// Whether the environment entry `e` is `name=…`.
fn named(e: &[u8], name: &[u8]) -> bool {
    e.get(name.len()) == Some(&b'=') && e.get(..name.len()).is_some_and(|k| launch::same(k, name))
}

fn fstat(fd: isize, st: &mut Stat) -> bool {
    // SAFETY: `st` is a `struct stat` to fill.
    unsafe { sys(SYS_FSTAT, fd as usize, st as *mut Stat as usize, 0, 0) == 0 }
}

fn close(fd: isize) {
    // SAFETY: closes a descriptor this path opened.
    unsafe { sys(SYS_CLOSE, fd as usize, 0, 0, 0) };
}

/// Opens the NUL-terminated `name` (from `dir`): the descriptor, or `-errno`.
fn openat(dir: isize, name: *const u8, flags: usize) -> isize {
    // SAFETY: `name` is NUL-terminated (every caller's is).
    unsafe { sys(SYS_OPENAT, dir as usize, name as usize, flags, 0) }
}

/// Whether the directory `fd` is the caller's alone (`journal::private`).
fn private(fd: isize, euid: u32, st: &mut Stat) -> bool {
    fstat(fd, st) && st.uid() == euid && st.mode() & 0o022 == 0
}

/// Opens the absolute directory `path` if it is the caller's alone
/// (`StateDir::open_at`'s `own`).
fn own(path: &[u8], euid: u32, st: &mut Stat) -> Option<isize> {
    if path.first() != Some(&b'/') {
        return None;
    }
    // `path` is an environment value: its NUL follows it.
    let fd = openat(AT_FDCWD, path.as_ptr(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if fd < 0 {
        return None;
    }
    if private(fd, euid, st) {
        Some(fd)
    } else {
        close(fd);
        None
    }
}

/// `name` in `dir`, made 0700 if missing, opened without following a link
/// and checked private (`journal::make_level`); `dir` is closed.
fn level(dir: isize, name: &[u8], euid: u32, s: &mut Scratch) -> Option<isize> {
    s.path.clear();
    if !s.path.push(name) {
        close(dir);
        return None;
    }
    let c = s.path.c();
    // SAFETY: `c` is NUL-terminated.
    let made = unsafe { sys(SYS_MKDIRAT, dir as usize, c as usize, 0o700, 0) };
    let fd = if made == 0 || made == -EEXIST {
        openat(dir, c, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
    } else {
        -1
    };
    close(dir);
    if fd < 0 {
        return None;
    }
    if private(fd, euid, &mut s.stat) {
        Some(fd)
    } else {
        close(fd);
        None
    }
}

/// Whether `dir` holds `name` as this build placed it ([`launch::in_place`]).
fn in_place(dir: isize, name: &[u8], len: u64, euid: u32, s: &mut Scratch) -> bool {
    s.path.clear();
    if !s.path.push(name) {
        return false;
    }
    let fd = openat(
        dir,
        s.path.c(),
        O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
    );
    if fd < 0 {
        return false;
    }
    let st = &mut s.stat;
    let ok = fstat(fd, st)
        && st.mode() & S_IFMT == S_IFREG
        && st.uid() == euid
        && st.mode() & 0o022 == 0
        && st.size() == len;
    close(fd);
    ok
}

/// The state directory's path and descriptor, as [`launch::state_dir`]
/// opens it (making what is missing), or `None` where that needs more
/// than this path does (the password database, when `$HOME` is not the
/// caller's) or fails. The path is left in `s.preload`, after `LD_PRELOAD=`.
fn state_dir(env: &[*const u8], euid: u32, s: &mut Scratch) -> Option<isize> {
    s.preload.clear();
    s.preload.push(b"LD_PRELOAD=");
    let mut fd = match var(env, b"XDG_STATE_HOME")
        .and_then(|p| own(p, euid, &mut s.stat).map(|fd| (fd, p)))
    {
        Some((fd, p)) => {
            if !s.preload.push(p) {
                close(fd);
                return None;
            }
            fd
        }
        None => {
            let home = var(env, b"HOME")?;
            let mut fd = own(home, euid, &mut s.stat)?;
            if !(s.preload.push(home) && s.preload.join(b".local/state")) {
                close(fd);
                return None;
            }
            // One by one, not over an array of slices, which the compiler
            // may keep in static data as pointers to relocate.
            fd = level(fd, b".local", euid, s)?;
            level(fd, b"state", euid, s)?
        }
    };
    fd = below(fd, b"ahead", euid, s)?;
    fd = below(fd, b"preload", euid, s)?;
    below(fd, env!("AHEAD_PRELOAD_SUM").as_bytes(), euid, s)
}

/// The level `name` below `dir` ([`level`]), its name added to the path in
/// `s.preload`.
fn below(dir: isize, name: &[u8], euid: u32, s: &mut Scratch) -> Option<isize> {
    let fd = level(dir, name, euid, s)?;
    if s.preload.join(name) {
        Some(fd)
    } else {
        close(fd);
        None
    }
}

/// Whether the program `cmd` may not be one the preload can act on, or this
/// path cannot tell ([`launch::cannot_act`]: setuid or setgid for a caller
/// other than root, or statically linked): `ahead-full` then says so.
fn cannot_act(cmd: &[u8], env: &[*const u8], euid: u32, s: &mut Scratch) -> bool {
    // The file, found in PATH as `launch::resolve` finds it: the first
    // regular file, links followed.
    let path: *const u8 = if cmd.contains(&b'/') {
        cmd.as_ptr()
    } else {
        let Some(dirs) = var(env, b"PATH") else {
            return false;
        };
        let mut found = None;
        for dir in dirs.split(|&b| b == b':') {
            s.path.clear();
            if !(s.path.push(dir) && s.path.join(cmd)) {
                return true;
            }
            let c = s.path.c();
            // SAFETY: `c` is NUL-terminated; `stat` is a `struct stat`.
            let r = unsafe {
                sys(
                    SYS_NEWFSTATAT,
                    AT_FDCWD as usize,
                    c as usize,
                    &mut s.stat as *mut Stat as usize,
                    0,
                )
            };
            if r == 0 && s.stat.mode() & S_IFMT == S_IFREG {
                found = Some(c);
                break;
            }
        }
        match found {
            Some(c) => c,
            None => return false,
        }
    };
    let fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let verdict = elf_cannot_act(fd, euid, s);
    close(fd);
    verdict
}

fn elf_cannot_act(fd: isize, euid: u32, s: &mut Scratch) -> bool {
    if !fstat(fd, &mut s.stat) {
        return false;
    }
    if s.stat.mode() & 0o6000 != 0 && euid != 0 {
        return true;
    }
    let head = &mut s.head;
    // SAFETY: reads at most 64 bytes into `head`.
    let n = unsafe { sys(SYS_READ, fd as usize, head.as_mut_ptr() as usize, 64, 0) };
    let word = |h: &[u8], at: usize, len: usize| -> u64 {
        let mut v = 0u64;
        for i in (0..len).rev() {
            v = (v << 8) | u64::from(h.get(at + i).copied().unwrap_or(0));
        }
        v
    };
    if n < 64 || word(head, 0, 4) != 0x464c_457f || head.get(4) != Some(&2) {
        return false; // a script: its interpreter is what runs
    }
    let phoff = word(head, 32, 8);
    let phentsize = word(head, 54, 2);
    let phnum = word(head, 56, 2);
    let want = (phentsize * phnum).min(1 << 16) as usize;
    let mut got = 0usize;
    while got < want {
        // SAFETY: reads into the rest of `head`, which is 64 KiB long.
        let r = unsafe {
            sys(
                SYS_PREAD64,
                fd as usize,
                head.as_mut_ptr() as usize + got,
                want - got,
                phoff.wrapping_add(got as u64) as usize,
            )
        };
        if r == -EINTR {
            continue;
        }
        if r <= 0 {
            return false; // as `read_exact` failing: not known
        }
        got += r as usize;
    }
    let step = phentsize.max(4) as usize;
    let mut at = 0;
    while at < want {
        if at + 4 <= want && word(head, at, 4) == 3 {
            return false; // PT_INTERP: dynamically linked
        }
        at += step;
    }
    true
}

/// execs `file` with `argv` and `envp` as `execvp` does (its PATH search,
/// and its errors that move on to the next directory); returns where that
/// fails, or where only the C library's `execvp` knows what to do (a
/// script with no `#!`).
fn exec(
    file: &[u8],
    argv: *const *const u8,
    envp: *const *const u8,
    env: &[*const u8],
    s: &mut Scratch,
) {
    let run = |path: *const u8| -> isize {
        // SAFETY: `path` is NUL-terminated; `argv` and `envp` are
        // null-terminated arrays of NUL-terminated strings.
        unsafe { sys(SYS_EXECVE, path as usize, argv as usize, envp as usize, 0) }
    };
    if file.is_empty() {
        return;
    }
    if file.contains(&b'/') {
        run(file.as_ptr());
        return;
    }
    let dirs = var(env, b"PATH").unwrap_or(b"/bin:/usr/bin");
    for dir in dirs.split(|&b| b == b':') {
        s.path.clear();
        if !(s.path.push(dir) && s.path.join(file)) {
            return;
        }
        match -run(s.path.c()) {
            EACCES | ENOENT | ESTALE | ENOTDIR | ENODEV | ETIMEDOUT => continue,
            _ => return,
        }
    }
}

/// The quick path: execs the program, or returns for `_start`.
///
/// # Safety
/// `sp` is the stack the kernel or the loader left at the program's entry,
/// and the program's relative relocations are applied.
unsafe extern "C" fn quick(sp: *const usize) {
    // SAFETY: the entry's stack: argc, argv[argc], NULL, envp…, NULL.
    let (argc, argv) = unsafe { (*sp, sp.add(1) as *const *const u8) };
    // SAFETY: as above.
    let envp = unsafe { argv.add(argc + 1) };
    let mut n = 0;
    // SAFETY: envp is null-terminated.
    while !unsafe { *envp.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the `n` pointers before the null.
    let env: &[*const u8] = unsafe { core::slice::from_raw_parts(envp, n) };
    if argc < 3 {
        return;
    }
    // SAFETY: argv[1] exists (argc > 1).
    if !launch::same(unsafe { cstr(*argv.add(1)) }, b"run") {
        return;
    }
    // SAFETY: only this thread runs, and nothing else uses `SCRATCH`.
    let s: &mut Scratch = unsafe { &mut *SCRATCH.0.get() };
    // The words after `run`.
    // SAFETY: argv[2..argc] are NUL-terminated strings.
    let word = |i: usize| unsafe { cstr(*argv.add(i)) };
    let Some((mode, no_dontcache, at)) = launch::parse_words((2..argc).map(word)) else {
        return;
    };
    let cmd_at = 2 + at;
    let cmd = word(cmd_at);
    // SAFETY: argv[cmd_at..argc] then NULL: the program's argv.
    let cmd_argv = unsafe { argv.add(cmd_at) };
    if launch::same(mode.as_bytes(), b"off") {
        exec(cmd, cmd_argv, envp, env, s);
        return;
    }
    // SAFETY: no arguments.
    let euid = unsafe { sys(SYS_GETEUID, 0, 0, 0, 0) } as u32;
    let Some(dir) = state_dir(env, euid, s) else {
        return;
    };
    let placed = in_place(dir, launch::CORE.as_bytes(), launch::CORE_LEN, euid, s)
        && in_place(dir, launch::SHIM.as_bytes(), launch::SHIM_LEN, euid, s);
    close(dir);
    if !placed || cannot_act(cmd, env, euid, s) {
        return;
    }
    // LD_PRELOAD: the shim, then what the caller preloads already.
    if !s.preload.join(launch::SHIM.as_bytes()) {
        return;
    }
    if let Some(old) = var(env, b"LD_PRELOAD").filter(|v| !v.is_empty()) {
        if !(s.preload.push(b":") && s.preload.push(old)) {
            return;
        }
    }
    let preload = s.preload.c();
    let mode_var = if launch::same(mode.as_bytes(), b"uncached") {
        c"AHEAD_RUN_MODE=uncached"
    } else {
        c"AHEAD_RUN_MODE=readahead"
    };
    // The caller's environment but for the variables set here, then them.
    let mut k = 0;
    let mut put = |p: *const u8| match s.envp.get_mut(k) {
        // The last slot stays null, the array's end.
        Some(slot) if k + 1 < 1024 => {
            *slot = p;
            k += 1;
            true
        }
        _ => false,
    };
    for &p in env {
        // SAFETY: an environment string.
        let e = unsafe { cstr(p) };
        if named(e, b"LD_PRELOAD")
            || named(e, b"AHEAD_RUN_MODE")
            || (no_dontcache && named(e, b"AHEAD_RUN_DONTCACHE"))
        {
            continue;
        }
        if !put(p) {
            return;
        }
    }
    if !(put(preload) && put(mode_var.as_ptr().cast()))
        || (no_dontcache && !put(c"AHEAD_RUN_DONTCACHE=0".as_ptr().cast()))
    {
        return;
    }
    let _ = put(core::ptr::null());
    let envp2 = s.envp.as_ptr();
    exec(cmd, cmd_argv, envp2, env, s);
}
