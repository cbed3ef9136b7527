//! Test support for ahead's tests and benchmarks, kept out of the library
//! (`ahead`, which Rust and Python users link, carries none of it):
//!
//! * [`s3`] — an S3-compatible server in the process (s3s-fs behind s3s),
//!   with `If-Match` and 503s on demand, and object_store clients for it;
//! * [`ceph`] — a one-node Ceph cluster with its RADOS Gateway, started
//!   from the Debian packages where they are installed.
//!
//! * [`client`] — object_store clients of an endpoint given by address
//!   and credentials;
//! * [`http`] — one object over plain HTTP (ranges, `ETag`, `If-Match`),
//!   as a web server serves a file, replaceable while served.
//!
//! The `ahead` binary links it through `ahead-bench`: `ahead bench` (its
//! `--quick` run included) reads objects on the embedded server, and
//! `ahead bench serve` hands it to the Python tests. The server and the
//! Ceph launcher are the `server` feature (on by default); without it
//! only [`client`] is built, and `ahead` built without its own
//! `embedded-server` feature benchmarks objects only at an `--endpoint`
//! (docs/bench.md says what that saves).

#[cfg(feature = "server")]
pub mod ceph;
pub mod client;
pub mod http;
#[cfg(feature = "server")]
pub mod s3;
