//! Mounting the embedded S3 server's buckets with `ahead mount` for the
//! mount tests: whether FUSE is there, a bucket of objects, a mount waited
//! for, and one that is always undone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahead_testkit::s3::Server;

use super::{scratch, stderr};

/// Whether FUSE can be mounted here: /dev/fuse, and root or fusermount3.
pub fn fuse_ok() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: no /dev/fuse");
        return false;
    }
    let root = rustix::process::geteuid().is_root();
    let helper = Command::new("fusermount3").arg("-V").output().is_ok();
    if !root && !helper {
        eprintln!("SKIP: not root and no fusermount3 (Debian: fuse3)");
        return false;
    }
    true
}

/// Whether `dir` is a mount point now. Its parent is resolved, not `dir`
/// itself: the mount point of a daemon that died answers ENOTCONN.
pub fn mounted(dir: &Path) -> bool {
    let parent = std::fs::canonicalize(dir.parent().unwrap()).unwrap();
    let dir = parent.join(dir.file_name().unwrap());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(dir.to_str().unwrap()))
}

/// A scratch directory, the embedded server with bucket `bkt` holding
/// `objects`, and an empty `mnt` directory in the scratch.
pub fn bucket(objects: Vec<(&str, Vec<u8>)>) -> (tempfile::TempDir, Server, PathBuf) {
    let work = scratch();
    let server = Server::start(&work.path().join("store"), &["bkt"]).unwrap();
    for (key, bytes) in objects {
        server.put("bkt", key, bytes).unwrap();
    }
    let dir = work.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    (work, server, dir)
}

/// `ahead mount ARGS… DIR` against `server`, run to its end.
pub fn mount_output(server: &Server, args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ahead"))
        .arg("mount")
        .args(args)
        .arg(dir)
        .envs(server.env())
        .output()
        .unwrap()
}

/// A mount a test made: [`stop`] ends it and checks how; dropped without
/// that (the test failed first), it is unmounted and its process killed,
/// so that a failing test leaves no mount behind.
pub struct Mounted {
    pub child: Option<Child>,
    pub dir: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if mounted(&self.dir) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir)
                .status();
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// `ahead mount s3://BUCKET DIR` against `server`, waited for.
pub fn mount(server: &Server, url: &str, dir: &Path) -> Mounted {
    mount_with(server, &[url], dir)
}

/// `ahead mount ARGS… DIR` against `server`, waited for.
pub fn mount_with(server: &Server, args: &[&str], dir: &Path) -> Mounted {
    mount_env(server.env(), args, dir)
}

/// `ahead mount ARGS… DIR` with `envs` set, waited for.
pub fn mount_env(envs: Vec<(&str, String)>, args: &[&str], dir: &Path) -> Mounted {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahead"))
        .arg("mount")
        .args(args)
        .arg(dir)
        .args(["--cache", "32m"])
        .envs(envs)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !mounted(dir) {
        if let Some(st) = child.try_wait().unwrap() {
            let o = child.wait_with_output().unwrap();
            panic!("ahead mount exited {st}: {}", stderr(&o));
        }
        assert!(start.elapsed() < Duration::from_secs(30), "not mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    Mounted {
        child: Some(child),
        dir: dir.to_path_buf(),
    }
}

/// SIGTERM: the mount goes, the process exits 0.
pub fn stop(mut m: Mounted, dir: &Path) {
    let child = m.child.take().expect("stopped once");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert!(!mounted(dir));
}
