//! One copy from an open source to a resolved target: opening the
//! destination (a block device in place, or a temporary file beside the
//! name, resumed from its journal where asked), writing it, and finishing
//! (durable, dropped from the cache, verified, and only then named).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use rustix::fs::AtFlags;

use super::dest::{cached_pages, preserve, DstWriter, TmpGuard};
use super::journal::{self, ChunkSum, Header, Journal, SourceId, StateDir};
use super::place::{self, Source, SrcKind, Target};
use super::plan::{data_extents, interleave, plan, tuned_chunk, MAX_CHUNK_BYTES};
use super::source::{source_id, Reader, SrcReader};
use super::stream::copy_stream;
use super::verify::{checksum, chunk_sums, digest_chunk_sums, CHUNK_SUMS};
use super::worker::{copy_worker, Shared};
use super::{
    io_err, refused, CacheMode, CopyOptions, CopyReport, Progress, OBJECT_CHUNK, OBJECT_MODE,
    ZERO_BLOCK,
};
use crate::{residency, sys, Error, Result};

/// The destination as the copy writes it.
pub(super) struct Opened<'a> {
    /// The open file: the temporary file beside the destination, or the
    /// block device.
    file: File,
    /// Where `file` is, for messages.
    path: PathBuf,
    /// Removes the temporary file unless the copy finishes (none for a
    /// block device).
    guard: Option<TmpGuard<'a>>,
    /// Chunks an interrupted copy finished, with what they held.
    done_chunks: HashMap<u64, ChunkSum>,
}

/// Copies an open source to a resolved target: opens the destination,
/// writes it, then makes it durable, verifies it and gives it its name.
pub(super) fn copy_to(
    source: Source,
    target: Target,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    let started = Instant::now();
    let size = source.size();
    if opts.resume && matches!(source.kind, SrcKind::Block(_)) && !opts.verify {
        return Err(refused(
            &source.path,
            "a block device's contents can change with nothing to show it: resume its copy \
             only with --verify",
        ));
    }
    let chunk = opts
        .chunk
        .unwrap_or_else(|| source.local().map_or(OBJECT_CHUNK, |(_, m)| tuned_chunk(m)))
        .clamp(ZERO_BLOCK, MAX_CHUNK_BYTES)
        .div_ceil(ZERO_BLOCK)
        * ZERO_BLOCK;
    let mut report = CopyReport::default();
    report.totals.src_cached_before = match source.local() {
        Some((file, _)) if size.is_some() => cached_pages(file),
        _ => None,
    };
    let state = match &target {
        Target::InDir { .. } => Some(StateDir::open()),
        Target::Block { .. } => None,
    };
    let opened = match &target {
        Target::Block { file, path } => open_block(file, path, size)?,
        Target::InDir { dir, name, path } => {
            open_in_dir(&source, dir, name, path, state.as_ref(), chunk, opts)?
        }
    };
    report.resumable = opened.guard.as_ref().is_some_and(|g| g.resumable);
    report.dst = match &target {
        Target::Block { path, .. } | Target::InDir { path, .. } => path.clone(),
    };
    let src_sum = write(
        &source,
        &target,
        &opened,
        chunk,
        opts,
        progress,
        &mut report,
    )?;
    finish(
        &source,
        &target,
        opened,
        (src_sum, chunk),
        opts,
        &mut report,
    )?;
    report.totals.elapsed = started.elapsed();
    Ok(report)
}

/// A block device destination, written in place: it must hold the source.
pub(super) fn open_block(file: &File, path: &Path, size: Option<u64>) -> Result<Opened<'static>> {
    let dev_size = rustix::fs::seek(file, rustix::fs::SeekFrom::End(0))
        .map_err(|e| Error::io("seek", path, None, e.into()))?;
    if let Some(size) = size {
        if size > dev_size {
            return Err(refused(
                path,
                format!("the device holds {dev_size} bytes, the source has {size}"),
            ));
        }
    }
    let f = file.try_clone().map_err(io_err("dup", path, None))?;
    Ok(Opened {
        file: f,
        path: path.to_path_buf(),
        guard: None,
        done_chunks: HashMap::new(),
    })
}

/// A destination in a directory: a new temporary file beside it (or, on
/// `--resume`, the one an interrupted copy of the same source left, with
/// the chunks its journal says are done), under the journal's lock.
pub(super) fn open_in_dir<'a>(
    source: &Source,
    dir: &'a OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
    state: Option<&'a std::result::Result<StateDir, String>>,
    chunk: u64,
    opts: &CopyOptions,
) -> Result<Opened<'a>> {
    let size = source.size();
    let state_dir = state.and_then(|s| s.as_ref().ok());
    let mut done_chunks = HashMap::new();
    let dir_st = rustix::fs::fstat(dir).map_err(|e| Error::io("stat", path, None, e.into()))?;
    let dir_id = (dir_st.st_dev, dir_st.st_ino);
    let journal = lock_journal(state, dir_id, name, path, opts)?;
    let src_id = source_id(source, chunk);
    let resumed = resumable_tmp(
        journal.as_ref(),
        dir,
        dir_id,
        name,
        path,
        src_id.as_ref(),
        opts,
    )?;
    let (f, tmp_name) = match resumed {
        Some((f, tmp_name, done)) => {
            done_chunks = done;
            (f, tmp_name)
        }
        None => new_tmp(
            source,
            dir,
            dir_id,
            name,
            path,
            journal.as_ref(),
            src_id.clone(),
            chunk,
        )?,
    };
    let tmp_path = path.with_file_name(place::os(&tmp_name));
    let resumable = journal.is_some() && src_id.is_some();
    let guard = TmpGuard {
        resumable,
        dir,
        name: tmp_name,
        journal,
        state: state_dir,
        armed: true,
        cancel: opts.cancel.clone(),
    };
    if let Some(size) = size {
        f.set_len(size)
            .map_err(io_err("truncate", &tmp_path, None))?;
    }
    Ok(Opened {
        file: f,
        path: tmp_path,
        guard: Some(guard),
        done_chunks,
    })
}

/// Takes the journal's lock for the destination `name` in the directory
/// `dir_id`: `None` without a private state directory (then no resume).
fn lock_journal(
    state: Option<&std::result::Result<StateDir, String>>,
    dir_id: (u64, u64),
    name: &std::ffi::OsStr,
    path: &Path,
    opts: &CopyOptions,
) -> Result<Option<Journal>> {
    Ok(match state {
        Some(Ok(st)) => match Journal::lock(st, dir_id, place::bytes(name)) {
            Ok(Some(j)) => Some(j),
            Ok(None) => {
                return Err(refused(
                    path,
                    "another ahead copy to this destination is under way",
                ))
            }
            Err(e) => return Err(Error::io("open journal", st.path(), None, e)),
        },
        Some(Err(why)) if opts.resume => {
            return Err(refused(
                path,
                format!("cannot resume: no private journal directory ({why})"),
            ))
        }
        _ => None,
    })
}

/// An interrupted copy's temporary file, its name, and its finished chunks.
type Resumed = (File, Vec<u8>, HashMap<u64, ChunkSum>);

/// What an interrupted copy to the same name left, per its journal: with
/// `--resume` and the same source, its temporary file, name and finished
/// chunks; without, the file is removed (a fresh copy clears away what an
/// earlier one left).
fn resumable_tmp(
    journal: Option<&Journal>,
    dir: &OwnedFd,
    dir_id: (u64, u64),
    name: &std::ffi::OsStr,
    path: &Path,
    src_id: Option<&SourceId>,
    opts: &CopyOptions,
) -> Result<Option<Resumed>> {
    let Some(j) = journal else { return Ok(None) };
    let Some(l) = j.load().map_err(io_err("read", j.path(), None))? else {
        return Ok(None);
    };
    let ours = l.header.dir == dir_id && l.header.name == place::bytes(name);
    let old_tmp = place::open_tmp(dir, place::os(&l.header.tmp_name))
        .ok()
        .filter(|f| {
            f.metadata()
                .is_ok_and(|m| (m.dev(), m.ino()) == l.header.tmp)
        });
    if opts.resume && ours && src_id.is_some() {
        if Some(&l.header.src) != src_id {
            return Err(refused(
                path,
                "the interrupted copy was of another source, or the source changed \
                 since (or another --chunk was used); run without --resume to start \
                 over",
            ));
        }
        return Ok(old_tmp.map(|f| (f, l.header.tmp_name, l.done)));
    }
    if ours && old_tmp.is_some() {
        let _ = rustix::fs::unlinkat(dir, place::os(&l.header.tmp_name), AtFlags::empty());
    }
    Ok(None)
}

/// A new temporary file beside the destination (O_EXCL under a random
/// name, the source's permission bits), recorded in the journal.
#[allow(clippy::too_many_arguments)]
fn new_tmp(
    source: &Source,
    dir: &OwnedFd,
    dir_id: (u64, u64),
    name: &std::ffi::OsStr,
    path: &Path,
    journal: Option<&Journal>,
    src_id: Option<SourceId>,
    chunk: u64,
) -> Result<(File, Vec<u8>)> {
    let token = sys::random_token().map_err(io_err("getrandom", path, None))?;
    let tmp_name = journal::tmp_name(place::bytes(name), &token);
    let tmp_path = path.with_file_name(place::os(&tmp_name));
    let f = place::create_tmp(
        dir,
        place::os(&tmp_name),
        source
            .local()
            .map_or(OBJECT_MODE, |(_, m)| place::copy_mode(m, false))
            & 0o777,
    )
    .map_err(io_err("create", &tmp_path, None))?;
    if let Some(j) = &journal {
        let m = f.metadata().map_err(io_err("stat", &tmp_path, None))?;
        let header = Header {
            token,
            dir: dir_id,
            name: place::bytes(name).to_vec(),
            tmp_name: tmp_name.clone(),
            tmp: (m.dev(), m.ino()),
            src: src_id.unwrap_or(SourceId::blank(0, chunk)),
        };
        j.start(&header).map_err(io_err("write", j.path(), None))?;
    }
    Ok((f, tmp_name))
}

/// Writes the destination: a reflink where it can, else the chunks of a
/// sized source by `opts.depth` workers, else a stream. Returns the
/// source's checksum where the writing computed one.
pub(super) fn write(
    source: &Source,
    target: &Target,
    opened: &Opened<'_>,
    chunk: u64,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
    report: &mut CopyReport,
) -> Result<Option<String>> {
    let size = source.size();
    let stream = size.is_none();
    let dst_file = &opened.file;
    let dst_write_path: &Path = &opened.path;
    let done_chunks = &opened.done_chunks;
    let block_dst = matches!(target, Target::Block { .. });

    let reader = Reader::new(source, opts);
    let writer = DstWriter::new(dst_file, dst_write_path, opts);
    // Reads the destination back: resumed chunks are checked against their
    // journal lines; copy_file_range'd chunks are hashed from it.
    let readback = SrcReader::new(dst_file, dst_write_path, opts);
    let mut src_sum = None;

    // Reflink: whole file, shares extents, no cache touched.
    let mut reflinked = false;
    if let Some((src_file, src_meta)) = source.local() {
        if opts.reflink && !block_dst && !stream && src_meta.is_file() && done_chunks.is_empty() {
            reflinked = rustix::fs::ioctl_ficlone(dst_file, src_file).is_ok();
        }
    }

    if reflinked {
        report.method = "reflink";
        report.totals.bytes = size.unwrap_or(0);
        progress(Progress {
            done: report.totals.bytes,
            total: size,
        });
    } else if let Some(size) = size {
        let io = (&reader, &writer, &readback);
        src_sum = write_chunks(
            source, target, opened, io, size, chunk, opts, progress, report,
        )?;
    } else if let Some((src_file, _)) = source.local() {
        report.method = "stream";
        let src = source.path.as_path();
        let (bytes, sum) = copy_stream(src_file, src, &writer, chunk, opts, progress)?;
        report.totals.bytes = bytes;
        report.totals.data_bytes = bytes;
        if !block_dst {
            dst_file
                .set_len(bytes)
                .map_err(io_err("truncate", dst_write_path, None))?;
        }
        src_sum = sum;
    }
    report.read_path = reader.names();
    report.write_path = writer.used.names();

    Ok(src_sum)
}

/// Writes a sized source's chunks with `opts.depth` workers (or
/// copy_file_range where the cache is kept), holes left as holes, resumed
/// chunks checked rather than copied again.
#[allow(clippy::too_many_arguments)]
fn write_chunks(
    source: &Source,
    target: &Target,
    opened: &Opened<'_>,
    (reader, writer, readback): (&Reader<'_>, &DstWriter<'_>, &SrcReader<'_>),
    size: u64,
    chunk: u64,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
    report: &mut CopyReport,
) -> Result<Option<String>> {
    // A local regular file: its holes, residency and copy_file_range.
    let src_file = source.local().filter(|(_, m)| m.is_file()).map(|(f, _)| f);
    let dst_file = &opened.file;
    let done_chunks = &opened.done_chunks;
    let block_dst = matches!(target, Target::Block { .. });
    let journal = opened.guard.as_ref().and_then(|g| g.journal.as_ref());
    let extents = match src_file {
        Some(f) => data_extents(f, size),
        None => vec![(0, size)],
    };
    let mut tasks = plan(size, chunk, &extents);
    let cfr = opts.cache == CacheMode::Keep && !block_dst && src_file.is_some();
    if let (false, Some(src_file)) = (cfr, src_file) {
        // A chunk needs the device unless all its data is cached
        // (residency unseen: assume it does, and the order stays); a
        // resumed chunk is read back from the destination.
        tasks = interleave(tasks, |t| {
            done_chunks.contains_key(&t.offset)
                || t.data.iter().any(|&(off, len)| {
                    residency::of_range(src_file, off, len)
                        .ok()
                        .and_then(|s| s.known().map(|r| r.cached < r.pages))
                        .unwrap_or(true)
                })
        });
    }
    report.method = if cfr { "copy_file_range" } else { "chunks" };
    let shared = Shared {
        tasks: &tasks,
        done_chunks,
        readback,
        next: AtomicU64::new(0),
        done_bytes: AtomicU64::new(0),
        data_bytes: AtomicU64::new(0),
        holes_bytes: AtomicU64::new(0),
        resumed_bytes: AtomicU64::new(0),
        resume_rejected: AtomicU64::new(0),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        journal,
        // An object is not read twice to be verified: its chunks' sums are
        // kept as they arrive.
        sums: (opts.verify && source.local().is_none()).then(Mutex::default),
        started: Instant::now(),
        total: size,
    };
    let use_cfr = AtomicBool::new(cfr);
    if !cfr && !block_dst && done_chunks.is_empty() {
        // (Not on resume: the file holds finished chunks, which a
        // preallocation that failed half-way would punch out.)
        writer.preallocate(&extents);
    }
    std::thread::scope(|s| {
        for _ in 0..opts.depth.max(1).min(tasks.len().max(1)) {
            s.spawn(|| {
                let r = copy_worker(
                    &shared, reader, writer, src_file, dst_file, opts, chunk, block_dst, &use_cfr,
                    progress,
                );
                if let Err(e) = r {
                    shared.failed.store(true, Ordering::Relaxed);
                    shared
                        .error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
            });
        }
    });
    if let Some(e) = shared.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    writer.punch_zero_runs();
    if !use_cfr.load(Ordering::Relaxed) && cfr {
        report.method = "chunks";
    }
    report.totals.bytes = size;
    report.totals.data_bytes = shared.data_bytes.into_inner();
    report.totals.holes_bytes = shared.holes_bytes.into_inner();
    report.totals.resumed_bytes = shared.resumed_bytes.into_inner();
    report.resume_rejected_chunks = shared.resume_rejected.into_inner();
    Ok(shared.sums.map(|m| {
        let mut sums = m.into_inner().unwrap_or_else(|p| p.into_inner());
        sums.sort_unstable();
        digest_chunk_sums(sums.into_iter().map(|(_, h)| h))
    }))
}

/// Makes the destination durable, drops what the copy left in the cache,
/// verifies it, and only then gives it its name: a copy that does not match
/// never appears complete.
pub(super) fn finish(
    source: &Source,
    target: &Target,
    opened: Opened<'_>,
    (src_sum, chunk): (Option<String>, u64),
    opts: &CopyOptions,
    report: &mut CopyReport,
) -> Result<()> {
    let src = source.path.as_path();
    let local = source.local();
    let stream = source.size().is_none();
    let block_dst = matches!(target, Target::Block { .. });
    let Opened {
        file: dst_file,
        path: dst_path,
        guard,
        ..
    } = opened;
    let dst_write_path: &Path = &dst_path;
    // Make it durable, then drop what the copy left in the cache.
    if opts.sync {
        dst_file
            .sync_all()
            .map_err(io_err("fsync", dst_write_path, None))?;
    } else if opts.cache != CacheMode::Keep {
        // Pages must be clean to be dropped.
        sys::sync_range(&dst_file, 0, 0, true).map_err(io_err(
            "sync_file_range",
            dst_write_path,
            None,
        ))?;
    }
    if opts.cache != CacheMode::Keep {
        let _ = crate::residency::evict(&dst_file, 0, 0);
    }
    if let (CacheMode::Drop, false, Some((src_file, _))) = (opts.cache, stream, local) {
        let _ = crate::residency::evict(src_file, 0, 0);
    }
    // Verify before the destination gets its name: a copy that does not
    // match never appears complete.
    if opts.verify {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| match (&src_sum, local) {
                (Some(sum), _) => Ok(sum.clone()),
                (None, Some((src_file, _))) => checksum(src_file, src, report.totals.bytes, opts),
                (None, None) => Err(refused(src, "no checksum of the object was kept")),
            });
            // An object's side is its chunks' sums as they arrived (reading
            // it again would download it twice): the destination's is
            // taken the same way.
            let b = match &src_sum {
                Some(sum) if sum.starts_with(CHUNK_SUMS) => {
                    chunk_sums(&dst_file, dst_write_path, report.totals.bytes, chunk, opts)
                }
                _ => checksum(&dst_file, dst_write_path, report.totals.bytes, opts),
            };
            (a.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), b)
        });
        let (a, b) = (a?, b?);
        if a != b {
            return Err(Error::Mismatch {
                path: report.dst.clone(),
                src: a,
                dst: b,
            });
        }
        report.checksum = Some(a);
    }
    if let (Target::InDir { dir, name, path }, Some(guard)) = (target, guard) {
        if opts.preserve {
            // (An object has none: `copy_object` refuses `preserve`.)
            if let Some((_, src_meta)) = local {
                preserve(&dst_file, src_meta).map_err(io_err(
                    "set the mode and times of",
                    dst_write_path,
                    None,
                ))?;
            }
        }
        // renameat replaces whatever is at the name (a link included) and
        // follows nothing.
        rustix::fs::renameat(dir, place::os(&guard.name), dir, name.as_os_str())
            .map_err(|e| Error::io("rename into place", path, None, e.into()))?;
        guard.finish();
        if opts.sync {
            rustix::fs::fsync(dir)
                .map_err(|e| Error::io("fsync the directory of", path, None, e.into()))?;
        }
    }

    if let (false, Some((src_file, _))) = (stream, local) {
        report.totals.src_cached_after = cached_pages(src_file);
    }
    report.totals.dst_cached_after = if block_dst {
        residency::of_range(&dst_file, 0, report.totals.bytes)
            .ok()
            .and_then(|s| s.known().map(|r| r.cached))
    } else {
        cached_pages(&dst_file)
    };
    Ok(())
}
