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
