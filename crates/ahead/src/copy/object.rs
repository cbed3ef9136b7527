//! Copies to and from objects in a store (`s3://bucket/key`,
//! `http(s)://…`): a download is the local copy with a source that is
//! read by ranged GETs, an upload is a multipart upload of a local file.
//!
//! A download is everything a local copy is — written under a temporary
//! name and renamed only when complete, resumable from its journal,
//! neutral to the page cache, verified where asked — with its chunks (8 MiB,
//! one GET each) fetched by `depth` threads at once, each GET conditional
//! on the ETag the object had when the copy began: an object overwritten
//! during the copy ends it with an error, and a resumed copy continues
//! only if the object still has the same URL and ETag. Verification does
//! not fetch the object twice: the chunks' XXH3 sums are taken as they
//! arrive and compared with the destination read back from the disk.
//!
//! An upload reads the file once, neutrally to the cache, and sends it as
//! one PUT (up to one chunk) or as a multipart upload of 8 MiB parts,
//! `depth` at once; a store makes the object visible only when the upload
//! completes, and a failed upload is aborted, so no half-written object
//! appears under the name. It is checked by a HEAD (the size) and, where
//! asked, by reading the object back and comparing every part's XXH3 sum
//! with the file's.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use super::place::{self, Source};
use super::run::copy_to;
use super::source::SrcReader;
use super::verify::digest_chunk_sums;
use super::{plan::check_options, refused, CopyOptions, CopyReport, Progress, OBJECT_CHUNK};
use crate::io::{AlignedBuf, ReadSource};
use crate::remote::{store_for_url, ObjectSource, Runtime};
use crate::{Error, Result};

/// Parts of a multipart upload at most (S3's limit): a larger file gets
/// larger parts.
const MAX_PARTS: u64 = 10_000;

fn remote_err<'u>(
    op: &'static str,
    url: &'u str,
    at: Option<u64>,
) -> impl FnOnce(std::io::Error) -> Error + 'u {
    move |e| Error::io(op, url.as_ref(), at, e)
}

/// Copies the object `url` names (`s3://bucket/key` with the standard
/// `AWS_*` environment, `http(s)://…`) to `dst` (a file, or a directory to
/// copy into), as [`super::copy`] copies a file. `opts.preserve` is
/// refused: an object has no mode or times.
pub fn download(
    url: &str,
    dst: &Path,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    let (store, path) = store_for_url(url).map_err(remote_err("open", url, None))?;
    download_object(store, path, url, dst, opts, progress)
}

/// [`download`] of `path` in a store the caller configured; `name` names
/// it in errors, the report and the journal (a resumed copy must name the
/// same object).
pub fn download_object(
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    name: &str,
    dst: &Path,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    check_options(opts)?;
    if opts.preserve {
        return Err(refused(
            name.as_ref(),
            "an object has no mode or times to preserve",
        ));
    }
    let runtime = Runtime::new(opts.depth)
        .map_err(|e| Error::io("start the remote runtime", name.as_ref(), None, e))?;
    let object = ObjectSource::open(store, path, name.to_owned(), Arc::new(runtime), None, None)
        .map_err(remote_err("open", name, None))?;
    let object = Arc::new(object);
    let size = object.size();
    let source = Source::object(object, size);
    let target = place::resolve(&source, dst)?;
    let mut report = copy_to(source, target, opts, progress)?;
    report.totals.src_cached_before = None;
    report.totals.src_cached_after = None;
    Ok(report)
}

/// Uploads the regular file `src` to the object `url` names, replacing
/// it. The report's `checksum` (with `opts.verify`) is the digest of the
/// parts' XXH3 sums, equal on both sides.
pub fn upload(
    src: &Path,
    url: &str,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    let (store, path) = store_for_url(url).map_err(remote_err("open", url, None))?;
    upload_object(src, store, path, url, opts, progress)
}

/// [`upload`] to `path` in a store the caller configured; `name` names it
/// in errors and the report.
pub fn upload_object(
    src: &Path,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    name: &str,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    let url = name;
    check_options(opts)?;
    let started = Instant::now();
    let source = Source::open(src, false)?;
    let (Some(size), Some((file, _))) = (source.size(), source.local()) else {
        return Err(refused(
            src,
            "only a regular file can be uploaded (not a stream or device)",
        ));
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(refused(
            src,
            "only a regular file can be uploaded (not a stream or device)",
        ));
    }
    let runtime = Arc::new(
        Runtime::new(opts.depth)
            .map_err(|e| Error::io("start the remote runtime", url.as_ref(), None, e))?,
    );
    let part = opts
        .chunk
        .unwrap_or(OBJECT_CHUNK)
        .max(size.div_ceil(MAX_PARTS))
        // S3's smallest part but the last.
        .max(5 << 20);
    let cached_before = super::dest::cached_pages(file);
    let reader = SrcReader::new(file, src, opts);
    let up = Upload {
        store,
        path,
        url,
        runtime: &runtime,
        part,
        depth: opts.depth.max(1),
    };
    let sums = up.send(&reader, size, opts, progress)?;
    let mut report = CopyReport {
        totals: super::Totals {
            bytes: size,
            data_bytes: size,
            src_cached_before: cached_before,
            ..Default::default()
        },
        method: if size > part { "multipart" } else { "put" },
        read_path: reader.used.names(),
        write_path: "put".into(),
        dst: url.into(),
        ..CopyReport::default()
    };
    // The store has it: its size, and its bytes where asked.
    let object = ObjectSource::open(
        up.store.clone(),
        up.path.clone(),
        url.to_owned(),
        runtime,
        None,
        None,
    )
    .map_err(remote_err("check", url, None))?;
    if object.size() != size {
        return Err(Error::Mismatch {
            path: url.into(),
            src: format!("{size} bytes"),
            dst: format!("{} bytes", object.size()),
        });
    }
    if opts.verify {
        let src = digest_chunk_sums(sums.into_iter());
        let dst = object_sums(&object, size, part, opts.depth)?;
        if src != dst {
            return Err(Error::Mismatch {
                path: url.into(),
                src,
                dst,
            });
        }
        report.checksum = Some(src);
    }
    report.totals.src_cached_after = super::dest::cached_pages(file);
    report.totals.elapsed = started.elapsed();
    Ok(report)
}

/// An upload under way.
struct Upload<'a> {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: &'a str,
    runtime: &'a Arc<Runtime>,
    part: u64,
    depth: usize,
}

impl Upload<'_> {
    /// Reads the file part by part and sends it; each part's XXH3 sum.
    fn send(
        &self,
        reader: &SrcReader<'_>,
        size: u64,
        opts: &CopyOptions,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Vec<u64>> {
        let url = self.url;
        let read = |at: u64| -> Result<Vec<u8>> {
            if super::cancelled(opts) {
                return Err(super::interrupted(url.as_ref()));
            }
            let n = (size - at).min(self.part) as usize;
            let mut buf = AlignedBuf::new(n.max(1), 4096);
            reader.read_exact_at(&mut buf.as_mut_slice()[..n], at)?;
            Ok(buf.as_slice()[..n].to_vec())
        };
        if size <= self.part {
            let bytes = read(0)?;
            let sum = xxhash_rust::xxh3::xxh3_64(&bytes);
            let (store, path) = (self.store.clone(), self.path.clone());
            self.runtime
                .run(async move { store.put(&path, PutPayload::from(bytes)).await })
                .and_then(|r| r.map_err(std::io::Error::other))
                .map_err(remote_err("put", url, None))?;
            progress(Progress {
                done: size,
                total: Some(size),
            });
            return Ok(vec![sum]);
        }
        let (store, path) = (self.store.clone(), self.path.clone());
        let upload = self
            .runtime
            .run(async move { store.put_multipart(&path).await })
            .and_then(|r| r.map_err(std::io::Error::other))
            .map_err(remote_err("start the upload of", url, None))?;
        let mut w = Some(WriteMultipart::new_with_chunk_size(
            upload,
            self.part as usize,
        ));
        let mut sums = Vec::new();
        let mut at = 0;
        let failed = loop {
            if at >= size {
                break None;
            }
            let bytes = match read(at) {
                Ok(b) => b,
                Err(e) => break Some(e),
            };
            sums.push(xxhash_rust::xxh3::xxh3_64(&bytes));
            let Some(mut writer) = w.take() else {
                break Some(refused(url.as_ref(), "the upload was lost"));
            };
            let depth = self.depth;
            // Waits until fewer than `depth` parts are in flight, then
            // starts this one.
            let r = self.runtime.run(async move {
                let r = writer.wait_for_capacity(depth).await;
                if r.is_ok() {
                    writer.put(bytes.into());
                }
                (writer, r)
            });
            match r {
                Ok((writer, Ok(()))) => w = Some(writer),
                Ok((writer, Err(e))) => {
                    w = Some(writer);
                    break Some(Error::io(
                        "put",
                        url.as_ref(),
                        Some(at),
                        std::io::Error::other(e),
                    ));
                }
                Err(e) => break Some(Error::io("put", url.as_ref(), Some(at), e)),
            }
            at += self.part;
            progress(Progress {
                done: at.min(size),
                total: Some(size),
            });
        };
        let Some(writer) = w else {
            return Err(failed.unwrap_or_else(|| refused(url.as_ref(), "the upload was lost")));
        };
        if let Some(e) = failed {
            // Nothing appears under the name: the parts sent are dropped.
            let _ = self.runtime.run(async move { writer.abort().await });
            return Err(e);
        }
        self.runtime
            .run(async move { writer.finish().await })
            .and_then(|r| r.map_err(std::io::Error::other))
            .map_err(remote_err("upload", url, None))?;
        Ok(sums)
    }
}

/// The digest of an object's `part`-sized pieces' XXH3 sums, fetched by
/// `depth` threads at once.
fn object_sums(object: &ObjectSource, size: u64, part: u64, depth: usize) -> Result<String> {
    let parts = size.div_ceil(part) as usize;
    let sums = Mutex::new(vec![0u64; parts]);
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..depth.clamp(1, parts.max(1)) {
            s.spawn(|| {
                let mut buf = vec![0u8; part as usize];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= parts || failed.lock().is_ok_and(|f| f.is_some()) {
                        return;
                    }
                    let at = i as u64 * part;
                    let n = (size - at).min(part) as usize;
                    match object.read_at(&mut buf[..n], at, 0) {
                        Ok(got) if got == n => {
                            let h = xxhash_rust::xxh3::xxh3_64(&buf[..n]);
                            sums.lock().unwrap_or_else(|p| p.into_inner())[i] = h;
                        }
                        Ok(got) => {
                            let e = std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                format!("the object ended at {}", at + got as u64),
                            );
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(Error::io("read back", object.url().as_ref(), Some(at), e));
                        }
                        Err(e) => {
                            let e = object.explain(e);
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(Error::io("read back", object.url().as_ref(), Some(at), e));
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let sums = sums.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(digest_chunk_sums(sums.into_iter()))
}
