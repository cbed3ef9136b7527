//! `ahead` on objects in an S3-compatible store: the embedded server
//! (`ahead::testdata::s3`), its endpoint and credentials handed to the
//! binary in the standard `AWS_*` environment.

mod common;

use std::process::Command;

use ahead::testdata::{self, s3::Server};
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
