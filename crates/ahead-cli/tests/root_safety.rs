//! `ahead` run as root where another local user (here `nobody`) controls
//! some of the paths it touches: every attack of the "Safe as root" issue,
//! played by that user, must be refused or harmless — the victim's bytes and
//! modes untouched, no copy reported complete that differs from its source.
//! Each test skips, saying so, where it cannot act as another user.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    ahead, ahead_with_state, gen, mkfifo, nobody_sh, ok_json, s, scratch, state_dir, stderr,
};

const MIB: u64 = 1 << 20;

/// Whether two files hold the same bytes (without printing them).
fn same_file(a: &Path, b: &Path) {
    let (x, y) = (fs::read(a).unwrap(), fs::read(b).unwrap());
    assert!(
        x == y,
        "{} ({} bytes) and {} ({} bytes) differ",
        a.display(),
        x.len(),
        b.display(),
        y.len()
    );
}

/// A scratch directory the other user can reach, with `shared/` in it that
/// anyone may write (sticky, as /tmp is).
fn arena() -> (tempfile::TempDir, PathBuf) {
    let dir = scratch();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let shared = dir.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    (dir, shared)
}

/// Root's secret: a 0600 file of `len` bytes that no other file holds.
fn secret(dir: &Path, len: usize) -> (PathBuf, Vec<u8>) {
    let p = dir.join("secret");
    let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8 ^ 0x5a).collect();
    fs::write(&p, &bytes).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    (p, bytes)
}

fn run_as_nobody(test: &str, script: &str) -> Option<()> {
    let o = nobody_sh(test, script)?.output().unwrap();
    assert!(o.status.success(), "{script}: {}", stderr(&o));
    Some(())
}

/// The other user's loop, run in the background until dropped.
struct Attacker(Child);

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn attack(test: &str, script: &str) -> Option<Attacker> {
    let c = nobody_sh(test, &format!("while :; do {script}; done"))?
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Some(Attacker(c))
}

/// A directory `name` in `parent` owned by `nobody`, holding `files`
/// (name, bytes), each owned by `nobody` too.
fn nobodys_dir(parent: &Path, name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let d = parent.join(name);
    fs::create_dir(&d).unwrap();
    chown_nobody(&d);
    for (n, bytes) in files {
        fs::write(d.join(n), bytes).unwrap();
        chown_nobody(&d.join(n));
    }
    d
}

fn chown_nobody(p: &Path) {
    std::os::unix::fs::lchown(p, Some(65534), Some(65534)).unwrap();
}

#[test]
fn links_planted_at_the_names_a_copy_makes_are_never_followed() {
    let (dir, shared) = arena();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"VICTIM").unwrap();
    let src = gen(dir.path(), "src.bin", 3 * MIB + 5);
    let v = s(&victim);
    let planted = format!(
        "cd {sh} && ln -s {v} .dst.bin.ahead-part && ln -s {v} .dst.bin.ahead-journal \
         && ln -s {v} dst.bin",
        sh = s(&shared)
    );
    if run_as_nobody("links_planted", &planted).is_none() {
        return;
    }
    let dst = shared.join("dst.bin");
    ok_json(&ahead(&["copy", "--json", "--verify", s(&src), s(&dst)]));
    assert_eq!(fs::read(&victim).unwrap(), b"VICTIM");
    let m = fs::symlink_metadata(&dst).unwrap();
    assert!(m.is_file(), "the destination is still a link");
    assert_eq!(m.uid(), 0);
    same_file(&dst, &src);
    // The other user's links are left as they were, pointing at the victim.
    for n in [".dst.bin.ahead-part", ".dst.bin.ahead-journal"] {
        assert_eq!(fs::read_link(shared.join(n)).unwrap(), victim);
    }
}

#[test]
fn a_temporary_file_planted_in_advance_is_not_reused() {
    let (dir, shared) = arena();
    let (secret, bytes) = secret(dir.path(), 300_000);
    let plant = format!(
        "cd {} && umask 0 && printf mine > .out.img.ahead-part && chmod 666 .out.img.ahead-part",
        s(&shared)
    );
    if run_as_nobody("temporary_file_planted", &plant).is_none() {
        return;
    }
    let out = shared.join("out.img");
    ok_json(&ahead(&["copy", "--json", s(&secret), s(&out)]));
    let m = fs::metadata(&out).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600), "{:o}", m.mode());
    assert!(
        fs::read(&out).unwrap() == bytes,
        "the copy is not the secret"
    );
    assert_eq!(
        fs::read(shared.join(".out.img.ahead-part")).unwrap(),
        b"mine"
    );
    // And the other user cannot read the copy.
    let o = nobody_sh("temporary_file_planted", &format!("cat {}", s(&out)))
        .unwrap()
        .output()
        .unwrap();
    assert!(!o.status.success() && o.stdout.is_empty());
}

/// Runs `root` again and again for `secs` while the other user's `script`
/// loops; `check` judges each run. At least `min_runs` must have been made.
fn race(secs: u64, mut root: impl FnMut(usize)) -> usize {
    let started = Instant::now();
    let mut runs = 0;
    while started.elapsed() < Duration::from_secs(secs) {
        root(runs);
        runs += 1;
    }
    runs
}

#[test]
fn a_source_swapped_for_a_link_never_gives_the_secret_to_its_owner() {
    let (dir, shared) = arena();
    let (secret, secret_bytes) = secret(dir.path(), 2 * MIB as usize);
    let keep = gen(dir.path(), "keep", 2 * MIB);
    let keep_bytes = fs::read(&keep).unwrap();
    let user = nobodys_dir(
        &shared,
        "u",
        &[("keep", &keep_bytes), ("data", &keep_bytes)],
    );
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    let u = s(&user);
    let Some(_a) = attack(
        "source_swapped",
        &format!(
            "ln -sfn {} {u}/l; mv -Tf {u}/l {u}/data; ln -f {u}/keep {u}/f; mv -Tf {u}/f {u}/data",
            s(&secret)
        ),
    ) else {
        return;
    };
    // The user's file uncached, so that chunks are read with O_DIRECT (the
    // path that once reopened the source by name).
    let k = fs::File::open(user.join("keep")).unwrap();
    k.sync_all().unwrap(); // dirty pages cannot be dropped
    ahead::residency::evict(&k, 0, 0).unwrap();
    let (mut saw_secret, mut saw_user) = (0, 0);
    let data = user.join("data");
    let runs = race(3, |i| {
        let dst = out.join(format!("c{i}"));
        let mut args = vec!["copy", "--chunk", "64k", s(&data), s(&dst)];
        if i % 2 == 1 {
            args.insert(1, "--verify");
        }
        let o = ahead(&args);
        if !o.status.success() {
            return; // the name was missing at that instant: a clear error
        }
        let got = fs::read(&dst).unwrap();
        let mode = fs::metadata(&dst).unwrap().mode();
        if got == secret_bytes {
            // What root named was the secret at that instant: the copy is
            // as closed as the secret.
            assert_eq!(mode & 0o077, 0, "the secret was copied readable: {mode:o}");
            saw_secret += 1;
        } else {
            assert!(got == keep_bytes, "run {i}: a mix of two files");
            saw_user += 1;
        }
    });
    eprintln!("{runs} copies: {saw_user} of the user's file, {saw_secret} of the secret");
    assert!(runs >= 5);
}

#[test]
fn a_tree_entry_swapped_for_a_link_is_copied_as_a_link() {
    let (dir, shared) = arena();
    let (secret, secret_bytes) = secret(dir.path(), 100_000);
    let tree = nobodys_dir(&shared, "t", &[("keep", b"user data"), ("f", b"user data")]);
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    let t = s(&tree);
    let Some(_a) = attack(
        "tree_entry_swapped",
        &format!(
            "ln -sfn {} {t}/l; mv -Tf {t}/l {t}/f; cp {t}/keep {t}/g; mv -Tf {t}/g {t}/f",
            s(&secret)
        ),
    ) else {
        return;
    };
    let runs = race(3, |i| {
        let dst = out.join(format!("c{i}"));
        let o = ahead(&["copy", "-r", s(&tree), s(&dst)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let f = dst.join("f");
        let Ok(m) = fs::symlink_metadata(&f) else {
            return; // missing at that instant
        };
        if m.file_type().is_symlink() {
            assert_eq!(fs::read_link(&f).unwrap(), secret);
        } else {
            let got = fs::read(&f).unwrap();
            assert!(
                got != secret_bytes,
                "run {i}: the secret was copied into the tree"
            );
            assert_eq!(got, b"user data");
        }
    });
    assert!(runs >= 5, "{runs}");
}

#[test]
fn a_fifo_swapped_into_a_tree_hangs_neither_stat_nor_evict_nor_warm_nor_copy() {
    let (dir, shared) = arena();
    let ones = vec![1u8; 100_000];
    let tree = nobodys_dir(&shared, "t", &[("f", &ones), ("keep", &ones)]);
    let t = s(&tree);
    let Some(_a) = attack(
        "fifo_swapped",
        &format!(
            "rm -f {t}/p; mkfifo {t}/p; mv -Tf {t}/p {t}/f; cp {t}/keep {t}/g; mv -Tf {t}/g {t}/f"
        ),
    ) else {
        return;
    };
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    let runs = race(3, |i| {
        let dst = out.join(format!("c{i}"));
        let cmds: [Vec<&str>; 4] = [
            vec!["stat", "-R", t],
            vec!["evict", "-R", t],
            vec!["warm", "-R", t],
            vec!["copy", "-r", t, s(&dst)],
        ];
        for args in cmds {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ahead"))
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let started = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = c.kill();
                    panic!("ahead {args:?} hung on a FIFO");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    assert!(runs >= 5, "{runs}");
}

#[test]
fn a_second_backup_does_not_follow_links_left_in_the_destination_tree() {
    let (dir, _shared) = arena();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("sub/dir")).unwrap();
    fs::write(src.join("sub/passwd"), b"backup copy").unwrap();
    fs::write(src.join("sub/dir/x"), b"x").unwrap();
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(outside.join("passwd"), b"root:x:0:0").unwrap();
    let backup = dir.path().join("backup");
    fs::create_dir(&backup).unwrap();
    ok_json(&ahead(&["copy", "-r", "--json", s(&src), s(&backup)]));
    // The backup's subdirectory became writable by the other user, who
    // leaves links where the next run will write.
    let sub = backup.join("src/sub");
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o777)).unwrap();
    let plant = format!(
        "cd {} && mv passwd passwd.old && mv dir dir.old && ln -s {o}/passwd passwd \
         && ln -s {o} dir",
        s(&sub),
        o = s(&outside)
    );
    if run_as_nobody("second_backup", &plant).is_none() {
        return;
    }
    ok_json(&ahead(&["copy", "-r", "--json", s(&src), s(&backup)]));
    assert_eq!(fs::read(outside.join("passwd")).unwrap(), b"root:x:0:0");
    assert_eq!(fs::metadata(&outside).unwrap().mode() & 0o7777, 0o755);
    assert!(!outside.join("x").exists());
    assert!(fs::symlink_metadata(sub.join("passwd")).unwrap().is_file());
    assert_eq!(fs::read(sub.join("passwd")).unwrap(), b"backup copy");
    assert!(fs::symlink_metadata(sub.join("dir")).unwrap().is_dir());
    assert_eq!(fs::read(sub.join("dir/x")).unwrap(), b"x");
}

#[test]
fn setuid_setgid_and_sticky_are_dropped_and_the_umask_applies() {
    let (dir, _shared) = arena();
    let evil = dir.path().join("evil");
    fs::write(&evil, b"#!/bin/sh\n").unwrap();
    chown_nobody(&evil);
    fs::set_permissions(&evil, fs::Permissions::from_mode(0o6755)).unwrap();
    let tree = dir.path().join("tree");
    fs::create_dir(&tree).unwrap();
    fs::set_permissions(&tree, fs::Permissions::from_mode(0o2777)).unwrap();
    fs::write(tree.join("f"), b"f").unwrap();
    let run = |umask: &str, args: &[&str]| {
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_ahead"))
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    };
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let out = dir.path().join("evil-copy");
    run("022", &["copy", s(&evil), s(&out)]);
    assert_eq!(mode(&out), 0o755);
    // --preserve keeps them only for their owner: not for root copying
    // another user's file...
    let kept = dir.path().join("evil-preserved");
    run("022", &["copy", "--preserve", s(&evil), s(&kept)]);
    assert_eq!(mode(&kept), 0o755);
    // ...but for root's own.
    fs::set_permissions(&out, fs::Permissions::from_mode(0o4750)).unwrap();
    let own = dir.path().join("own-preserved");
    run("022", &["copy", "--preserve", s(&out), s(&own)]);
    assert_eq!(mode(&own), 0o4750);
    // Directories: the umask applies, setgid is dropped (cp: drwx------).
    let tcopy = dir.path().join("tree-copy");
    run("077", &["copy", "-r", s(&tree), s(&tcopy)]);
    assert_eq!(mode(&tcopy), 0o700);
    assert_eq!(mode(&tcopy.join("f")), 0o600);
    // A crw------- device node is copied 0600, not world-readable.
    let node = dir.path().join("node");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3), // /dev/null's
    )
    .unwrap();
    let ncopy = dir.path().join("node-copy");
    run("000", &["copy", s(&node), s(&ncopy)]);
    assert_eq!(mode(&ncopy), 0o600);
    assert!(fs::metadata(&ncopy).unwrap().is_file());
}

#[test]
fn a_forged_journal_and_temporary_file_cannot_change_what_resume_copies() {
    let (dir, shared) = arena();
    let src = gen(dir.path(), "src", 4 * MIB);
    let m = fs::metadata(&src).unwrap();
    // The old journal format named only what anyone can stat.
    let forged = format!(
        "ahead-copy-journal 1 size={} mtime_ns={} ino={} dev={} chunk=262144\n0\n262144\n",
        m.len(),
        m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        m.ino(),
        m.dev()
    );
    fs::write(dir.path().join("forged"), forged).unwrap();
    let plant = format!(
        "cd {sh} && cp {f} .dst.ahead-journal && head -c {n} /dev/zero | tr '\\0' A > .dst.ahead-part \
         && cp .dst.ahead-part .dst.ahead-0000000000000000.part",
        sh = s(&shared),
        f = s(&dir.path().join("forged")),
        n = 4 * MIB
    );
    fs::set_permissions(dir.path().join("forged"), fs::Permissions::from_mode(0o644)).unwrap();
    if run_as_nobody("forged_journal", &plant).is_none() {
        return;
    }
    let dst = shared.join("dst");
    let v = ok_json(&ahead(&[
        "copy",
        "--json",
        "--resume",
        "--chunk",
        "256k",
        s(&src),
        s(&dst),
    ]));
    assert_eq!(v["resumed_bytes"], 0, "{v}");
    same_file(&dst, &src);
}

#[test]
fn names_like_a_copys_own_files_in_a_source_tree_are_ordinary_files() {
    let dir = scratch();
    let tree = dir.path().join("t");
    fs::create_dir(&tree).unwrap();
    let names = [
        "f",
        ".f.ahead-part",
        ".f.ahead-journal",
        ".f.ahead-0123456789abcdef.part",
        "0123456789abcdef0123456789abcdef.journal",
    ];
    for (i, n) in names.iter().enumerate() {
        fs::write(tree.join(n), format!("file {i}").repeat(1000)).unwrap();
    }
    let state = state_dir(dir.path());
    for extra in [&[][..], &["--resume"][..]] {
        let out = dir.path().join(format!("out{}", extra.len()));
        let mut args = vec!["copy", "-r", "--json"];
        args.extend_from_slice(extra);
        args.extend([s(&tree), s(&out)]);
        let o = ahead_with_state(&state, &args);
        let v = ok_json(&o);
        assert_eq!(v["files"], names.len(), "{v}");
        for n in names {
            assert_eq!(
                fs::read(out.join(n)).unwrap(),
                fs::read(tree.join(n)).unwrap(),
                "{n} with {extra:?}"
            );
        }
    }
}

/// Starts a slow copy and kills it once the journal lists `chunks` chunks.
fn interrupted_copy(src: &Path, dst: &Path, state: &Path, chunks: usize) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(["copy", "--chunk", "1m", "--bwlimit", "8m", s(src), s(dst)])
        .env("XDG_STATE_HOME", state)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_journal(state, chunks + 1);
    child.kill().unwrap();
    child.wait().unwrap();
}

fn part_file(dir: &Path) -> PathBuf {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".part"))
        .expect("a temporary file")
}

#[test]
fn a_chunk_that_changed_in_the_temporary_file_is_copied_again_on_resume() {
    let dir = scratch();
    let src = gen(dir.path(), "src", 16 * MIB);
    let dst = dir.path().join("dst");
    let state = state_dir(dir.path());
    interrupted_copy(&src, &dst, &state, 4);
    // A byte of a finished chunk changes (a lost write, a stray writer).
    let part = part_file(dir.path());
    let f = fs::OpenOptions::new().write(true).open(&part).unwrap();
    rustix::io::pwrite(&f, b"\xff", 1234).unwrap();
    drop(f);
    let v = ok_json(&ahead_with_state(
        &state,
        &[
            "copy",
            "--json",
            "--resume",
            "--chunk",
            "1m",
            s(&src),
            s(&dst),
        ],
    ));
    assert!(v["resume_rejected_chunks"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["resumed_bytes"].as_u64().unwrap() >= 3 * MIB, "{v}");
    same_file(&dst, &src);
}

#[test]
fn a_journal_is_bound_to_its_own_temporary_file() {
    let dir = scratch();
    let src = gen(dir.path(), "src", 16 * MIB);
    let dst = dir.path().join("dst");
    let state = state_dir(dir.path());
    interrupted_copy(&src, &dst, &state, 3);
    // The temporary file is replaced by another with the same name and
    // bytes: not the file the journal was written for.
    let part = part_file(dir.path());
    let other = dir.path().join("other");
    fs::copy(&part, &other).unwrap();
    fs::rename(&other, &part).unwrap();
    let v = ok_json(&ahead_with_state(
        &state,
        &[
            "copy",
            "--json",
            "--resume",
            "--chunk",
            "1m",
            s(&src),
            s(&dst),
        ],
    ));
    assert_eq!(v["resumed_bytes"], 0, "{v}");
    same_file(&dst, &src);
    // A file the copy did not make is not its to remove.
    assert!(part.exists());
}

#[test]
fn a_block_device_source_is_resumed_only_with_verify() {
    let dir = scratch();
    let o = ahead(&["copy", "--resume", "/dev/null", s(&dir.path().join("x"))]);
    // /dev/null is a stream; a block device needs root and a loop device:
    // the refusal is checked through the library's own rule below.
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let backing = gen(dir.path(), "backing", 2 * MIB);
    let Some(loopdev) = common::loop_device("block device resume", &backing) else {
        return;
    };
    let o = ahead(&["copy", "--resume", &loopdev.0, s(&dir.path().join("y"))]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("--verify"), "{}", stderr(&o));
    ok_json(&ahead(&[
        "copy",
        "--json",
        "--resume",
        "--verify",
        &loopdev.0,
        s(&dir.path().join("y")),
    ]));
}

#[test]
fn a_second_copy_to_the_same_destination_is_refused_while_the_first_runs() {
    let dir = scratch();
    let a = gen(dir.path(), "a", 8 * MIB);
    let b = dir.path().join("b");
    fs::write(&b, vec![7u8; 3 * MIB as usize]).unwrap();
    let dst = dir.path().join("dst");
    let state = state_dir(dir.path());
    let first = Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(["copy", "--chunk", "1m", "--bwlimit", "4m", s(&a), s(&dst)])
        .env("XDG_STATE_HOME", &state)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_journal(&state, 2);
    let o = ahead_with_state(&state, &["copy", s(&b), s(&dst)]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("another ahead copy"), "{}", stderr(&o));
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    same_file(&dst, &a);
}

#[test]
fn files_whose_size_lies_are_copied_to_their_end() {
    let dir = scratch();
    for (src, name) in [("/proc/version", "v"), ("/proc/self/mounts", "m")] {
        if !Path::new(src).exists() {
            eprintln!("SKIP {src}: not here");
            continue;
        }
        let dst = dir.path().join(name);
        let v = ok_json(&ahead(&["copy", "--json", "--verify", src, s(&dst)]));
        let got = fs::read(&dst).unwrap();
        assert!(!got.is_empty(), "{src}: copied 0 bytes");
        assert_eq!(v["bytes"], got.len(), "{v}");
        assert_eq!(v["method"], "stream", "{v}");
        if name == "v" {
            assert_eq!(got, fs::read(src).unwrap());
        }
    }
    // And an empty file is still an empty copy.
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    ok_json(&ahead(&[
        "copy",
        "--json",
        s(&empty),
        s(&dir.path().join("e")),
    ]));
    assert_eq!(fs::read(dir.path().join("e")).unwrap(), b"");
}

#[test]
fn size_arguments_out_of_range_are_clear_errors() {
    let dir = scratch();
    let src = gen(dir.path(), "src", 20 * MIB);
    let dst = s(&dir.path().join("dst")).to_string();
    let cases: [&[&str]; 9] = [
        &["copy", "--chunk", "18446744073709551615", s(&src), &dst],
        &["copy", "--chunk", "1t", s(&src), &dst],
        &["copy", "--chunk", "1k", s(&src), &dst],
        &["copy", "--bwlimit", "0", s(&src), &dst],
        &["copy", "--depth", "0", s(&src), &dst],
        &["copy", "--depth", "100000", s(&src), &dst],
        &["read", "--cache", "1t", s(&src)],
        &["read", "--bs", "0", s(&src)],
        &["read", "--bs", "2g", s(&src)],
    ];
    for args in cases {
        let started = Instant::now();
        let o = ahead(args);
        let code = o.status.code();
        assert!(
            matches!(code, Some(1 | 2)),
            "{args:?}: {:?} {}",
            o.status,
            stderr(&o)
        );
        let err = stderr(&o);
        assert!(
            !err.contains("panicked") && !err.is_empty(),
            "{args:?}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}");
        assert!(!Path::new(&dst).exists());
    }
}

#[test]
fn trees_skip_fifos_and_device_nodes_unless_asked() {
    let dir = scratch();
    let tree = dir.path().join("t");
    fs::create_dir(&tree).unwrap();
    fs::write(tree.join("f"), vec![3u8; 64 << 10]).unwrap();
    mkfifo(&tree.join("fifo"));
    if rustix::process::geteuid().is_root() {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            tree.join("null"),
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 3),
        )
        .unwrap();
    }
    for cmd in ["stat", "evict", "warm"] {
        let o = ahead(&[cmd, "-R", "--json", s(&tree)]);
        let v = ok_json(&o);
        let files = v["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{cmd}: {v}");
        assert!(files[0]["path"].as_str().unwrap().ends_with("/f"));
    }
    // Named on the command line, a FIFO is an error, not a hang.
    let o = ahead(&["stat", s(&tree.join("fifo"))]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    assert!(fs::symlink_metadata(tree.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn names_that_are_not_utf8_are_kept_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch();
    let src = gen(dir.path(), "src", 300_000);
    let a = dir.path().join(std::ffi::OsStr::from_bytes(b"a\xff"));
    let b = dir.path().join(std::ffi::OsStr::from_bytes(b"a\xfe"));
    let s_a = a.clone().into_os_string();
    let s_b = b.clone().into_os_string();
    let run = |dst: &std::ffi::OsStr| {
        Command::new(env!("CARGO_BIN_EXE_ahead"))
            .arg("copy")
            .arg(&src)
            .arg(dst)
            .output()
            .unwrap()
    };
    let (oa, ob) = std::thread::scope(|sc| {
        let x = sc.spawn(|| run(&s_a));
        let y = run(&s_b);
        (x.join().unwrap(), y)
    });
    assert!(
        oa.status.success() && ob.status.success(),
        "{}{}",
        stderr(&oa),
        stderr(&ob)
    );
    same_file(&a, &src);
    same_file(&b, &src);
}

/// `ahead run --stats FILE` / `ahead trace -o FILE` as root in a shared
/// directory: a file the other user planted there is neither emptied nor
/// fed root's program's reads (file names of root's), and a planted link
/// is not followed.
#[test]
fn run_outputs_planted_by_another_user_are_refused() {
    let (_dir, shared) = arena();
    let planted = shared.join("stats.json");
    let link = shared.join("trace.txt");
    let victim = shared.join("victim");
    fs::write(&victim, b"root's own file\n").unwrap();
    let script = format!(
        "echo mine > {p} && chmod 666 {p} && ln -s {v} {l}",
        p = s(&planted),
        v = s(&victim),
        l = s(&link)
    );
    if run_as_nobody("run_outputs_planted...", &script).is_none() {
        return;
    }
    let o = ahead(&["run", "--stats", s(&planted), "--", "cat", s(&victim)]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("refusing to overwrite"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read(&planted).unwrap(), b"mine\n");
    let o = ahead(&["trace", "-o", s(&link), "--", "cat", s(&victim)]);
    assert!(!o.status.success(), "a link was followed");
    assert_eq!(fs::read(&victim).unwrap(), b"root's own file\n");
}
