//! What `ahead run` needs to start a program, shared by the two programs of
//! the tool: `ahead`, the small launcher a user types (src/front.rs), which
//! starts the common forms of `ahead run` itself, and `ahead-full`
//! (src/main.rs), which does everything else and every form of `run`.
//!
//! Why two: a program under `ahead run` pays `ahead`'s own start-up before
//! its own. The whole tool is a 100 MB position-independent executable with
//! about 28,000 relocations for the loader to apply and 300 page faults
//! before `main`, 1.5 ms here against 0.8 ms for `/bin/true`; a launcher
//! that links little of it starts in a fraction of that (docs/run.md has
//! the figures). Other commands pay one more `exec`, a few tenths of a
//! millisecond, where none of them is that short.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use rustix::fs::{Mode, OFlags};

/// The library preloaded into every process (crates/ahead-shim).
pub const SHIM: &str = "libahead_shim.so";
/// The library the shim loads when there is work (crates/ahead-preload).
pub const CORE: &str = "libahead_preload.so";
/// Their sizes, from build.rs: a library in place must have them.
pub const SHIM_LEN: u64 = parse_len(env!("AHEAD_SHIM_LEN"));
pub const CORE_LEN: u64 = parse_len(env!("AHEAD_CORE_LEN"));

/// The program that carries every command, beside `ahead`.
pub const FULL: &str = "ahead-full";
/// Set by the launcher for `ahead-full`: the build both came from, which
/// must be the same (`cargo run` builds only the program it runs, and
/// would otherwise hand commands to a stale one).
pub const FRONT_ENV: &str = "AHEAD_FRONT_BUILD";
/// This build, from build.rs: a checksum of every source it is made from.
pub const BUILD: &str = env!("AHEAD_BUILD_ID");

const fn parse_len(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0u64;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    n
}

/// The caller's private directory of the preload libraries, named by a
/// checksum of both (`~/.local/state/ahead/preload/SUM`, every level 0700
/// and checked to be the caller's alone; made where missing).
pub fn state_dir() -> Result<ahead::copy::StateDir, String> {
    ahead::copy::StateDir::open_at(&["ahead", "preload", env!("AHEAD_PRELOAD_SUM")])
}

/// Whether `dir` holds `name` as this build wrote it: a regular file of
/// `len` bytes that the caller owns and no one else may write. It was
/// written under a temporary name, flushed and renamed, so under its own
/// name it is whole. A link there is not followed (and is not in place).
pub fn in_place(dir: &ahead::copy::StateDir, name: &str, len: u64) -> bool {
    let Ok(fd) = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) else {
        return false;
    };
    rustix::fs::fstat(&fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode).is_file()
            && st.st_uid == rustix::process::geteuid().as_raw()
            && st.st_mode & 0o022 == 0
            && st.st_size as u64 == len
    })
}

/// The program `cmd` with `shim` first in `LD_PRELOAD` (before what the
/// caller preloads already) and `env` set.
pub fn command(cmd: &[OsString], shim: PathBuf, env: &[(&str, &OsStr)]) -> std::process::Command {
    let mut preload = shim.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..]).env("LD_PRELOAD", preload);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Why the preload cannot act on `cmd`, if it can tell before running it.
pub fn cannot_act(cmd: &OsStr) -> Option<String> {
    let path = resolve(cmd)?;
    let mut head = [0u8; 64];
    let mut f = std::fs::File::open(&path).ok()?;
    let meta = f.metadata().ok()?;
    let euid = rustix::process::geteuid().as_raw();
    use std::os::unix::fs::MetadataExt;
    if meta.mode() & 0o6000 != 0 && euid != 0 {
        return Some(format!(
            "{} is setuid or setgid: the loader ignores LD_PRELOAD for it",
            path.display()
        ));
    }
    let n = f.read(&mut head).ok()?;
    if n < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 {
        return None; // a script: its interpreter is what runs
    }
    // 64-bit little-endian ELF: look for a PT_INTERP program header.
    let phoff = u64::from_le_bytes(head[32..40].try_into().ok()?);
    let phentsize = u16::from_le_bytes(head[54..56].try_into().ok()?) as u64;
    let phnum = u16::from_le_bytes(head[56..58].try_into().ok()?) as u64;
    let mut table = vec![0u8; (phentsize * phnum).min(1 << 16) as usize];
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut table).ok()?;
    let dynamic = table
        .chunks(phentsize.max(4) as usize)
        .any(|ph| ph.len() >= 4 && u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == 3);
    (!dynamic).then(|| {
        format!(
            "{} is statically linked: no preload library can act on it",
            path.display()
        )
    })
}

/// The file `cmd` names, searched in PATH as execvp does.
fn resolve(cmd: &OsStr) -> Option<PathBuf> {
    if cmd.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(cmd));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// [`Quick::parse`] over the words that follow `run`: the mode, whether
/// `--no-dontcache` was given, and where the program's words begin. It
/// compares bytes one by one, as the launcher's start before the C library
/// needs (src/early.rs: a slice comparison would call `memcmp`, which the C
/// library has not set up there).
pub fn parse_words<'w>(
    words: impl Iterator<Item = &'w [u8]>,
) -> Option<(&'static str, bool, usize)> {
    let (mut readahead, mut uncached, mut off, mut no_dontcache) = (false, false, false, false);
    let mut words = words.enumerate();
    for (i, a) in words.by_ref() {
        let flag = if same(a, b"--") {
            let valid = !(readahead && (uncached || off))
                && !(uncached && off)
                && (!no_dontcache || uncached);
            let mode = if uncached {
                "uncached"
            } else if off {
                "off"
            } else {
                "readahead"
            };
            return (valid && words.next().is_some()).then_some((mode, no_dontcache, i + 1));
        } else if same(a, b"--readahead") {
            &mut readahead
        } else if same(a, b"--uncached") {
            &mut uncached
        } else if same(a, b"--off") {
            &mut off
        } else if same(a, b"--no-dontcache") {
            &mut no_dontcache
        } else {
            return None;
        };
        if std::mem::replace(flag, true) {
            return None;
        }
    }
    None
}

/// Whether two byte strings are equal, byte by byte (no `memcmp`).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        // Both have a byte at `i`.
        if a.get(i) != b.get(i) {
            return false;
        }
        i += 1;
    }
    true
}

/// The forms of `ahead run` the launcher starts itself: flags among
/// `--readahead`, `--uncached`, `--off` and `--no-dontcache`, each at most
/// once and as `ahead-full` would accept them together, then `--` and the
/// program. Anything else (`--stats`, `--help`, a mistake) goes to
/// `ahead-full`, which parses it, says what is wrong, or runs it.
#[derive(Debug, PartialEq, Eq)]
pub struct Quick<'a> {
    /// `AHEAD_RUN_MODE`: "readahead", "uncached" or "off".
    pub mode: &'static str,
    pub no_dontcache: bool,
    pub cmd: &'a [OsString],
}

impl<'a> Quick<'a> {
    /// `args`: what follows `run`.
    pub fn parse(args: &'a [OsString]) -> Option<Quick<'a>> {
        let (mode, no_dontcache, at) = parse_words(args.iter().map(|a| a.as_bytes()))?;
        Some(Quick {
            mode,
            no_dontcache,
            cmd: &args[at..],
        })
    }

    /// Starts the program as `ahead-full` would, if nothing needs more than
    /// a look: the libraries already in place, and nothing to warn of.
    /// Returns where `ahead-full` must take over (to place the libraries,
    /// to warn, or to report a program that could not be started, with the
    /// same words and status as always).
    pub fn exec(&self) {
        if self.mode == "off" {
            // Nothing to load: `--off` runs the program as it is.
            let _ = std::process::Command::new(&self.cmd[0])
                .args(&self.cmd[1..])
                .exec();
            return;
        }
        let Ok(dir) = state_dir() else { return };
        if !in_place(&dir, CORE, CORE_LEN)
            || !in_place(&dir, SHIM, SHIM_LEN)
            || cannot_act(&self.cmd[0]).is_some()
        {
            return;
        }
        let mut env: Vec<(&str, &OsStr)> = vec![("AHEAD_RUN_MODE", OsStr::new(self.mode))];
        if self.no_dontcache {
            env.push(("AHEAD_RUN_DONTCACHE", OsStr::new("0")));
        }
        let _ = command(self.cmd, dir.path().join(SHIM), &env).exec();
    }
}

#[cfg(test)]
mod tests {
    use super::Quick;
    use std::ffi::OsString;

    fn parse(words: &str) -> Option<(&'static str, bool, Vec<String>)> {
        let args: Vec<OsString> = words.split_whitespace().map(OsString::from).collect();
        Quick::parse(&args).map(|q| {
            (
                q.mode,
                q.no_dontcache,
                q.cmd
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            )
        })
    }

    #[test]
    fn the_launcher_starts_only_what_ahead_full_would_accept() {
        let cmd = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(parse("-- tac f"), Some(("readahead", false, cmd("tac f"))));
        assert_eq!(
            parse("--readahead -- tac"),
            Some(("readahead", false, cmd("tac")))
        );
        assert_eq!(
            parse("--off -- true --off"),
            Some(("off", false, cmd("true --off")))
        );
        assert_eq!(
            parse("--no-dontcache --uncached -- cp a b"),
            Some(("uncached", true, cmd("cp a b")))
        );
        // What clap refuses, or what needs ahead-full, is left to it.
        for refused in [
            "tac f",                     // no `--`
            "--",                        // no program
            "--off --off -- true",       // twice
            "--uncached --off -- true",  // conflicting
            "--readahead --off -- true", // conflicting
            "--no-dontcache -- true",    // needs --uncached
            "--stats s.json -- true",    // ahead-full's
            "--help",
            "--of -- true",
            "-h -- true",
        ] {
            assert_eq!(parse(refused), None, "{refused}");
        }
    }
}
