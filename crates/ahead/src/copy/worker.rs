//! The copying threads: each takes a chunk, reads it, writes it, and
//! records it in the journal.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::io::AlignedBuf;
use crate::{Error, Result};
use journal::{ChunkSum, Journal};

use super::*;

/// State the copying threads share.
pub(super) struct Shared<'a> {
    pub(super) tasks: &'a [Task],
    /// Chunks an interrupted copy finished, with what they held.
    pub(super) done_chunks: &'a HashMap<u64, ChunkSum>,
    /// Reads the destination back.
    pub(super) readback: &'a SrcReader<'a>,
    pub(super) next: AtomicU64,
    pub(super) done_bytes: AtomicU64,
    pub(super) data_bytes: AtomicU64,
    pub(super) holes_bytes: AtomicU64,
    pub(super) resumed_bytes: AtomicU64,
    pub(super) resume_rejected: AtomicU64,
    pub(super) failed: AtomicBool,
    pub(super) error: Mutex<Option<Error>>,
    pub(super) journal: Option<&'a Journal>,
    pub(super) started: Instant,
    pub(super) total: u64,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn copy_worker(
    sh: &Shared<'_>,
    reader: &SrcReader<'_>,
    writer: &DstWriter<'_>,
    src: &File,
    dst: &File,
    opts: &CopyOptions,
    chunk: u64,
    block_dst: bool,
    use_cfr: &AtomicBool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<()> {
    let mut buf = AlignedBuf::new(chunk as usize, 4096);
    let zeroes = vec![0u8; ZERO_BLOCK as usize];
    let mut windows = VecDeque::new();
    let result = (|| -> Result<()> {
        loop {
            if sh.failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            if cancelled(opts) {
                return Err(interrupted(reader.path));
            }
            let i = sh.next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some(task) = sh.tasks.get(i) else {
                return Ok(());
            };
            if let Some(sum) = sh.done_chunks.get(&task.offset) {
                // Kept only if the temporary file still holds what the
                // journal says was written there.
                let b = &mut buf.as_mut_slice()[..task.len as usize];
                let holds = sh.readback.read_exact_at(b, task.offset).is_ok()
                    && match sum {
                        ChunkSum::Hole => is_zero(b),
                        ChunkSum::Xxh3(h) => xxh3_64(b) == *h,
                    };
                if holds {
                    sh.resumed_bytes.fetch_add(task.len, Ordering::Relaxed);
                    report_progress(sh, task.len, progress);
                    continue;
                }
                sh.resume_rejected.fetch_add(1, Ordering::Relaxed);
                if !block_dst {
                    // Redone below, where the copy leaves holes unwritten:
                    // the old bytes must go (a block device has its
                    // zeroes written).
                    writer.make_zero(
                        Zeroing::Hole,
                        task.offset,
                        task.len,
                        &zeroes,
                        &mut windows,
                    )?;
                }
            }
            if let Some(rate) = opts.bwlimit {
                // Pace against the bytes finished so far plus this chunk
                // (with several threads, up to `depth` chunks run ahead).
                let planned = sh.done_bytes.load(Ordering::Relaxed) + task.len;
                let due = Duration::from_secs_f64(planned as f64 / rate.max(1) as f64);
                let now = sh.started.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let mut data = 0;
            let mut covered = 0;
            // What the journal will say the chunk holds: its bytes, with
            // zeroes for the source's holes.
            let mut sum = sh.journal.map(|_| Xxh3::new());
            let mut hashed_to = task.offset;
            for &(off, len) in &task.data {
                covered += len;
                if let Some(h) = sum.as_mut() {
                    hash_zeroes(h, off - hashed_to, &zeroes);
                    hashed_to = off + len;
                }
                if use_cfr.load(Ordering::Relaxed) {
                    match copy_range(src, dst, off, len) {
                        Ok(()) => {
                            data += len;
                            if let Some(h) = sum.as_mut() {
                                let b = &mut buf.as_mut_slice()[..len as usize];
                                sh.readback.read_exact_at(b, off)?;
                                h.update(b);
                            }
                            continue;
                        }
                        Err(e)
                            if matches!(
                                e.raw_os_error(),
                                Some(libc::EXDEV | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
                            ) =>
                        {
                            use_cfr.store(false, Ordering::Relaxed);
                        }
                        Err(e) => {
                            return Err(Error::io("copy_file_range", writer.path, Some(off), e))
                        }
                    }
                }
                let b = &mut buf.as_mut_slice()[..len as usize];
                reader.read_exact_at(b, off)?;
                if let Some(h) = sum.as_mut() {
                    h.update(b);
                }
                data += write_sparse(
                    writer,
                    b,
                    off,
                    opts.sparse,
                    block_dst,
                    &zeroes,
                    &mut windows,
                    &sh.holes_bytes,
                )?;
            }
            // The chunk's holes in the source.
            let holes = task.len - covered;
            if holes > 0 {
                sh.holes_bytes.fetch_add(holes, Ordering::Relaxed);
                if block_dst {
                    let mut at = task.offset;
                    for &(off, len) in &task.data {
                        if off > at {
                            writer.make_zero(
                                Zeroing::Range,
                                at,
                                off - at,
                                &zeroes,
                                &mut windows,
                            )?;
                        }
                        at = off + len;
                    }
                    if at < task.offset + task.len {
                        writer.make_zero(
                            Zeroing::Range,
                            at,
                            task.offset + task.len - at,
                            &zeroes,
                            &mut windows,
                        )?;
                    }
                }
            }
            sh.data_bytes.fetch_add(data, Ordering::Relaxed);
            if let (Some(j), Some(mut h)) = (sh.journal, sum) {
                let line = if task.data.is_empty() {
                    ChunkSum::Hole
                } else {
                    hash_zeroes(&mut h, task.offset + task.len - hashed_to, &zeroes);
                    ChunkSum::Xxh3(h.digest())
                };
                j.done(task.offset, line)
                    .map_err(io_err("write", j.path(), None))?;
            }
            report_progress(sh, task.len, progress);
        }
    })();
    let drained = writer.drain(&mut windows);
    result.and(drained)
}

/// Feeds `n` zero bytes to `h`.
pub(super) fn hash_zeroes(h: &mut Xxh3, mut n: u64, zeroes: &[u8]) {
    while n > 0 {
        let k = n.min(zeroes.len() as u64);
        h.update(&zeroes[..k as usize]);
        n -= k;
    }
}

pub(super) fn report_progress(sh: &Shared<'_>, n: u64, progress: &(dyn Fn(Progress) + Sync)) {
    let done = sh.done_bytes.fetch_add(n, Ordering::Relaxed) + n;
    progress(Progress {
        done,
        total: Some(sh.total),
    });
}

pub(super) fn copy_range(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let mut so = offset + done;
        let mut doff = so;
        match rustix::fs::copy_file_range(
            src,
            Some(&mut so),
            dst,
            Some(&mut doff),
            (len - done) as usize,
        ) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the source ended early (truncated during the copy?)",
                ))
            }
            Ok(n) => done += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
