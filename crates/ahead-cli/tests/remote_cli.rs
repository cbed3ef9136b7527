//! `ahead` on objects in an S3-compatible store: the embedded server
//! (`ahead_testkit::s3`), its endpoint and credentials handed to the
//! binary in the standard `AWS_*` environment.

mod common;

use std::process::Command;

use ahead::testdata;
use ahead_testkit::s3::Server;
use common::{scratch, stderr};

fn ahead_with(server: &Server, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(args)
        .envs(server.env())
        .output()
        .expect("run ahead")
}

#[test]
fn cat_prints_objects_byte_for_byte_and_reports_a_missing_one() {
    let dir = scratch();
    let server = Server::start(dir.path(), &["bkt"]).unwrap();
    let mut a = vec![0u8; (3 << 20) + 123];
    testdata::fill(&mut a, 0);
    server.put("bkt", "dir/a", a.clone()).unwrap();
    let o = ahead_with(&server, &["cat", "s3://bkt/dir/a"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout.len(), a.len());
    assert_eq!(testdata::first_mismatch(&o.stdout, 0), None);
    // Like cat(1): the missing one is reported, the others printed, and
    // the exit status says so.
    let o = ahead_with(&server, &["cat", "s3://bkt/none", "s3://bkt/dir/a"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("s3://bkt/none") && err.contains("no such object"),
        "{err}"
    );
    assert_eq!(o.stdout.len(), a.len());
}

#[test]
fn read_runs_every_pattern_on_an_object_and_refuses_the_kernel_modes() {
    let dir = scratch();
    let server = Server::start(dir.path(), &["bkt"]).unwrap();
    let mut a = vec![0u8; 4 << 20];
    testdata::fill(&mut a, 0);
    server.put("bkt", "a", a).unwrap();
    for pattern in ["seq", "reverse", "stride:65536", "random", "interleaved:4"] {
        let o = ahead_with(
            &server,
            &[
                "read",
                "s3://bkt/a",
                "--pattern",
                pattern,
                "--bs",
                "64k",
                "--json",
            ],
        );
        assert!(o.status.success(), "{pattern}: {}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(j["bytes"].as_u64().unwrap() > 0, "{pattern}: {j}");
        assert_eq!(j["engine"], "ahead", "{pattern}: {j}");
    }
    let o = ahead_with(&server, &["read", "s3://bkt/a", "--mode", "kernel"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("only by ahead"), "{}", stderr(&o));
}

#[test]
fn copy_uploads_and_downloads_byte_identical_verified_and_cache_neutral() {
    let dir = scratch();
    let server = Server::start(&dir.path().join("store"), &["bkt"]).unwrap();
    let work = dir.path();
    // Three parts of 8 MiB and a short last one; and one under a part.
    for (name, size) in [("big", (21u64 << 20) + 7), ("small", 100_000)] {
        let src = common::gen(work, name, size);
        let url = format!("s3://bkt/up/{name}");
        let o = ahead_with(
            &server,
            &["copy", src.to_str().unwrap(), &url, "--verify", "--json"],
        );
        let up = common::ok_json(&o);
        assert_eq!(up["bytes"].as_u64(), Some(size), "{up}");
        let method = if size > 8 << 20 { "multipart" } else { "put" };
        assert_eq!(up["method"], method, "{up}");
        // Neutral: the file's pages are as they were (none cached here).
        assert_eq!(
            up["src_cached_pages_before"], up["src_cached_pages_after"],
            "{up}"
        );
        let sum = up["checksum"].as_str().unwrap().to_owned();
        assert!(sum.starts_with("xxh3-chunks:"), "{up}");

        let dst = work.join(format!("{name}.back"));
        let o = ahead_with(
            &server,
            &["copy", &url, dst.to_str().unwrap(), "--verify", "--json"],
        );
        let down = common::ok_json(&o);
        assert_eq!(down["bytes"].as_u64(), Some(size), "{down}");
        assert_eq!(down["read_path"], "ranged-get", "{down}");
        assert!(down["checksum"]
            .as_str()
            .unwrap()
            .starts_with("xxh3-chunks:"));
        // Neutral: nothing of the destination stays cached.
        assert_eq!(down["dst_cached_pages_after"].as_u64(), Some(0), "{down}");
        assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(&dst).unwrap());
    }
    // Into a directory: the object's last name.
    let o = ahead_with(
        &server,
        &["copy", "s3://bkt/up/small", work.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(work.join("small")).unwrap(),
        std::fs::read(work.join("small.back")).unwrap()
    );
}

#[test]
fn copy_of_a_missing_object_or_to_a_missing_bucket_fails_and_leaves_nothing() {
    let dir = scratch();
    let server = Server::start(&dir.path().join("store"), &["bkt"]).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("x");
    let o = ahead_with(&server, &["copy", "s3://bkt/none", dst.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("s3://bkt/none"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "left something"
    );

    let src = common::gen(dir.path(), "src", 1 << 20);
    let o = ahead_with(&server, &["copy", src.to_str().unwrap(), "s3://nobucket/k"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("s3://nobucket/k"), "{}", stderr(&o));
    // An upload whose parts fail after the first: an error, and no
    // object under the name (the parts sent are aborted).
    let big = common::gen(dir.path(), "big", 30 << 20);
    server
        .faults()
        .parts_ok
        .store(1, std::sync::atomic::Ordering::Relaxed);
    let o = ahead_with(&server, &["copy", big.to_str().unwrap(), "s3://bkt/half"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("s3://bkt/half"), "{}", stderr(&o));
    let o = ahead_with(&server, &["cat", "s3://bkt/half"]);
    assert!(stderr(&o).contains("no such object"), "{}", stderr(&o));
    // A directory is not uploaded, nor one object copied to another.
    let o = ahead_with(&server, &["copy", out.to_str().unwrap(), "s3://bkt/k"]);
    assert!(!o.status.success());
    let o = ahead_with(&server, &["copy", "s3://bkt/a", "s3://bkt/b"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not supported"), "{}", stderr(&o));
}

/// `ahead bench serve --server ceph`, as `ahead bench mount --server ceph`
/// drives it: a cluster comes up, the first line names its gateway behind
/// the shaper, its bucket and credentials; `put` uploads, `cat` through the
/// shaped endpoint reads the bytes back, `bytes` counts what went through,
/// `fail` is refused with a reason, and closing standard input brings the
/// cluster down.
#[test]
fn bench_serve_brings_up_ceph_behind_the_profile_and_down_again() {
    use std::io::{BufRead, BufReader, Write};
    if !ahead_testkit::ceph::installed() {
        eprintln!("SKIP: Ceph is not installed (apt-get install ceph-mon ceph-osd ceph-mgr radosgw ceph-common)");
        return;
    }
    let dir = scratch();
    let src = dir.path().join("src");
    let size = (5u64 << 20) + 7;
    testdata::write_file(&src, size).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args([
            "bench",
            "serve",
            "--server",
            "ceph",
            "--profile",
            "lan",
            "--dir",
        ])
        .arg(dir.path().join("store"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || -> serde_json::Value {
        serde_json::from_str(&lines.next().expect("a line").unwrap()).unwrap()
    };
    let hello = next();
    assert_eq!(hello["server"], "ceph", "{hello}");
    assert_eq!(hello["bucket"], ahead_testkit::ceph::BUCKET, "{hello}");
    assert_ne!(hello["endpoint"], hello["direct"], "{hello}");
    let mut ask = |line: &str| {
        writeln!(input, "{line}").unwrap();
        next()
    };
    assert_eq!(ask(&format!("put obj {}", src.display()))["bytes"], size);
    let before = ask("bytes")["bytes_down"].as_u64().unwrap();
    let s = |k: &str| hello[k].as_str().unwrap().to_owned();
    let o = Command::new(env!("CARGO_BIN_EXE_ahead"))
        .args(["cat", &format!("s3://{}/obj", s("bucket"))])
        .env("AWS_ENDPOINT_URL", s("endpoint"))
        .env("AWS_ACCESS_KEY_ID", s("access_key"))
        .env("AWS_SECRET_ACCESS_KEY", s("secret_key"))
        .env("AWS_REGION", s("region"))
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout.len() as u64, size);
    assert_eq!(testdata::first_mismatch(&o.stdout, 0), None);
    let after = ask("bytes")["bytes_down"].as_u64().unwrap();
    assert!(after - before >= size, "{before} then {after}");
    let refused = ask("fail 0.5");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("embedded server only"),
        "{refused}"
    );
    drop(input);
    assert!(child.wait().unwrap().success());
    // Down: nothing of the cluster is left running from this directory.
    let ps = Command::new("pgrep")
        .args(["-f", &dir.path().display().to_string()])
        .output()
        .unwrap();
    assert!(
        ps.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

/// An endpoint without its scheme, a common slip, is a clear error that
/// names the setting, for `cat` and for `mount` (object_store panicked on
/// its first request to it, and the commands died with a backtrace).
#[test]
fn an_endpoint_without_its_scheme_is_a_clear_error() {
    let dir = scratch();
    for ep in ["localhost:9000", "127.0.0.1:9000"] {
        let mount_point = dir.path().display().to_string();
        for args in [
            &["cat", "s3://bkt/key"][..],
            &["mount", "s3://bkt", &mount_point],
        ] {
            let o = Command::new(env!("CARGO_BIN_EXE_ahead"))
                .args(args)
                .env("AWS_ENDPOINT_URL", ep)
                .env("AWS_ACCESS_KEY_ID", "key")
                .env("AWS_SECRET_ACCESS_KEY", "secret")
                .env("AWS_REGION", "us-east-1")
                .output()
                .expect("run ahead");
            let err = stderr(&o);
            assert!(!o.status.success(), "{args:?} {ep}: {err}");
            assert!(
                err.contains("AWS_ENDPOINT_URL") && err.contains(ep) && !err.contains("panicked"),
                "{args:?} {ep}: {err}"
            );
        }
    }
}
