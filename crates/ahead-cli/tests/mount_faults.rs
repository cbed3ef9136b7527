//! `ahead mount` when something fails, as a user meets it: a missing
//! bucket, refused credentials or a store that cannot be reached are the
//! command's error before anything is mounted; a store that fails or goes
//! away while mounted is EIO in bounded time, the mount still answering
//! and unmounting; a daemon killed outright leaves a mount whose readers
//! get ENOTCONN and that `fusermount3 -u` clears.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ahead::testdata;
use common::mount::{bucket, fuse_ok, mount, mount_output, mounted, stop};
use common::stderr;

#[test]
fn a_missing_bucket_or_a_file_as_mountpoint_is_a_clear_error() {
    if !fuse_ok() {
        return;
    }
    let (work, server, dir) = bucket(vec![]);
    let o = mount_output(&server, &["s3://nobucket"], &dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("s3://nobucket"), "{}", stderr(&o));
    assert!(!mounted(&dir));
    let file = work.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let o = mount_output(&server, &["s3://bkt"], &file);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
}

/// `--daemon` returns once the bucket is mounted, printing the serving
/// process's id; an unmount ends that process. A mount that cannot start
/// is the command's error, with the reason.
#[test]
fn daemon_returns_once_mounted_and_ends_with_the_unmount() {
    if !fuse_ok() {
        return;
    }
    let (_work, server, dir) = bucket(vec![("a", b"hello\n".to_vec())]);
    let o = mount_output(&server, &["--daemon", "--cache", "32m", "s3://bkt"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(mounted(&dir));
    let pid: i32 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"hello\n");
    let st = Command::new("umount").arg(&dir).status().unwrap();
    assert!(st.success());
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z")
    {
        assert!(start.elapsed() < Duration::from_secs(30), "still serving");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = mount_output(&server, &["--daemon", "s3://nobucket"], &dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nobucket"), "{}", stderr(&o));
    assert!(!mounted(&dir));
}

/// A store that answers every GET with 503: a read on the mount fails with
/// EIO once the engine's retries are spent (five, backing off), it does
/// not hang, and the mount still answers and unmounts.
#[test]
fn a_failing_store_is_eio_not_a_hang() {
    if !fuse_ok() {
        return;
    }
    let mut data = vec![0u8; 1 << 20];
    testdata::fill(&mut data, 0);
    let (_work, server, dir) = bucket(vec![("f", data)]);
    let child = mount(&server, "s3://bkt", &dir);
    let f = std::fs::File::open(dir.join("f")).unwrap();
    server.faults().fail_share(1.0);
    let mut buf = vec![0u8; 4096];
    let e = f.read_exact_at(&mut buf, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(
        server
            .faults()
            .failed
            .load(std::sync::atomic::Ordering::Relaxed)
            > 1
    );
    // The mount itself still answers.
    assert_eq!(std::fs::metadata(dir.join("f")).unwrap().len(), 1 << 20);
    drop(f);
    stop(child, &dir);
}

/// Credentials the store refuses (a wrong secret, an unknown key) and an
/// endpoint where nothing listens: each is the command's error, said as
/// what to check, before anything is mounted, and within seconds.
#[test]
fn refused_credentials_or_an_unreachable_store_are_a_clear_error_at_mount_time() {
    if !fuse_ok() {
        return;
    }
    let (_work, server, dir) = bucket(vec![("a", b"hello\n".to_vec())]);
    let with = |key: &str, value: String| {
        let envs: Vec<(&str, String)> = server
            .env()
            .into_iter()
            .map(|(k, v)| if k == key { (k, value.clone()) } else { (k, v) })
            .collect();
        let start = Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_ahead"))
            .args(["mount", "s3://bkt"])
            .arg(&dir)
            .envs(envs)
            .output()
            .unwrap();
        (o, start.elapsed())
    };
    for key in ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"] {
        let (o, took) = with(key, "not-the-one".into());
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("refused these credentials"), "{key}: {e}");
        assert!(e.contains("403"), "{key}: {e}");
        assert!(took < Duration::from_secs(30), "{key}: {took:?}");
        assert!(!mounted(&dir));
    }
    // A port nobody listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (o, took) = with("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("cannot be reached"), "{e}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(!mounted(&dir));
    eprintln!("refused credentials and an unreachable store: errors in {took:?}");
}

/// The store goes away while a file is open (the server stopped, its
/// port closed): a read of a range not yet fetched is EIO within the
/// engine's retries, as is listing the bucket again; the mount itself
/// stays, answers, and unmounts cleanly.
#[test]
fn a_store_gone_while_mounted_is_eio_in_bounded_time() {
    if !fuse_ok() {
        return;
    }
    let mut data = vec![0u8; 32 << 20];
    testdata::fill(&mut data, 0);
    let (_work, server, dir) = bucket(vec![("f", data.clone())]);
    let child = mount(&server, "s3://bkt", &dir);
    let f = std::fs::File::open(dir.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, data[..4096]);
    drop(server);
    // Far past anything read ahead of the first read (windows of at most
    // a third of the 32 MiB cache).
    let start = Instant::now();
    let e = f.read_exact_at(&mut buf, 28 << 20).unwrap_err();
    let took = start.elapsed();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    // Past the listing's TTL (1 s), `ls` asks the store again.
    std::thread::sleep(Duration::from_millis(1200));
    let start = Instant::now();
    let e = std::fs::read_dir(&dir).and_then(|d| d.collect::<Result<Vec<_>, _>>());
    let listed = start.elapsed();
    assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::EIO));
    assert!(listed < Duration::from_secs(30), "{listed:?}");
    assert!(mounted(&dir));
    eprintln!("store gone: read EIO in {took:?}, listing EIO in {listed:?}");
    drop(f);
    stop(child, &dir);
}

/// The daemon killed outright (SIGKILL, no unmount): a reader's next read
/// and a `stat` fail with ENOTCONN at once rather than hang, and
/// `fusermount3 -u` (`umount` where there is none) clears the mount point.
#[test]
fn a_killed_daemon_leaves_a_mount_that_fusermount3_clears() {
    if !fuse_ok() {
        return;
    }
    let mut data = vec![0u8; 4 << 20];
    testdata::fill(&mut data, 0);
    let (_work, server, dir) = bucket(vec![("f", data.clone())]);
    let mut m = mount(&server, "s3://bkt", &dir);
    let f = std::fs::File::open(dir.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, data[..4096]);
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    let e = f.read_exact_at(&mut buf, 3 << 20).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    let e = std::fs::metadata(dir.join("f")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(f);
    assert!(mounted(&dir));
    let unmount = if Command::new("fusermount3").arg("-V").output().is_ok() {
        Command::new("fusermount3").arg("-u").arg(&dir).output()
    } else {
        eprintln!("no fusermount3: cleared with umount");
        Command::new("umount").arg(&dir).output()
    }
    .unwrap();
    assert!(unmount.status.success(), "{}", stderr(&unmount));
    assert!(!mounted(&dir));
    assert!(Path::new(&dir).read_dir().unwrap().next().is_none());
}
