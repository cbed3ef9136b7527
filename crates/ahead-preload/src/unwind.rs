//! The unwinder's entry points that the standard library refers to,
//! defined here so that the library does not need libgcc_s: loading that
//! second library cost every process started under `ahead run` about
//! 0.09 ms (500 fork+exec of /bin/true from sh with it preloaded alone:
//! 0.372 s against 0.318 s), as much as all the rest of the library's
//! loading together.
//!
//! Only when the library is built with `panic=abort` (as `ahead run`'s
//! build makes it): then nothing unwinds through it. Backtraces find no
//! frame (`_Unwind_Backtrace` answers "end of stack"), and the functions
//! only unwinding uses trap. The symbols are hidden — resolved inside this
//! library and never exported — so a program's own unwinder (C++
//! exceptions, its own Rust panics) is the one it always had. x86-64 only
//! for now; elsewhere the library links libgcc_s as before.

#[cfg(all(panic = "abort", target_arch = "x86_64"))]
core::arch::global_asm!(
    ".pushsection .text",
    ".globl _Unwind_Backtrace",
    ".hidden _Unwind_Backtrace",
    ".globl _Unwind_GetIP",
    ".hidden _Unwind_GetIP",
    ".globl _Unwind_GetIPInfo",
    ".hidden _Unwind_GetIPInfo",
    ".globl _Unwind_GetDataRelBase",
    ".hidden _Unwind_GetDataRelBase",
    ".globl _Unwind_GetTextRelBase",
    ".hidden _Unwind_GetTextRelBase",
    ".globl _Unwind_GetLanguageSpecificData",
    ".hidden _Unwind_GetLanguageSpecificData",
    ".globl _Unwind_GetRegionStart",
    ".hidden _Unwind_GetRegionStart",
    ".globl _Unwind_Resume",
    ".hidden _Unwind_Resume",
    ".globl _Unwind_SetGR",
    ".hidden _Unwind_SetGR",
    ".globl _Unwind_SetIP",
    ".hidden _Unwind_SetIP",
    // _URC_END_OF_STACK.
    "_Unwind_Backtrace:",
    "mov eax, 5",
    "ret",
    "_Unwind_GetIP:",
    "_Unwind_GetIPInfo:",
    "_Unwind_GetDataRelBase:",
    "_Unwind_GetTextRelBase:",
    "_Unwind_GetLanguageSpecificData:",
    "_Unwind_GetRegionStart:",
    "_Unwind_Resume:",
    "_Unwind_SetGR:",
    "_Unwind_SetIP:",
    "ud2",
    ".popsection",
);
