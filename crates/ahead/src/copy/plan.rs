//! Planning a copy: the chunk size, the source's extents, the tasks, and
//! the bounds on the caller's options.

use std::fs::{self, File};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use super::{CopyOptions, MAX_CHUNK, MIN_CHUNK, ZERO_BLOCK};
use crate::{Error, Result};

/// The source's device's largest request (queue/max_sectors_kb), clamped
/// to 1–8 MiB; 4 MiB when sysfs does not say.
pub(super) fn tuned_chunk(meta: &fs::Metadata) -> u64 {
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    let read = |p: String| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok();
    let kb = read(format!("{base}/queue/max_sectors_kb"))
        .or_else(|| read(format!("{base}/../queue/max_sectors_kb")));
    kb.map_or(4 << 20, |kb| (kb << 10).clamp(MIN_CHUNK, MAX_CHUNK))
}

/// The source's data extents, `(offset, len)`, from SEEK_DATA/SEEK_HOLE;
/// the whole file where the file system cannot say.
pub(super) fn data_extents(file: &File, size: u64) -> Vec<(u64, u64)> {
    use rustix::fs::{seek, SeekFrom};
    let mut out = Vec::new();
    let mut at = 0;
    while at < size {
        let start = match seek(file, SeekFrom::Data(at)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return vec![(0, size)],
        };
        if start >= size {
            break;
        }
        let end = match seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(size),
            Err(_) => size,
        };
        out.push((start, end - start));
        at = end;
    }
    out
}

/// One chunk of work: `[offset, offset + len)` of the file, with the parts
/// of it that hold data.
#[derive(Debug)]
pub(super) struct Task {
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) data: Vec<(u64, u64)>,
}

pub(super) fn plan(size: u64, chunk: u64, extents: &[(u64, u64)]) -> Vec<Task> {
    let mut tasks = Vec::new();
    let mut ext = extents.iter().peekable();
    let mut offset = 0;
    while offset < size {
        let end = (offset + chunk).min(size);
        let mut data = Vec::new();
        while let Some(&&(s, n)) = ext.peek() {
            if s >= end {
                break;
            }
            let (a, b) = (s.max(offset), (s + n).min(end));
            if a < b {
                data.push((a, b - a));
            }
            if s + n <= end {
                ext.next();
            } else {
                break;
            }
        }
        tasks.push(Task {
            offset,
            len: end - offset,
            data,
        });
        offset = end;
    }
    tasks
}

/// Orders the tasks so that the chunks the device must read are spread
/// evenly among those it need not (`needs_read` false: fully cached, or
/// holes), each kind kept in file order.
///
/// Every chunk is written, but only some are read from the device. Taken in
/// file order, a source whose first half is cached is copied in two phases:
/// writes alone, then reads and writes; the device reads nothing while the
/// first half is written. Interleaved, its reads overlap the cached chunks'
/// writes from start to end: a 2 GiB copy, half cached, with reads capped
/// at 400 MiB/s, took 2.60 s against 3.07–3.13 s in file order (the
/// uncached gigabyte alone takes 2.56 s at the cap). Where reads are not
/// the bottleneck the order changes nothing (docs/copy.md).
pub(super) fn interleave(tasks: Vec<Task>, needs_read: impl Fn(&Task) -> bool) -> Vec<Task> {
    let (read, free): (Vec<Task>, Vec<Task>) = tasks.into_iter().partition(|t| needs_read(t));
    let (nr, nf) = (read.len() as u64, free.len() as u64);
    let mut out = Vec::with_capacity(read.len() + free.len());
    let (mut read, mut free) = (read.into_iter(), free.into_iter());
    let (mut r, mut f) = (0u64, 0u64);
    // Take from whichever kind is further behind its share: compares the
    // midpoints (r + 1/2)/nr and (f + 1/2)/nf without division.
    while r < nr || f < nf {
        let take_read = f == nf || (r < nr && (2 * r + 1) * nf <= (2 * f + 1) * nr);
        if take_read {
            out.extend(read.next());
            r += 1;
        } else {
            out.extend(free.next());
            f += 1;
        }
    }
    out
}

/// Largest chunk a copy accepts: each of `depth` threads holds one.
pub const MAX_CHUNK_BYTES: u64 = 256 << 20;
/// Most chunks in flight.
pub const MAX_DEPTH: usize = 256;
/// Most memory the chunk buffers of one copy may take together.
pub(super) const MAX_BUFFERS: u64 = 4 << 30;

/// Checks the options a caller could get wrong: sizes out of range come
/// back as a clear error instead of an allocation that aborts or a loop
/// that never ends.
pub(super) fn check_options(opts: &CopyOptions) -> Result<()> {
    let bad = |why: String| Err(Error::Invalid { what: "copy", why });
    if let Some(c) = opts.chunk {
        if !(ZERO_BLOCK..=MAX_CHUNK_BYTES).contains(&c) {
            return bad(format!(
                "chunk of {c} bytes: it must be from {} to {} bytes",
                ZERO_BLOCK, MAX_CHUNK_BYTES
            ));
        }
    }
    if opts.depth == 0 || opts.depth > MAX_DEPTH {
        return bad(format!(
            "depth {}: it must be from 1 to {MAX_DEPTH}",
            opts.depth
        ));
    }
    let chunk = opts.chunk.unwrap_or(MAX_CHUNK);
    if chunk.saturating_mul(opts.depth as u64) > MAX_BUFFERS {
        return bad(format!(
            "{} chunks of {chunk} bytes in flight would take more than {MAX_BUFFERS} bytes",
            opts.depth
        ));
    }
    if opts.bwlimit == Some(0) {
        return bad("a bandwidth limit of 0 would never finish".into());
    }
    Ok(())
}
