//! `ahead-full` — the command-line tool, which `ahead` (src/front.rs, a
//! small launcher) hands its commands to. Thin: parsing and output; the
//! work is in the libraries.

/// `println!` that ends the process quietly when the reader of its output
/// has gone (`ahead stat --json … | head`), as ripgrep does, where
/// `println!` would panic.
macro_rules! outln {
    () => { $crate::emit(format_args!(""), true) };
    ($($t:tt)*) => { $crate::emit(format_args!($($t)*), true) };
}

/// `print!`, as [`outln!`].
macro_rules! out {
    ($($t:tt)*) => { $crate::emit(format_args!($($t)*), false) };
}

mod bench;
mod cat;
mod copy;
mod doctor;
// The launcher's own part (`Quick`) is unused here.
#[allow(dead_code)]
mod launch;
mod mount;
mod read;
mod resident;
mod run;
mod sim;
mod stress;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ahead",
    version,
    about = "A user-space read path for Linux files"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Kernel vs ahead on real files: every read pattern, cold, side by side.
    Bench(Box<bench::BenchArgs>),
    /// Read a file with an access pattern and report throughput and counters.
    Read(read::ReadArgs),
    /// Print files through ahead's engine (like cat).
    Cat(cat::CatArgs),
    /// Simulate readahead policies on modelled devices (the on-demand RFC's
    /// benchmarks).
    Sim(sim::SimArgs),
    /// Mount a bucket (or a prefix) read-only: every program reads its
    /// objects through ahead's cache and readahead (FUSE).
    Mount(mount::MountArgs),
    /// Copy a file fast, sparse-aware, resumable, leaving the page cache as it was.
    Copy(copy::CopyArgs),
    /// Page-cache residency of files: cached, dirty, writeback, evicted pages.
    Stat(resident::StatArgs),
    /// Drop files' clean pages from the kernel page cache.
    Evict(resident::EvictArgs),
    /// Read the parts of files that are not cached yet into the page cache.
    Warm(resident::WarmArgs),
    /// Mixed reads from many threads through a small cache, every byte
    /// compared with the kernel's.
    Stress(stress::StressArgs),
    /// Which kernel features ahead found (io_uring, RWF_NOWAIT,
    /// RWF_DONTCACHE, O_DIRECT, cachestat), the file system and device
    /// under PATH, cgroup I/O limits, and what ahead does about each.
    Doctor(doctor::DoctorArgs),
    /// Run a program with ahead's readahead (or cache-neutral reads) on its
    /// reads, with no change to the program (an LD_PRELOAD library).
    Run(run::RunArgs),
    /// Run a program and record every read it makes of a regular file, in
    /// the simulator's trace format.
    Trace(run::TraceArgs),
}

/// `v` with the fields of the object `more` added (JSON summaries built
/// from shared parts).
pub(crate) fn with(mut v: serde_json::Value, more: serde_json::Value) -> serde_json::Value {
    if let (Some(a), serde_json::Value::Object(b)) = (v.as_object_mut(), more) {
        a.extend(b);
    }
    v
}

/// Writes to standard output for [`outln!`] and [`out!`]. A closed pipe
/// ends the process with status 0 (the reader has all it wanted); any
/// other error there ends it with a message and status 1.
pub(crate) fn emit(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let r = o.write_fmt(args).and_then(|()| {
        if newline {
            o.write_all(b"\n")?;
        }
        Ok(())
    });
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("ahead: writing the output: {e}");
        std::process::exit(1);
    }
}

/// Started by `ahead`: it must be of the same build (`cargo run` builds
/// only the launcher). The mark is not passed on to the programs this one
/// starts.
fn check_front() {
    let Some(build) = std::env::var_os(launch::FRONT_ENV) else {
        return;
    };
    // The first thing `main` does, before any thread is started.
    std::env::remove_var(launch::FRONT_ENV);
    if build != launch::BUILD {
        let me = std::env::current_exe().unwrap_or_default();
        eprintln!(
            "ahead: {} is of another build than the `ahead` beside it; build both \
             (cargo build --release -p ahead-cli)",
            me.display()
        );
        std::process::exit(1);
    }
}

fn main() -> ExitCode {
    check_front();
    let cli = Cli::parse();
    if let Command::Copy(args) = cli.command {
        return copy::run(args).unwrap_or_else(|e| {
            eprintln!("ahead: {e:#}");
            ExitCode::FAILURE
        });
    }
    let result = match cli.command {
        Command::Copy(_) => unreachable!("handled above"),
        Command::Bench(args) => bench::run(*args).map(|()| true),
        Command::Read(args) => read::run(args).map(|()| true),
        Command::Cat(args) => cat::run(args),
        Command::Sim(args) => sim::run(args).map(|()| true),
        Command::Stat(args) => resident::stat(args),
        Command::Evict(args) => resident::evict(args),
        Command::Warm(args) => resident::warm(args),
        Command::Stress(args) => stress::run(args),
        Command::Doctor(args) => doctor::run(args).map(|()| true),
        Command::Mount(args) => mount::run(args).map(|()| true),
        Command::Run(args) => run::run(args).map(|()| false),
        Command::Trace(args) => run::trace(args).map(|()| false),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ahead: {e:#}");
            ExitCode::FAILURE
        }
    }
}
