//! An S3-compatible server in the process, for tests and the default
//! remote benchmark: `s3s-fs` (objects as files in a directory) behind
//! `s3s`'s HTTP service on 127.0.0.1, with what a client's tests need that
//! `s3s-fs` lacks:
//!
//! * GetObject honours `If-Match` (412 Precondition Failed when the
//!   object's ETag is another), as S3 and Ceph's RADOS Gateway do;
//! * faults on demand: a share of GETs answered 503 SlowDown, or every
//!   one, or every GET delayed ([`Faults`]);
//! * a GET's body read in large chunks ([`BODY_CHUNK`]) rather than
//!   s3s-fs's 4 KiB, so that the server costs the machine little of the
//!   CPU the client under test needs.
//!
//! The server runs on its own runtime; dropping the [`Server`] stops it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use object_store::ObjectStoreExt;
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CreateBucketInput, CreateBucketOutput,
    CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteObjectInput, DeleteObjectOutput,
    ETagCondition, GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput,
    HeadObjectInput, HeadObjectOutput, ListObjectsV2Input, ListObjectsV2Output, PutObjectInput,
    PutObjectOutput, UploadPartInput, UploadPartOutput,
};
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

pub use crate::client::{client, client_as, ACCESS_KEY, SECRET_KEY};

/// Faults the server injects: into GetObject, `fail_per_million` of them
/// (chosen by a counter, so the share is exact over many) answered 503
/// SlowDown; into UploadPart, every part after the first `parts_ok`
/// answered 500.
#[derive(Default)]
pub struct Faults {
    /// UploadParts answered before they fail (0, the default: none fails).
    pub parts_ok: AtomicU64,
    /// UploadParts answered so far.
    parts: AtomicU64,
    /// GETs failed per million (1,000,000: all).
    pub fail_per_million: AtomicU64,
    /// GETs answered so far (the counter the share is taken over).
    gets: AtomicU64,
    /// GETs failed so far.
    pub failed: AtomicU64,
    /// HEADs answered so far: not a fault, what a test counts.
    pub heads: AtomicU64,
    /// ListObjectsV2 requests answered so far (each a page): what a test
    /// counts.
    pub lists: AtomicU64,
    /// GET bodies read in [`BODY_CHUNK`]s (the rest are s3s-fs's own).
    pub chunked_bodies: AtomicU64,
    /// Milliseconds every GET waits before it is answered (0, the
    /// default: none): a slow store.
    pub get_delay_ms: AtomicU64,
    /// GETs received so far (counted before any fault or delay).
    pub gets_started: AtomicU64,
}

impl Faults {
    /// Fails `share` (0.0 to 1.0) of the GETs from now on.
    pub fn fail_share(&self, share: f64) {
        let ppm = (share.clamp(0.0, 1.0) * 1e6).round() as u64;
        self.fail_per_million.store(ppm, Ordering::Relaxed);
    }

    fn strike(&self) -> bool {
        let ppm = self.fail_per_million.load(Ordering::Relaxed);
        if ppm == 0 {
            return false;
        }
        let n = self.gets.fetch_add(1, Ordering::Relaxed);
        // Evenly spread: request n fails when the running share crosses a
        // whole number.
        let fails = (n + 1) * ppm / 1_000_000 > n * ppm / 1_000_000;
        if fails {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        fails
    }
}

struct Store {
    fs: s3s_fs::FileSystem,
    faults: Arc<Faults>,
    root: std::path::PathBuf,
}

impl Store {
    /// S3 writes only into a bucket that exists (s3s-fs would make it).
    fn bucket(&self, bucket: &str) -> S3Result<()> {
        let named = !bucket.is_empty() && !bucket.contains(['/', '.']);
        if named && self.root.join(bucket).is_dir() {
            Ok(())
        } else {
            Err(s3_error!(NoSuchBucket))
        }
    }
}

/// Bytes a GET's body is read in. s3s-fs reads a body 4 KiB at a time,
/// each read a hop to tokio's blocking pool and a frame of its own: a 128
/// MiB object read through the `s3` profile cost the server 1.0 s of CPU
/// (mostly futex wake-ups), 1.3 of this machine's 2 cores, taken from the
/// client being measured; in reads of this size, 0.33 s.
pub const BODY_CHUNK: usize = 256 << 10;

/// The object's file, opened, and its path, where the key is a plain
/// relative path (s3s-fs resolves others in its own way: those keep its
/// body).
fn object_file(
    root: &Path,
    bucket: &str,
    key: &str,
) -> Option<(std::fs::File, std::path::PathBuf)> {
    // No empty component (so no leading, trailing or doubled '/'), no
    // '.' or '..'.
    let plain = |s: &str| s.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
    if !plain(bucket) || bucket.contains('/') || !plain(key) {
        return None;
    }
    let path = root.join(bucket).join(key);
    let file = std::fs::File::open(&path).ok()?;
    Some((file, path))
}

/// A body read from `file` in [`BODY_CHUNK`]s over the range s3s-fs
/// answered with, if the file s3s-fs read is `file`: the path still names
/// it (objects are replaced by a rename, so an object replaced since we
/// opened it names another inode, and keeps s3s-fs's body).
fn fast_body(
    file: std::fs::File,
    path: &Path,
    out: &GetObjectOutput,
) -> Option<s3s::dto::StreamingBlob> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let (a, b) = (file.metadata().ok()?, std::fs::metadata(path).ok()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) || !a.is_file() {
        return None;
    }
    let len = u64::try_from(out.content_length?).ok()?;
    let start = match &out.content_range {
        // "bytes FIRST-LAST/SIZE"
        Some(r) => r
            .strip_prefix("bytes ")?
            .split_once('-')?
            .0
            .parse::<u64>()
            .ok()?,
        None => 0,
    };
    if start.checked_add(len)? > a.len() {
        return None;
    }
    let file = Arc::new(file);
    let chunks = futures_util::stream::try_unfold((start, len), move |(at, left)| {
        let file = file.clone();
        async move {
            if left == 0 {
                return Ok(None);
            }
            let n = left.min(BODY_CHUNK as u64) as usize;
            let buf = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; n];
                file.read_exact_at(&mut buf, at).map(|()| buf)
            })
            .await
            .map_err(std::io::Error::other)??;
            Ok::<_, std::io::Error>(Some((
                bytes::Bytes::from(buf),
                (at + n as u64, left - n as u64),
            )))
        }
    });
    Some(s3s::dto::StreamingBlob::wrap(chunks))
}

fn head_of<T>(req: &S3Request<T>, bucket: &str, key: &str) -> S3Result<S3Request<HeadObjectInput>> {
    let input = HeadObjectInput::builder()
        .bucket(bucket.to_owned())
        .key(key.to_owned())
        .build()
        .map_err(|e| s3_error!(e, InternalError))?;
    Ok(S3Request {
        input,
        method: req.method.clone(),
        uri: req.uri.clone(),
        headers: req.headers.clone(),
        extensions: Default::default(),
        credentials: req.credentials.clone(),
        region: req.region.clone(),
        service: req.service.clone(),
        trailing_headers: None,
    })
}

#[async_trait::async_trait]
impl S3 for Store {
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.faults.gets_started.fetch_add(1, Ordering::Relaxed);
        if self.faults.strike() {
            return Err(s3_error!(SlowDown, "injected fault"));
        }
        let delay = self.faults.get_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        if let Some(ETagCondition::ETag(want)) = &req.input.if_match {
            let head = head_of(&req, &req.input.bucket, &req.input.key)?;
            let now = self.fs.head_object(head).await?;
            let matches = now
                .output
                .e_tag
                .as_ref()
                .is_some_and(|t| t.strong_cmp(want));
            if !matches {
                return Err(s3_error!(
                    PreconditionFailed,
                    "the object's ETag is another"
                ));
            }
        }
        // A handle of our own, opened before s3s-fs opens its: the body
        // is read from it (`fast_body`) if s3s-fs answered for the same
        // file.
        let ours = object_file(&self.root, &req.input.bucket, &req.input.key);
        let mut resp = self.fs.get_object(req).await?;
        if let Some((file, path)) = ours {
            if let Some(body) = fast_body(file, &path, &resp.output) {
                self.faults.chunked_bodies.fetch_add(1, Ordering::Relaxed);
                resp.output.body = Some(body);
            }
        }
        Ok(resp)
    }

    // The rest as s3s-fs answers it.
    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.faults.heads.fetch_add(1, Ordering::Relaxed);
        self.fs.head_object(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.fs.head_bucket(req).await
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.fs.create_bucket(req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.bucket(&req.input.bucket)?;
        self.fs.put_object(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.fs.delete_object(req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        // s3s-fs lists no ETags; S3, Ceph's RADOS Gateway and MinIO list
        // each object's, and clients take it from there (a mount opens a
        // listed object without a HEAD). Each is the one s3s-fs keeps
        // beside the object, as its HEAD answers it.
        self.faults.lists.fetch_add(1, Ordering::Relaxed);
        let bucket = req.input.bucket.clone();
        let like = head_of(&req, &bucket, "")?;
        let mut out = self.fs.list_objects_v2(req).await?;
        for o in out.output.contents.iter_mut().flatten() {
            if let (None, Some(key)) = (&o.e_tag, &o.key) {
                if let Ok(h) = self.fs.head_object(head_of(&like, &bucket, key)?).await {
                    o.e_tag = h.output.e_tag;
                }
            }
        }
        Ok(out)
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.bucket(&req.input.bucket)?;
        self.fs.create_multipart_upload(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let ok = self.faults.parts_ok.load(Ordering::Relaxed);
        if ok > 0 && self.faults.parts.fetch_add(1, Ordering::Relaxed) >= ok {
            return Err(s3_error!(InternalError, "injected fault"));
        }
        self.fs.upload_part(req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.fs.complete_multipart_upload(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.fs.abort_multipart_upload(req).await
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    faults: Arc<Faults>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Server {
    /// Starts a server keeping its objects under `root`, with the buckets
    /// `buckets` (subdirectories of `root`, made here), listening on a
    /// free port of 127.0.0.1.
    pub fn start(root: &Path, buckets: &[&str]) -> std::io::Result<Server> {
        for b in buckets {
            std::fs::create_dir_all(root.join(b))?;
        }
        let fs =
            s3s_fs::FileSystem::new(root).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        let faults = Arc::new(Faults::default());
        let store = Store {
            fs,
            faults: faults.clone(),
            root: root.to_path_buf(),
        };
        let service = {
            let mut b = s3s::service::S3ServiceBuilder::new(store);
            b.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
            b.build()
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ahead-s3-server")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        runtime.spawn(async move {
            let http =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                // A response's head and body are separate writes: with
                // Nagle's algorithm the body would wait for the client's
                // delayed ACK (40 ms on Linux).
                let _ = socket.set_nodelay(true);
                let conn = http
                    .serve_connection(hyper_util::rt::TokioIo::new(socket), service.clone())
                    .into_owned();
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        });
        Ok(Server {
            addr,
            faults,
            runtime: Some(runtime),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The faults it injects.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The `AWS_*` variables that point object_store (and any S3 client)
    /// at this server, for a child process: endpoint, credentials,
    /// region, plain HTTP.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// An object_store client of `bucket` on this server.
    pub fn store(&self, bucket: &str) -> std::io::Result<Arc<dyn object_store::ObjectStore>> {
        client(&self.endpoint(), bucket)
    }

    /// Writes `bytes` as `key` in `bucket` (PutObject), on the server's
    /// runtime; the object's ETag.
    pub fn put(&self, bucket: &str, key: &str, bytes: Vec<u8>) -> std::io::Result<String> {
        let store = self.store(bucket)?;
        let path = object_store::path::Path::from(key);
        let rt = self
            .runtime
            .as_ref()
            .ok_or_else(|| std::io::Error::other("stopped"))?;
        let r = rt
            .block_on(async move { store.put(&path, bytes.into()).await })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(r.e_tag.unwrap_or_default())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{GetOptions, GetRange};

    fn bytes(n: usize) -> Vec<u8> {
        (0..n as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect()
    }

    #[test]
    fn a_get_answers_its_range_in_large_chunks_with_the_objects_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path(), &["bkt"]).unwrap();
        let data = bytes(3 * BODY_CHUNK + 123);
        server.put("bkt", "dir/obj", data.clone()).unwrap();
        server
            .put("bkt", "odd name+%", data[..1000].to_vec())
            .unwrap();
        let store = server.store("bkt").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let get = |key: &str, range: Option<GetRange>| {
            let opts = GetOptions {
                range,
                ..GetOptions::default()
            };
            let path = object_store::path::Path::from(key);
            rt.block_on(async { store.get_opts(&path, opts).await?.bytes().await })
                .unwrap()
                .to_vec()
        };
        let n = data.len() as u64;
        let b = BODY_CHUNK as u64;
        assert_eq!(get("dir/obj", None), data);
        for r in [0..1, 0..b, 1..b + 1, b - 7..2 * b + 9, n - 5..n, 17..n] {
            let want = data[r.start as usize..r.end as usize].to_vec();
            assert_eq!(
                get("dir/obj", Some(GetRange::Bounded(r.clone()))),
                want,
                "{r:?}"
            );
        }
        assert_eq!(
            get("dir/obj", Some(GetRange::Suffix(b + 3))),
            data[data.len() - BODY_CHUNK - 3..]
        );
        assert_eq!(
            get("dir/obj", Some(GetRange::Offset(2 * b))),
            data[2 * BODY_CHUNK..]
        );
        assert_eq!(get("odd name+%", None), data[..1000]);
        // Every one of them came through the chunked body.
        assert_eq!(server.faults().chunked_bodies.load(Ordering::Relaxed), 10);
    }
}
