//! The disk tier for objects (`EngineConfig::with_cache_dir`): a second
//! engine reads what a first one fetched from the tier and fetches
//! nothing; damaged, truncated and half-written chunks are fetched again
//! with the right bytes; a changed object is never served from the old
//! version's chunks; the directory removed, or a full disk, leave reads
//! going on from the store; the size bound holds and a one-off scan does
//! not push out a working set; engines sharing a directory at once read
//! the right bytes. Objects on the embedded S3 server, every byte checked.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ahead::remote::{DiskTier, TIER_CHUNK};
use ahead::testdata;
use ahead::{Engine, EngineConfig, File};
use ahead_testkit::s3::Server;
use common::read_all;
use object_store::path::Path as ObjectPath;

const BUCKET: &str = "data";
const SIZE: usize = 4 << 20;

fn object_bytes(size: usize, shift: u64) -> Vec<u8> {
    let mut v = vec![0u8; size];
    testdata::fill(&mut v, shift);
    v
}

struct Fixture {
    dir: tempfile::TempDir,
    server: Server,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    std::fs::create_dir(dir.path().join("store")).unwrap();
    let server = Server::start(&dir.path().join("store"), &[BUCKET]).unwrap();
    Fixture { dir, server }
}

impl Fixture {
    fn tier_dir(&self) -> PathBuf {
        self.dir.path().join("tier")
    }

    fn engine(&self, limit: Option<u64>) -> Engine {
        engine_in(&self.tier_dir(), limit)
    }

    fn put(&self, key: &str, bytes: Vec<u8>) {
        self.server.put(BUCKET, key, bytes).unwrap();
    }

    fn open(&self, engine: &Engine, key: &str) -> File {
        let store = self.server.store(BUCKET).unwrap();
        let name = format!("s3://{BUCKET}/{key}");
        engine
            .open_object(store, ObjectPath::from(key), &name)
            .unwrap()
    }

    /// The tier's data files.
    fn data_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.tier_dir().join("ahead-tier-v1"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "dat"))
            .collect();
        v.sort();
        v
    }
}

fn engine_in(dir: &Path, limit: Option<u64>) -> Engine {
    let mut config = EngineConfig::default().with_cache_dir(dir);
    if let Some(l) = limit {
        config = config.with_cache_dir_bytes(l);
    }
    Engine::new(config).unwrap()
}

/// Waits until the engine's tier has written `bytes` (admission runs
/// after the reader has its bytes).
fn settle(engine: &Engine, bytes: u64) {
    let tier = engine.disk_tier().unwrap();
    let start = Instant::now();
    while tier.stats().bytes_written < bytes {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the tier wrote {} of {bytes} bytes",
            tier.stats().bytes_written
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_second_engine_reads_from_the_tier_and_fetches_nothing() {
    let f = fixture();
    f.put("obj", object_bytes(SIZE, 0));
    let first = f.engine(None);
    read_all(&f.open(&first, "obj"), 0);
    settle(&first, SIZE as u64);
    let second = f.engine(None);
    let file = f.open(&second, "obj");
    read_all(&file, 0);
    let s = file.remote_stats().unwrap();
    assert_eq!(s.bytes_fetched, 0, "{s:?}");
    assert_eq!(s.tier_bytes, SIZE as u64, "{s:?}");
    assert_eq!(s.tier_chunks_missed, 0, "{s:?}");
    // Its page cache was left as it was: O_DIRECT both ways.
    for p in f.data_files() {
        let fd = std::fs::File::open(&p).unwrap();
        match ahead::residency::of_range(&fd, 0, u64::MAX).unwrap() {
            ahead::residency::Seen::Known(r) => {
                assert!(r.cached * 100 <= r.pages, "{r:?} of {p:?}")
            }
            other => eprintln!("SKIPPED the page cache check: {other:?}"),
        }
    }
}

#[test]
fn random_small_reads_are_kept_whole_chunks_and_read_back() {
    let f = fixture();
    f.put("obj", object_bytes(SIZE, 0));
    let first = f.engine(None);
    let file = f.open(&first, "obj");
    let mut buf = vec![0u8; 4096];
    let offsets: Vec<u64> = (0..32u64)
        .map(|k| (k * 7919 * 4096) % (SIZE as u64 - 4096))
        .collect();
    for &at in &offsets {
        file.read_at(&mut buf, at).unwrap();
        assert_eq!(testdata::first_mismatch(&buf, at), None);
    }
    let kept = file.remote_stats().unwrap().bytes_fetched;
    settle(&first, kept);
    let second = f.engine(None);
    let file = f.open(&second, "obj");
    for &at in &offsets {
        file.read_at(&mut buf, at).unwrap();
        assert_eq!(testdata::first_mismatch(&buf, at), None);
    }
    let s = file.remote_stats().unwrap();
    assert_eq!(s.bytes_fetched, 0, "{s:?}");
    assert!(s.tier_chunks_hit > 0, "{s:?}");
}

#[test]
fn damaged_truncated_and_half_written_chunks_are_fetched_again() {
    let f = fixture();
    f.put("obj", object_bytes(SIZE, 0));
    let first = f.engine(None);
    read_all(&f.open(&first, "obj"), 0);
    settle(&first, SIZE as u64);
    let data = &f.data_files()[0];
    {
        use std::os::unix::fs::FileExt;
        let w = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(data)
            .unwrap();
        // A flipped byte in chunk 3; chunk 5 half overwritten with zeros,
        // as a process killed while writing it (its entry from before)
        // would leave it; the file cut in the middle of chunk 40.
        let mut b = [0u8; 1];
        w.read_at(&mut b, 3 * TIER_CHUNK + 100).unwrap();
        w.write_at(&[b[0] ^ 0x40], 3 * TIER_CHUNK + 100).unwrap();
        w.write_at(&vec![0u8; TIER_CHUNK as usize / 2], 5 * TIER_CHUNK)
            .unwrap();
        w.set_len(40 * TIER_CHUNK + 1000).unwrap();
    }
    let second = f.engine(None);
    let file = f.open(&second, "obj");
    read_all(&file, 0);
    let s = file.remote_stats().unwrap();
    // The damaged chunks and all from the cut on (their entries stand,
    // their bytes are gone), and nothing else.
    let missing = 2 + (SIZE as u64 / TIER_CHUNK - 40);
    let t = second.disk_tier().unwrap().stats();
    assert_eq!(t.discarded, missing, "{t:?}");
    assert_eq!(s.bytes_fetched, missing * TIER_CHUNK, "{s:?}");
    settle(&second, missing * TIER_CHUNK);
    // Kept again: a third engine fetches nothing.
    let third = f.engine(None);
    let file = f.open(&third, "obj");
    read_all(&file, 0);
    assert_eq!(file.remote_stats().unwrap().bytes_fetched, 0);
}

#[test]
fn a_changed_object_is_never_served_from_the_old_chunks() {
    let f = fixture();
    f.put("obj", object_bytes(SIZE, 0));
    let first = f.engine(None);
    read_all(&f.open(&first, "obj"), 0);
    settle(&first, SIZE as u64);
    f.put("obj", object_bytes(SIZE, 777));
    let second = f.engine(None);
    let file = f.open(&second, "obj");
    read_all(&file, 777);
    let s = file.remote_stats().unwrap();
    assert_eq!(s.bytes_fetched, SIZE as u64, "{s:?}");
    assert_eq!(s.tier_bytes, 0, "{s:?}");
}

#[test]
fn the_directory_removed_or_the_disk_full_leaves_reads_going_on() {
    let f = fixture();
    f.put("a", object_bytes(SIZE, 0));
    f.put("b", object_bytes(SIZE, 5));
    let engine = f.engine(None);
    let a = f.open(&engine, "a");
    read_all(&a, 0);
    std::fs::remove_dir_all(f.tier_dir()).unwrap();
    // A file open before, and one opened after.
    read_all(&a, 0);
    read_all(&f.open(&engine, "b"), 5);

    // A file system of 1 MiB (tmpfs: also one without O_DIRECT) under a
    // tier allowed 64 MiB.
    let small = f.dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED the full disk: mounting a tmpfs failed (not root?)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            // The engine's threads may hold the tier's directory a moment
            // after it is dropped: then detach it (lazily), rather than
            // leave a mount behind the test.
            let umount = |lazy: bool| {
                let mut c = std::process::Command::new("umount");
                if lazy {
                    c.arg("-l");
                }
                c.arg(&self.0).status().is_ok_and(|s| s.success())
            };
            if !umount(false) {
                umount(true);
            }
        }
    }
    let _unmount = Unmount(small.clone());
    let engine = engine_in(&small, Some(64 << 20));
    for _ in 0..2 {
        let file = f.open(&engine, "a");
        read_all(&file, 0);
    }
    // Kept until the disk was full, and no more.
    let t = engine.disk_tier().unwrap().stats();
    assert!(t.bytes_written > 0 && t.bytes_written < 1 << 20, "{t:?}");
}

#[test]
fn the_bound_holds_and_a_scan_does_not_push_out_the_working_set() {
    let f = fixture();
    let one = 1 << 20;
    for k in 0..12 {
        f.put(&format!("o{k}"), object_bytes(one, k));
    }
    let limit = 4 << 20;
    // Data files without an index: one left by a process long gone, one
    // an open may be making its index for.
    let sub = f.tier_dir().join("ahead-tier-v1");
    std::fs::create_dir_all(&sub).unwrap();
    let orphan = |name: &str, age: u64| {
        let p = sub.join(name);
        let o = std::fs::File::create(&p).unwrap();
        o.set_len(1 << 20).unwrap();
        std::io::Write::write_all(&mut &o, &[1u8; 4096]).unwrap();
        o.set_modified(std::time::SystemTime::now() - Duration::from_secs(age))
            .unwrap();
        p
    };
    let (old, young) = (orphan("0123.dat", 600), orphan("4567.dat", 0));
    // The working set, read in two epochs (each a fresh engine, as a
    // process would be).
    for _ in 0..2 {
        let e = f.engine(Some(limit));
        for k in 0..2 {
            read_all(&f.open(&e, &format!("o{k}")), k);
        }
        wait_idle(&e);
    }
    // A one-off scan of ten more.
    let e = f.engine(Some(limit));
    for k in 2..12 {
        read_all(&f.open(&e, &format!("o{k}")), k);
    }
    wait_idle(&e);
    let tier = DiskTier::open(&f.tier_dir(), Some(limit)).unwrap();
    let u = tier.usage().unwrap();
    assert!(u.bytes <= limit, "{u:?}");
    assert!(
        !old.exists() && young.exists(),
        "the old orphan goes, the young one stays"
    );
    // The working set is still there.
    let e = f.engine(Some(limit));
    for k in 0..2 {
        let file = f.open(&e, &format!("o{k}"));
        read_all(&file, k);
        let s = file.remote_stats().unwrap();
        assert_eq!(s.bytes_fetched, 0, "o{k}: {s:?} ({u:?})");
    }
}

/// Waits until the engine's tier has written all its files fetched.
fn wait_idle(e: &Engine) {
    let tier = e.disk_tier().unwrap();
    let mut last = u64::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = tier.stats().bytes_written;
        if now == last {
            return;
        }
        last = now;
    }
}

#[test]
fn engines_sharing_a_directory_at_once_read_the_right_bytes() {
    let f = fixture();
    f.put("obj", object_bytes(SIZE, 3));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = &f;
            s.spawn(move || {
                let e = f.engine(None);
                let file = f.open(&e, "obj");
                // Each from its own place, wrapping round.
                let mut buf = vec![0u8; 192 << 10];
                let start = t * SIZE as u64 / 4;
                let mut done = 0;
                while done < SIZE as u64 {
                    let at = (start + done) % SIZE as u64;
                    let n = file.read_at(&mut buf, at).unwrap();
                    assert_eq!(testdata::first_mismatch(&buf[..n], at + 3), None, "at {at}");
                    done += n as u64;
                }
                wait_idle(&e);
            });
        }
    });
    let e = f.engine(None);
    let file = f.open(&e, "obj");
    read_all(&file, 3);
    assert_eq!(file.remote_stats().unwrap().bytes_fetched, 0);
}

#[test]
fn a_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let dir = f.tier_dir();
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let Err(err) = Engine::new(EngineConfig::default().with_cache_dir(&dir)) else {
        panic!("a directory anyone may write was taken")
    };
    assert!(err.to_string().contains("writable by no one else"), "{err}");
    let file = f.dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(Engine::new(EngineConfig::default().with_cache_dir(&file)).is_err());

    // A link to a private directory: taken if it is the caller's, refused
    // if another user planted it (as root, the link is handed to nobody).
    let target = f.dir.path().join("private");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = f.dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(Engine::new(EngineConfig::default().with_cache_dir(&link)).is_ok());
    if std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).is_err() {
        eprintln!("SKIPPED a link of another user's: lchown needs root");
        return;
    }
    let Err(err) = Engine::new(EngineConfig::default().with_cache_dir(&link)) else {
        panic!("another user's link was followed")
    };
    assert!(
        err.to_string().contains("a link owned by uid 65534"),
        "{err}"
    );
}
