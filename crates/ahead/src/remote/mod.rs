//! Objects in a store, read through the engine's cache and readahead: S3
//! and S3-compatible endpoints (`s3://bucket/key`, with Ceph's RADOS
//! Gateway, MinIO, AWS) and plain HTTP(S) servers that answer ranged GETs
//! (`http(s)://host/path`), through the `object_store` crate (retries with
//! backoff, credentials and endpoint from the standard `AWS_*`
//! environment).
//!
//! An object is an [`io::ReadSource`](crate::io::ReadSource) without a
//! descriptor: the cache keys its pages like a file's and the policies see
//! only pages, so every readahead rule (forward, backward, strided,
//! interleaved, dense) is the same code as for files. What differs:
//!
//! * **One version per read.** The object's size and ETag are taken when
//!   it is opened; every ranged GET is conditional on that ETag
//!   (`If-Match`). An object overwritten while it is read gives an error
//!   naming the URL — never bytes of two versions as success.
//!   [`File::refresh`](crate::File::refresh) looks again (a HEAD) and
//!   adopts the version it finds, dropping what was cached.
//! * **Reads are requests.** A planned read (a run of pages) is one ranged
//!   GET, on the engine's own asynchronous runtime; the engine's remote
//!   backend keeps up to `depth` of them in flight (the caller needs no
//!   executor).
//! * **Failures.** object_store retries 5xx, 503 SlowDown, timeouts and
//!   connections reset, with backoff, for at most [`RETRY_TIMEOUT`]; a
//!   read that still fails gets an error naming the URL and the range.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::io::{Completion, ReadOp, ReadSource, Version};

mod check;
mod depth;
mod evict;
mod probe;
mod runtime;
mod tier;
mod tiered;

pub use probe::{probe, Probe};
pub(crate) use runtime::Runtime;

use tier::TierObject;
pub use tier::{DiskTier, TierStats, TierUsage, CHUNK as TIER_CHUNK};

/// How many times a failed request is tried again.
pub(crate) const MAX_RETRIES: usize = 5;
/// No request is retried after this long from its first try: a read that
/// cannot be served fails in bounded time.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(20);
/// One request's limit, from connecting to its last byte.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Connecting's limit.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What an object's reads cost, counted as they go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Ranged GETs completed (each after its retries), and HEADs.
    pub requests: u64,
    /// Bytes the GETs brought back.
    pub bytes_fetched: u64,
    /// Requests that failed after their retries.
    pub failed: u64,
    /// Sum of the GETs' first-byte times (request sent to response
    /// headers), in microseconds: divided by `requests`, the mean.
    pub first_byte_us_total: u64,
    /// The most GETs in flight at once.
    pub peak_in_flight: u64,
    /// With a disk tier ([`DiskTier`]): bytes read from it rather than
    /// fetched (whole chunks, some beyond what was asked).
    pub tier_bytes: u64,
    /// Chunks found in the tier, whole and matching their checksums.
    pub tier_chunks_hit: u64,
    /// Chunks the tier lacked (or held damaged), fetched from the store.
    pub tier_chunks_missed: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicU64,
    first_byte_us: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
    tier_bytes: AtomicU64,
    tier_chunks_hit: AtomicU64,
    tier_chunks_missed: AtomicU64,
    /// When the store last confirmed the version being read: the send time
    /// of the latest HEAD, or of a GET held to its ETag, that succeeded.
    confirmed: Mutex<Option<Instant>>,
}

impl Counters {
    /// The store confirmed the version at `at` (a request sent then
    /// succeeded).
    fn confirm(&self, at: Instant) {
        let mut c = self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        *c = Some(c.map_or(at, |was| was.max(at)));
    }
}

/// An object opened for reading: a store, a path in it, and the version
/// (size and ETag) its reads are held to.
pub struct ObjectSource {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    runtime: Arc<Runtime>,
    /// (size, ETag) of the version being read, and its chunks in the
    /// disk tier (one lock: a read never pairs a version with another's
    /// chunks).
    version: Mutex<(u64, Option<String>, Option<Arc<TierObject>>)>,
    /// The engine's disk tier, and the name the object's versions are
    /// kept under there (the store's and the URL).
    tier: Option<(Arc<DiskTier>, String)>,
    counters: Arc<Counters>,
    /// The last request's failure, for the readers who get it as an errno
    /// from the cache.
    last_error: Arc<Mutex<Option<String>>>,
}

/// One ranged GET, with what it needs to run on the runtime alone.
#[derive(Clone)]
struct Request {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    etag: Option<String>,
    range: std::ops::Range<u64>,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
    depth: Arc<depth::Depth>,
    /// The version's chunks in the disk tier, if the engine has one.
    tier: Option<Arc<TierObject>>,
}

/// Where a response's body goes.
enum Body<'a> {
    /// Into memory of its own (a read into the caller's buffer copies it).
    Collect(&'a mut Vec<u8>),
    /// Chunk by chunk into the read's buffer (the cache's frames), as it
    /// arrives: no second copy of a window in memory.
    Into(&'a mut crate::io::IoBuf),
}

impl Request {
    /// The range into `body`: through the disk tier where the engine has
    /// one ([`Request::run_tiered`]), else fetched.
    async fn run(self, body: Body<'_>) -> io::Result<usize> {
        match self.tier.clone() {
            Some(tier) => self.run_tiered(tier, body).await,
            None => self.fetch(body).await,
        }
    }

    /// The range fetched from the store into `body`; the bytes received.
    /// A failure comes back as an errno for the cache to keep, its
    /// message kept for [`ObjectSource::explain`].
    async fn fetch(self, mut body: Body<'_>) -> io::Result<usize> {
        // The engine's limit on requests in flight.
        let _permit = self.depth.acquire().await;
        let c = &self.counters;
        let now = c.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        c.peak.fetch_max(now, Ordering::Relaxed);
        let (offset, end) = (self.range.start, self.range.end);
        let want = (end - offset) as usize;
        let opts = GetOptions {
            if_match: self.etag.clone(),
            range: Some(GetRange::Bounded(self.range.clone())),
            ..GetOptions::default()
        };
        let started = Instant::now();
        let r = async {
            let got = self.store.get_opts(&self.path, opts).await?;
            let first_byte = started.elapsed();
            let mut stream = got.into_stream();
            let mut at = 0usize;
            while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
                let chunk = chunk?;
                // Never past the range asked for: more is the server's
                // error, found below.
                let room = want.saturating_sub(at);
                let part = &chunk[..chunk.len().min(room)];
                match &mut body {
                    Body::Collect(v) => v.extend_from_slice(part),
                    Body::Into(buf) => {
                        buf.fill_at(at, part);
                    }
                }
                at += chunk.len();
            }
            Ok::<_, object_store::Error>((at, first_byte))
        }
        .await;
        c.in_flight.fetch_sub(1, Ordering::Relaxed);
        c.requests.fetch_add(1, Ordering::Relaxed);
        let checked = match r {
            Ok((got, first_byte)) => {
                self.depth.completed(got as u64, first_byte);
                if self.etag.is_some() {
                    c.confirm(started);
                }
                c.first_byte_us
                    .fetch_add(first_byte.as_micros() as u64, Ordering::Relaxed);
                c.bytes.fetch_add(got as u64, Ordering::Relaxed);
                if got == want {
                    Ok(got)
                } else {
                    // A server that answers a range with other bytes than
                    // asked: never taken as data.
                    Err(io::Error::other(format!(
                        "{}: asked for bytes {offset}..{end}, the server sent {got} bytes",
                        self.url,
                    )))
                }
            }
            Err(e) => {
                let e = io_error(&self.url, e);
                Err(io::Error::new(
                    e.kind(),
                    format!("{e} (bytes {offset}..{end})"),
                ))
            }
        };
        checked.map_err(|e| {
            c.failed.fetch_add(1, Ordering::Relaxed);
            let errno = match e.kind() {
                io::ErrorKind::StaleNetworkFileHandle => libc::ESTALE,
                io::ErrorKind::NotFound => libc::ENOENT,
                _ => libc::EIO,
            };
            *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            io::Error::from_raw_os_error(errno)
        })
    }
}

impl std::fmt::Debug for ObjectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectSource")
            .field("url", &self.url)
            .finish()
    }
}

/// Whether `s` names an object by a URL ahead reads (`s3://`, `s3a://`,
/// `http://`, `https://`) rather than a local path.
pub fn is_url(s: &str) -> bool {
    ["s3://", "s3a://", "http://", "https://"]
        .iter()
        .any(|p| s.len() > p.len() && s[..p.len()].eq_ignore_ascii_case(p))
}

/// The store and the object's path a URL names: `s3://bucket/key` (and
/// `s3a://`) with the `AWS_*` environment (credentials, region,
/// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`), or `http(s)://host/path`.
pub fn store_for_url(url: &str) -> io::Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    store_for_url_with(url, &[])
}

/// [`store_for_url`] with `options` over the environment: object_store's
/// configuration keys and values (for S3 `endpoint`, `access_key_id`,
/// `secret_access_key`, `region`, `allow_http`, … with or without `aws_`;
/// for HTTP its client's keys). An unknown key is an `InvalidInput` error.
pub fn store_for_url_with(
    url: &str,
    options: &[(String, String)],
) -> io::Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
    let retry = object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    };
    let client = object_store::ClientOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(CONNECT_TIMEOUT);
    let key = parsed.path().trim_start_matches('/');
    let path = ObjectPath::from_url_path(key).map_err(|e| invalid(format!("{url}: {e}")))?;
    let store: Arc<dyn ObjectStore> = match parsed.scheme() {
        "s3" | "s3a" => {
            // The standard environment over ahead's timeouts (as
            // AmazonS3Builder::from_env reads it; from_env then
            // with_client_options would drop AWS_ALLOW_HTTP and the like).
            let mut b = object_store::aws::AmazonS3Builder::new().with_client_options(client);
            for (k, v) in std::env::vars() {
                // An empty variable is taken as unset, as AWS's own tools
                // take it (`AWS_ENDPOINT_URL=` once made object_store
                // panic on its first request).
                if v.is_empty() {
                    continue;
                }
                if let Some(key) = k
                    .starts_with("AWS_")
                    .then(|| k.to_ascii_lowercase().parse().ok())
                    .flatten()
                {
                    b = b.with_config(key, v);
                }
            }
            for (key, v) in parse_options(url, options, "an S3 option")? {
                b = b.with_config(key, v);
            }
            let b = b.with_url(url);
            let bucket = parsed.host_str().unwrap_or_default();
            check::s3_base(&b, bucket).map_err(|why| invalid(format!("{url}: {why}")))?;
            let s3 = b
                .with_retry(retry)
                .build()
                .map_err(|e| invalid(format!("{url}: {e}")))?;
            Arc::new(s3)
        }
        "http" | "https" => {
            let origin = parsed.origin().ascii_serialization();
            let mut b = object_store::http::HttpBuilder::new()
                .with_url(origin)
                .with_retry(retry)
                .with_client_options(client.with_allow_http(true));
            for (key, v) in parse_options(url, options, "an HTTP client option")? {
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(|e| invalid(format!("{url}: {e}")))?)
        }
        other => {
            return Err(invalid(format!(
                "{url}: the scheme {other}:// is not one ahead reads (s3://, http://, https://)"
            )))
        }
    };
    Ok((store, path))
}

/// `options`' keys as a store's configuration keys (`K`), any case; a key
/// object_store does not know is an `InvalidInput` error naming `what` it
/// should have been.
fn parse_options<'a, K: std::str::FromStr>(
    url: &str,
    options: &'a [(String, String)],
    what: &str,
) -> io::Result<Vec<(K, &'a str)>> {
    options
        .iter()
        .map(|(k, v)| {
            let key = k
                .to_ascii_lowercase()
                .parse()
                .map_err(|_| invalid(format!("{url}: '{k}' is not {what} object_store knows")))?;
            Ok((key, v.as_str()))
        })
        .collect()
}

/// A version's tag from its ETag.
fn etag_tag(etag: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(etag.as_bytes())
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

/// An object_store error as an `io::Error` that names the URL: a missing
/// object is `NotFound`, a changed one says so.
fn io_error(url: &str, e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => {
            io::Error::new(io::ErrorKind::NotFound, format!("{url}: no such object"))
        }
        object_store::Error::Precondition { .. } => io::Error::new(
            io::ErrorKind::StaleNetworkFileHandle,
            format!("{url}: {CHANGED}"),
        ),
        e @ (object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. }) => {
            io::Error::new(io::ErrorKind::PermissionDenied, format!("{url}: {e}"))
        }
        other => io::Error::other(format!("{url}: {other}")),
    }
}

/// What a read of an object overwritten since it was opened meets.
const CHANGED: &str = "the object changed while it was read (its ETag no longer matches); \
                       refresh or open it again";

impl ObjectSource {
    /// Opens `path` in `store`, `url` naming it in errors; its chunks kept
    /// in `tier` if there is one. Its size and ETag are a HEAD's, or
    /// `listed` (what a listing gave) without one: reads are held to that
    /// ETag either way.
    pub(crate) fn open(
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        url: String,
        runtime: Arc<Runtime>,
        tier: Option<Arc<DiskTier>>,
        listed: Option<(u64, String)>,
    ) -> io::Result<ObjectSource> {
        let tier = tier.map(|t| (t, format!("{store}\0{url}")));
        let source = ObjectSource {
            store,
            path,
            url,
            runtime,
            tier,
            version: Mutex::new((0, None, None)),
            counters: Arc::default(),
            last_error: Arc::default(),
        };
        match listed {
            Some((size, etag)) => {
                source.settle(size, Some(etag));
            }
            None => {
                source.look()?;
            }
        }
        Ok(source)
    }

    /// The URL (or the caller's name for the object).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The size of the version being read.
    pub fn size(&self) -> u64 {
        self.version.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The ETag of the version being read, where the store gave one.
    pub fn etag(&self) -> Option<String> {
        self.version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// The counters so far.
    pub fn stats(&self) -> RemoteStats {
        let c = &self.counters;
        RemoteStats {
            requests: c.requests.load(Ordering::Relaxed),
            bytes_fetched: c.bytes.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            first_byte_us_total: c.first_byte_us.load(Ordering::Relaxed),
            peak_in_flight: c.peak.load(Ordering::Relaxed),
            tier_bytes: c.tier_bytes.load(Ordering::Relaxed),
            tier_chunks_hit: c.tier_chunks_hit.load(Ordering::Relaxed),
            tier_chunks_missed: c.tier_chunks_missed.load(Ordering::Relaxed),
        }
    }

    /// The version the last look found (at open, or the latest refresh),
    /// without asking the store again.
    pub(crate) fn known_version(&self) -> Version {
        let v = self.version.lock().unwrap_or_else(|p| p.into_inner());
        Version {
            size: v.0,
            tag: v.1.as_deref().map_or(0, etag_tag),
        }
    }

    /// The ETag its reads are held to, and when the store last confirmed
    /// it (see [`crate::File::confirmed`]).
    pub(crate) fn confirmed(&self) -> Option<(String, Instant)> {
        let etag = self
            .version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()?;
        let at = (*self
            .counters
            .confirmed
            .lock()
            .unwrap_or_else(|p| p.into_inner()))?;
        Some((etag, at))
    }

    /// A HEAD: the object as it is now, which its reads are held to from
    /// here on.
    fn look(&self) -> io::Result<Version> {
        let (store, path, url) = (self.store.clone(), self.path.clone(), self.url.clone());
        let sent = Instant::now();
        let meta = self
            .runtime
            .run(async move { store.head(&path).await })
            .and_then(|r| r.map_err(|e| io_error(&url, e)));
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let meta = meta.inspect_err(|_| {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        })?;
        let version = self.settle(meta.size, meta.e_tag);
        self.counters.confirm(sent);
        Ok(version)
    }

    /// Holds reads to the version of `size` bytes and `e_tag` from here on
    /// (its chunks in the tier found or made).
    fn settle(&self, size: u64, e_tag: Option<String>) -> Version {
        let tag = e_tag.as_deref().map_or(0, etag_tag);
        let mut v = self.version.lock().unwrap_or_else(|p| p.into_inner());
        if v.2.is_none() || v.0 != size || v.1 != e_tag {
            // Only a version with an ETag is kept: under the same name,
            // another one's bytes could follow.
            v.2 = match (&self.tier, &e_tag) {
                (Some((tier, name)), Some(etag)) => tier.object(name, etag, size),
                _ => None,
            };
        }
        v.0 = size;
        v.1 = e_tag;
        Version { size, tag }
    }

    /// One ranged GET of `len` bytes at `offset` (clipped to the object's
    /// end), conditional on the version being read, waited for on this
    /// thread.
    fn get(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        match self.request(offset, len) {
            Some(req) => self
                .runtime
                .run(async move {
                    let mut v = Vec::with_capacity((req.range.end - req.range.start) as usize);
                    req.run(Body::Collect(&mut v)).await.map(|_| v)
                })
                .and_then(|r| r),
            None => Ok(Vec::new()),
        }
    }

    /// The request for `len` bytes at `offset`, `None` past the end.
    fn request(&self, offset: u64, len: u64) -> Option<Request> {
        let (size, etag, tier) = self
            .version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let end = offset.saturating_add(len).min(size);
        (offset < end).then(|| Request {
            store: self.store.clone(),
            path: self.path.clone(),
            url: self.url.clone(),
            etag,
            range: offset..end,
            counters: self.counters.clone(),
            last_error: self.last_error.clone(),
            depth: self.runtime.depth.clone(),
            tier,
        })
    }
}

impl ObjectSource {
    /// `e`, a read's failure as the cache handed it on (an errno), with
    /// what the object's request met.
    pub(crate) fn explain(&self, e: io::Error) -> io::Error {
        if e.get_ref().is_some() {
            return e;
        }
        match e.raw_os_error() {
            Some(libc::ESTALE) => io::Error::new(
                io::ErrorKind::StaleNetworkFileHandle,
                format!("{}: {CHANGED}", self.url),
            ),
            Some(_) => match self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
            {
                Some(last) => io::Error::new(e.kind(), last),
                None => e,
            },
            None => e,
        }
    }
}

impl ReadSource for ObjectSource {
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    fn read_at(&self, buf: &mut [u8], offset: u64, flags: i32) -> io::Result<usize> {
        self.read_parts(&mut [buf], offset, flags)
    }

    fn read_parts(&self, parts: &mut [&mut [u8]], offset: u64, _flags: i32) -> io::Result<usize> {
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let got = self.get(offset, total)?;
        let mut at = 0;
        for part in parts.iter_mut() {
            let n = part.len().min(got.len() - at);
            part[..n].copy_from_slice(&got[at..at + n]);
            at += n;
            if at == got.len() {
                break;
            }
        }
        Ok(got.len())
    }

    fn start(&self, mut op: ReadOp, done: Completion) -> Result<(), (ReadOp, Completion)> {
        let Some(req) = self.request(op.offset, op.len as u64) else {
            done(op, Ok(0));
            return Ok(());
        };
        self.runtime.handle().spawn(async move {
            let r = req.run(Body::Into(&mut op.buf)).await;
            // The completion files the pages under the cache's lock: a
            // short step, on this worker.
            done(op, r);
        });
        Ok(())
    }

    fn version(&self) -> io::Result<Version> {
        self.look()
    }

    fn by_request(&self) -> bool {
        true
    }

    /// The published figures of an object store
    /// ([`crate::ra::DeviceCost::object_store`]), with the engine's depth
    /// of requests in flight.
    fn cost(&self, page_size: u64) -> Option<crate::ra::DeviceCost> {
        Some(crate::ra::DeviceCost::object_store(
            page_size,
            self.runtime.depth() as u64,
        ))
    }
}

#[cfg(test)]
mod tests;
