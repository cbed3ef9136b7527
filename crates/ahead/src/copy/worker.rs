//! The copying threads: each takes a chunk, reads it, writes it, and
//! records it in the journal.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::dest::{is_zero, write_sparse, DstWriter, Zeroing};
use super::journal::{ChunkSum, Journal};
use super::plan::Task;
use super::source::{Reader, SrcReader};
use super::{cancelled, interrupted, io_err, CopyOptions, Progress, ZERO_BLOCK};
use crate::io::AlignedBuf;
use crate::{Error, Result};

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
    /// Each chunk's offset and XXH3-64, kept where the copy is verified
    /// without reading its source again (an object).
    pub(super) sums: Option<Mutex<Vec<(u64, u64)>>>,
    pub(super) started: Instant,
    pub(super) total: u64,
}

/// One copying thread's view: what it copies with, and its own buffers.
struct Worker<'w, 's> {
    sh: &'w Shared<'s>,
    reader: &'w Reader<'w>,
    writer: &'w DstWriter<'w>,
    src: Option<&'w File>,
    dst: &'w File,
    opts: &'w CopyOptions,
    block_dst: bool,
    use_cfr: &'w AtomicBool,
    progress: &'w (dyn Fn(Progress) + Sync),
    buf: AlignedBuf,
    zeroes: Vec<u8>,
    windows: VecDeque<(u64, u64)>,
}

/// A copying thread: takes chunks until none is left, one fails, or the
/// copy is cancelled; the destination's write-back windows are drained
/// whatever happened.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_worker(
    sh: &Shared<'_>,
    reader: &Reader<'_>,
    writer: &DstWriter<'_>,
    src: Option<&File>,
    dst: &File,
    opts: &CopyOptions,
    chunk: u64,
    block_dst: bool,
    use_cfr: &AtomicBool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<()> {
    let mut w = Worker {
        sh,
        reader,
        writer,
        src,
        dst,
        opts,
        block_dst,
        use_cfr,
        progress,
        buf: AlignedBuf::new(chunk as usize, 4096),
        zeroes: vec![0u8; ZERO_BLOCK as usize],
        windows: VecDeque::new(),
    };
    let result = w.run();
    let drained = writer.drain(&mut w.windows);
    result.and(drained)
}

impl Worker<'_, '_> {
    fn run(&mut self) -> Result<()> {
        let sh = self.sh;
        loop {
            if sh.failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            if cancelled(self.opts) {
                return Err(interrupted(self.reader.path()));
            }
            let i = sh.next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some(task) = sh.tasks.get(i) else {
                return Ok(());
            };
            if self.resumed(task)? {
                sh.resumed_bytes.fetch_add(task.len, Ordering::Relaxed);
                report_progress(sh, task.len, self.progress);
                continue;
            }
            self.pace(task);
            self.copy(task)?;
            report_progress(sh, task.len, self.progress);
        }
    }

    /// Whether an interrupted copy finished `task` and the temporary file
    /// still holds what the journal says was written there. A chunk that
    /// does not is cleared for the copy (holes are left unwritten, so the
    /// old bytes must go; a block device has its zeroes written anyway).
    fn resumed(&mut self, task: &Task) -> Result<bool> {
        let Some(sum) = self.sh.done_chunks.get(&task.offset) else {
            return Ok(false);
        };
        let b = &mut self.buf.as_mut_slice()[..task.len as usize];
        let holds = self.sh.readback.read_exact_at(b, task.offset).is_ok()
            && match sum {
                ChunkSum::Hole => is_zero(b),
                ChunkSum::Xxh3(h) => xxh3_64(b) == *h,
            };
        if holds {
            let sum = xxh3_64(b);
            self.keep_sum(task.offset, sum);
            return Ok(true);
        }
        self.sh.resume_rejected.fetch_add(1, Ordering::Relaxed);
        if !self.block_dst {
            self.writer.make_zero(
                Zeroing::Hole,
                task.offset,
                task.len,
                &self.zeroes,
                &mut self.windows,
            )?;
        }
        Ok(false)
    }

    /// With `--bwlimit`: waits until the bytes finished so far plus this
    /// chunk are due (with several threads, up to `depth` chunks run
    /// ahead).
    fn pace(&self, task: &Task) {
        if let Some(rate) = self.opts.bwlimit {
            let planned = self.sh.done_bytes.load(Ordering::Relaxed) + task.len;
            let due = Duration::from_secs_f64(planned as f64 / rate.max(1) as f64);
            let now = self.sh.started.elapsed();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }

    /// Copies `task`'s data runs, writes zeroes for its holes where the
    /// destination is a device, and records it in the journal.
    fn copy(&mut self, task: &Task) -> Result<()> {
        let sh = self.sh;
        let mut data = 0;
        let mut covered = 0;
        // What the journal will say the chunk holds: its bytes, with
        // zeroes for the source's holes.
        let mut sum = (sh.journal.is_some() || sh.sums.is_some()).then(Xxh3::new);
        let mut hashed_to = task.offset;
        for &(off, len) in &task.data {
            covered += len;
            if let Some(h) = sum.as_mut() {
                hash_zeroes(h, off - hashed_to, &self.zeroes);
                hashed_to = off + len;
            }
            if self.copy_range_once(off, len, sum.as_mut())? {
                data += len;
                continue;
            }
            let b = &mut self.buf.as_mut_slice()[..len as usize];
            self.reader.read_exact_at(b, off)?;
            if let Some(h) = sum.as_mut() {
                h.update(b);
            }
            data += write_sparse(
                self.writer,
                b,
                off,
                self.opts.sparse,
                self.block_dst,
                &self.zeroes,
                &mut self.windows,
                &sh.holes_bytes,
            )?;
        }
        let holes = task.len - covered;
        if holes > 0 {
            sh.holes_bytes.fetch_add(holes, Ordering::Relaxed);
            if self.block_dst {
                self.zero_holes(task)?;
            }
        }
        sh.data_bytes.fetch_add(data, Ordering::Relaxed);
        if let Some(mut h) = sum {
            hash_zeroes(&mut h, task.offset + task.len - hashed_to, &self.zeroes);
            let digest = h.digest();
            self.keep_sum(task.offset, digest);
            if let Some(j) = sh.journal {
                let line = if task.data.is_empty() {
                    ChunkSum::Hole
                } else {
                    ChunkSum::Xxh3(digest)
                };
                j.done(task.offset, line)
                    .map_err(io_err("write", j.path(), None))?;
            }
        }
        Ok(())
    }

    /// Keeps a chunk's sum for the copy's verification, where it is kept.
    fn keep_sum(&self, offset: u64, sum: u64) {
        if let Some(sums) = &self.sh.sums {
            sums.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((offset, sum));
        }
    }

    /// A run by copy_file_range, while the copy uses it: true if done
    /// (hashed from the destination for the journal); false if the file
    /// systems refuse it, which turns it off for the rest of the copy.
    fn copy_range_once(&mut self, off: u64, len: u64, sum: Option<&mut Xxh3>) -> Result<bool> {
        if !self.use_cfr.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let Some(src) = self.src else {
            return Ok(false);
        };
        match copy_range(src, self.dst, off, len) {
            Ok(()) => {
                if let Some(h) = sum {
                    let b = &mut self.buf.as_mut_slice()[..len as usize];
                    self.sh.readback.read_exact_at(b, off)?;
                    h.update(b);
                }
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
                ) =>
            {
                self.use_cfr.store(false, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => Err(Error::io("copy_file_range", self.writer.path, Some(off), e)),
        }
    }

    /// Writes zeroes over `task`'s holes in a device destination.
    fn zero_holes(&mut self, task: &Task) -> Result<()> {
        let mut at = task.offset;
        let end = task.offset + task.len;
        let gaps = task
            .data
            .iter()
            .map(|&(off, len)| (off, off + len))
            .chain(std::iter::once((end, end)));
        for (off, next) in gaps {
            if off > at {
                self.writer.make_zero(
                    Zeroing::Range,
                    at,
                    off - at,
                    &self.zeroes,
                    &mut self.windows,
                )?;
            }
            at = next;
        }
        Ok(())
    }
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
