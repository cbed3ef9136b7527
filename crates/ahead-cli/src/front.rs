//! `ahead`, the command a user types: a small launcher.
//!
//! It starts the common forms of `ahead run` itself (`launch::Quick`): the
//! preload libraries already in place, it sets the environment and execs
//! the program, with little of the tool's start-up in front of it. Every
//! other command, and every form of `run` it does not know to be plain,
//! it hands to `ahead-full` beside it, with the same arguments, under the
//! same name, in the same process.
//!
//! On x86-64 Linux it starts those forms before the C library does, at the
//! program's entry (src/early.rs), and this `main` sees only what that path
//! returned from.

// The early path must not call `memcpy`, `memset` or `memcmp`: no loop
// in this program is turned into them (src/early.rs).
#![no_builtins]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod early;
mod launch;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "run") {
        if let Some(quick) = launch::Quick::parse(&args[2..]) {
            quick.exec();
        }
    }
    let name = args.first().cloned().unwrap_or_else(|| "ahead".into());
    let full = std::env::current_exe()
        .ok()
        .and_then(|me| Some(me.parent()?.join(launch::FULL)));
    let Some(full) = full else {
        eprintln!(
            "ahead: cannot tell where this program is, to find {}",
            launch::FULL
        );
        std::process::exit(1);
    };
    let err = std::process::Command::new(&full)
        .arg0(name)
        .args(args.iter().skip(1))
        .env(launch::FRONT_ENV, launch::BUILD)
        .exec();
    eprintln!(
        "ahead: {}: {err}: `ahead` hands its commands to {}, installed beside it \
         (cargo build --release -p ahead-cli builds both)",
        full.display(),
        launch::FULL
    );
    std::process::exit(1);
}
