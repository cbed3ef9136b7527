//! Helpers shared by the CLI's integration tests: running the real binary,
//! generated files in a scratch directory, and running as another user.
// Each test crate uses a different subset.
#![allow(dead_code)]

pub mod mount;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `ahead` binary with `args`.
pub fn ahead(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(args)
        .output()
        .expect("run ahead")
}

/// The JSON a successful run printed on stdout.
pub fn ok_json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "ahead failed ({:?}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// What a run printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory where O_DIRECT works if the machine has one.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(ahead::testdata::scratch_root()).unwrap()
}

/// A generated file of `size` bytes (every byte derived from its offset).
pub fn gen(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    ahead::testdata::write_file(&p, size).unwrap();
    p
}

/// A path as a command-line argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// Runs `ahead args` as user and group 65534 (nobody) through setpriv.
/// `None`, after a SKIP line naming `test`, where that cannot be done here
/// (not root, no setpriv, or nobody cannot run the test binary).
pub fn as_nobody(test: &str, args: &[&str]) -> Option<Output> {
    if !can_act_as_nobody(test) {
        return None;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_ahead"))
        .args(args)
        .output()
        .unwrap();
    if stderr(&o).contains("setpriv:") {
        eprintln!("SKIP {test}: user 65534 cannot run the test binary here");
        return None;
    }
    Some(o)
}

/// A private state directory for the copies a test runs (`XDG_STATE_HOME`:
/// where their journals go), inside the test's scratch directory.
pub fn state_dir(scratch: &Path) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let p = scratch.join("state");
    std::fs::DirBuilder::new().mode(0o700).create(&p).unwrap();
    p
}

/// Lines in the one copy journal under the state directory `state` (0 if
/// there is none yet).
pub fn journal_lines(state: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(state.join("ahead/copy")) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".journal"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .map(|t| t.lines().count())
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// `ahead args` with `state` as its private state directory.
pub fn ahead_with_state(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(args)
        .env("XDG_STATE_HOME", state)
        .output()
        .expect("run ahead")
}

/// A shell command run as user and group 65534 (nobody), the other local
/// user of the attack tests. `None`, after a SKIP line naming `test`, where
/// that cannot be done here.
pub fn nobody_sh(test: &str, script: &str) -> Option<Command> {
    if !can_act_as_nobody(test) {
        return None;
    }
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sh",
        "-c",
        script,
    ]);
    Some(c)
}

/// Whether this process can run commands as user 65534 (root, with
/// setpriv); prints a SKIP line naming `test` when not.
fn can_act_as_nobody(test: &str) -> bool {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP {test}: needs root to act as another user");
        return false;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIP {test}: setpriv is not installed");
        return false;
    }
    true
}

/// A loop device over a file, detached when dropped.
pub struct Loop(pub String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A loop device over `backing`; `None`, after a SKIP line naming `test`,
/// where losetup cannot make one here.
pub fn loop_device(test: &str, backing: &Path) -> Option<Loop> {
    let o = match Command::new("losetup")
        .args(["-f", "--show", s(backing)])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIP {test}: losetup: {e}");
            return None;
        }
    };
    if !o.status.success() {
        eprintln!("SKIP {test}: {}", stderr(&o).trim());
        return None;
    }
    Some(Loop(String::from_utf8_lossy(&o.stdout).trim().to_string()))
}

/// Waits until the copy journal under `state` has at least `lines` lines
/// (its header and finished chunks); fails the test after 20 s.
pub fn wait_for_journal(state: &Path, lines: usize) {
    let started = std::time::Instant::now();
    while journal_lines(state) < lines {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the copy's journal did not reach {lines} lines"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
