//! `ahead run` and `ahead trace`: ahead's readahead, cache-neutral reads and
//! read traces for programs that were never written for them, through the
//! preload libraries of crates/ahead-shim and crates/ahead-preload
//! (carried inside this binary by build.rs).
//!
//! Two libraries are written once to the caller's private state directory
//! (`~/.local/state/ahead/preload/SUM/`, 0700, checked to be the caller's
//! alone, SUM a checksum of both): the shim (crates/ahead-shim), given to
//! the program in `LD_PRELOAD`, and the core (crates/ahead-preload), which
//! the shim loads at a process's first read of a regular file. Then `ahead`
//! execs the program, so the program's exit status and signals are its
//! own.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::launch;
use clap::Args;
use rustix::fs::{Mode, OFlags};

/// The library preloaded into every process: it passes calls on, and loads
/// the core at a process's first read of a regular file.
static SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libahead_shim.so"));
/// The library that acts (hints, uncached reads, traces, statistics).
static CORE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libahead_preload.so"));

/// Arguments of `ahead run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// ahead's readahead for the program's reads (the default): hints for
    /// the backward, strided and interleaved streams the kernel does not
    /// follow, sent from a helper thread.
    #[arg(long, conflicts_with_all = ["uncached", "off"])]
    readahead: bool,
    /// Leave the page cache as the program found it (reads and writes with
    /// RWF_DONTCACHE, else residency checks and DONTNEED).
    #[arg(long, conflicts_with = "off")]
    uncached: bool,
    /// Load nothing: run the command as it is, after ahead's own start-up
    /// (what having `ahead run` in front of a command costs at least).
    /// With `--stats`, the libraries are loaded to count, and act on
    /// nothing.
    #[arg(long)]
    off: bool,
    /// Uncached mode: do not use RWF_DONTCACHE even where the kernel has
    /// it (the fallback's way).
    #[arg(long, requires = "uncached")]
    no_dontcache: bool,
    /// Readahead mode: the kernel's own readahead on a descriptor whose
    /// reads skip forward through a file (rows fetched in id order, every
    /// k-th member of an archive), which the kernel may read through,
    /// gaps and all. `try` (the default): its reads are timed with the
    /// kernel's readahead and without (`POSIX_FADV_RANDOM`), and read the
    /// faster way; `keep`: never turned off; `off`: turned off wherever
    /// the kernel reads such a walk through, unweighed. `--stats` says
    /// per file (`kernel_readahead`).
    #[arg(long, value_enum, value_name = "HOW", conflicts_with_all = ["uncached", "off"])]
    kernel_readahead: Option<KernelReadahead>,
    /// Write per-file counters here, one JSON line per file and process:
    /// requests, bytes, hints, pages hinted, and how many of those the
    /// program then read.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// `ahead run --kernel-readahead`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum KernelReadahead {
    Try,
    Keep,
    Off,
}

/// Arguments of `ahead trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// The trace file (replaced): one line per read of a regular file, in
    /// the simulator's format (`ahead sim replay FILE` reads it).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// Runs `ahead run`: only returns on an error (else it becomes CMD).
pub fn run(args: RunArgs) -> Result<()> {
    let mode = if args.uncached {
        "uncached"
    } else if args.off {
        "off"
    } else {
        "readahead"
    };
    if args.off && args.stats.is_none() {
        // Nothing to load: the program runs as it would without ahead.
        let err = std::process::Command::new(&args.cmd[0])
            .args(&args.cmd[1..])
            .exec();
        bail!("{}: {err}", args.cmd[0].to_string_lossy())
    }
    let mut env = vec![("AHEAD_RUN_MODE", OsString::from(mode))];
    if args.no_dontcache {
        env.push(("AHEAD_RUN_DONTCACHE", "0".into()));
    }
    match args.kernel_readahead {
        Some(KernelReadahead::Keep) => env.push(("AHEAD_RUN_KERNEL_RA", "keep".into())),
        Some(KernelReadahead::Off) => env.push(("AHEAD_RUN_KERNEL_RA", "off".into())),
        Some(KernelReadahead::Try) | None => {}
    }
    if let Some(stats) = &args.stats {
        env.push(("AHEAD_RUN_STATS", fresh_output(stats, b"")?.into()));
    }
    launch(&args.cmd, env)
}

/// Runs `ahead trace`: only returns on an error.
pub fn trace(args: TraceArgs) -> Result<()> {
    let mut header = b"# ahead trace: OFFSET LENGTH STREAM file=PID:N tid=TID t=NS; '# file PID:N SIZE PATH' names a file, '# readahead PID:N BYTES' its device's readahead, '# advice PID:N WORD' the program's posix_fadvise\n# command:".to_vec();
    for a in &args.cmd {
        header.push(b' ');
        // One line, whatever the arguments hold.
        for &b in a.as_bytes() {
            match b {
                b'\n' => header.extend_from_slice(b"\\n"),
                b'\r' => header.extend_from_slice(b"\\r"),
                b => header.push(b),
            }
        }
    }
    header.push(b'\n');
    let path = fresh_output(&args.output, &header)?;
    launch(
        &args.cmd,
        vec![
            ("AHEAD_RUN_MODE", OsString::from("trace")),
            ("AHEAD_RUN_TRACE", path.into()),
        ],
    )
}

/// Creates (or empties) an output file the preload then appends to, and
/// returns its absolute path. A link is not followed, and a file another
/// user owns is refused rather than emptied (a root-run `ahead run` in
/// /tmp must not truncate, or report its program's files into, a file a
/// local user planted there).
fn fresh_output(path: &Path, header: &[u8]) -> Result<PathBuf> {
    let abs = std::path::absolute(path).with_context(|| format!("{}", path.display()))?;
    let fd = rustix::fs::open(
        &abs,
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::from_raw_mode(0o644),
    )
    .with_context(|| format!("{}", abs.display()))?;
    let st = rustix::fs::fstat(&fd)?;
    if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() {
        bail!("{}: not a regular file", abs.display());
    }
    let euid = rustix::process::geteuid().as_raw();
    if st.st_uid != euid {
        bail!(
            "{}: owned by uid {}, not by the caller ({euid}); refusing to overwrite it",
            abs.display(),
            st.st_uid
        );
    }
    rustix::fs::ftruncate(&fd, 0).with_context(|| format!("{}", abs.display()))?;
    rustix::io::write(&fd, header).with_context(|| format!("{}", abs.display()))?;
    Ok(abs)
}

/// Puts the library in place, sets the environment and execs the program.
fn launch(cmd: &[OsString], env: Vec<(&str, OsString)>) -> Result<()> {
    let lib = library().context("placing the preload library")?;
    if let Some(why) = launch::cannot_act(&cmd[0]) {
        eprintln!("ahead: {why}; running it as it is");
    }
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let err = launch::command(cmd, lib, &env).exec();
    bail!("{}: {err}", cmd[0].to_string_lossy())
}

/// The shim's path in the caller's private directory, with the core beside
/// it, both written there if they are not already.
///
/// The directory is named by a checksum of both libraries (computed by
/// build.rs), so a build never meets another build's files. A library
/// already there is taken when it is a regular file of the right size that
/// the caller owns and no one else may write: it was written under a
/// temporary name, flushed and renamed, so under its own name it is whole,
/// and reading it back (half a megabyte on every `ahead run`) would check
/// nothing more.
fn library() -> Result<PathBuf> {
    let dir = launch::state_dir().map_err(anyhow::Error::msg)?;
    // The core first: a shim in place means its core is too.
    place(&dir, launch::CORE, CORE)?;
    place(&dir, launch::SHIM, SHIM)?;
    Ok(dir.path().join(launch::SHIM))
}

/// Puts `bytes` in `dir` under `name`, unless they are there.
fn place(dir: &ahead::copy::StateDir, name: &str, bytes: &[u8]) -> Result<()> {
    if launch::in_place(dir, name, bytes.len() as u64) {
        return Ok(());
    }
    match rustix::fs::unlinkat(dir.fd(), name, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let token: u64 = {
        let mut b = [0u8; 8];
        rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())?;
        u64::from_le_bytes(b)
    };
    let tmp = format!(".{name}.{token:016x}.part");
    let fd = rustix::fs::openat(
        dir.fd(),
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o500),
    )?;
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = rustix::io::write(&fd, rest)?;
        rest = &rest[n..];
    }
    rustix::fs::fsync(&fd)?;
    drop(fd);
    rustix::fs::renameat(dir.fd(), tmp.as_str(), dir.fd(), name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_libraries_are_small() {
        // The descriptor table must stay all zeros (.bss): one non-zero
        // initial value put its 4 MiB in the file and cost every program
        // a 4.7 MB load.
        for lib in [super::SHIM, super::CORE] {
            assert!(lib.len() < 2 << 20, "{} bytes", lib.len());
            assert_eq!(&lib[..4], b"\x7fELF");
        }
        // The shim is what every process loads: built without the
        // standard library, whose panic hook alone (a backtrace printer)
        // made it 288 KB in four segments.
        assert!(
            super::SHIM.len() < 64 << 10,
            "shim: {} bytes",
            super::SHIM.len()
        );
        // Two segments to map where the linker could link it so
        // (build.rs), and never more than the four of a default link.
        let loads = segments(super::SHIM, 1);
        if env!("AHEAD_SHIM_MERGED") == "1" {
            assert_eq!(loads, 2, "the shim's loadable segments");
            assert_eq!(segments(super::SHIM, 0x6474_e552), 0, "RELRO");
        }
        assert!((1..=4).contains(&loads), "{loads} loadable segments");
    }

    /// How many program headers of type `kind` an ELF64 little-endian
    /// image has.
    fn segments(elf: &[u8], kind: u32) -> usize {
        let u16_at = |o: usize| usize::from(u16::from_le_bytes([elf[o], elf[o + 1]]));
        let mut off = [0u8; 8];
        off.copy_from_slice(&elf[0x20..0x28]);
        let phoff = usize::try_from(u64::from_le_bytes(off)).unwrap();
        let (size, count) = (u16_at(0x36), u16_at(0x38));
        (0..count)
            .filter(|i| {
                let o = phoff + i * size;
                u32::from_le_bytes([elf[o], elf[o + 1], elf[o + 2], elf[o + 3]]) == kind
            })
            .count()
    }
}
