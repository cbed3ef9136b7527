//! Answering the kernel's reads: the buffers they are read into, kept
//! from one read to the next, and the end of a read that had to wait for
//! the store.

use std::sync::{Arc, Mutex};

use ahead::File;
use fuser::{Errno, ReplyData};

/// The errno a failed read answers the kernel with.
pub(crate) fn errno(e: &ahead::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Read buffers kept from one read to the next. Each read answered
/// needs a buffer of its size (up to the kernel's `max_read`, 1 MiB), and
/// a fresh one is zeroed, or faulted in page by page, before the engine
/// copies into it; a kept one is already there.
#[derive(Default)]
pub(crate) struct Buffers {
    free: Mutex<Vec<Vec<u8>>>,
}

impl Buffers {
    /// Buffers kept at most: a few per thread that answers reads (the
    /// FUSE threads and the runtime's), 16 MiB at the kernel's 1 MiB
    /// reads.
    const KEEP: usize = 16;

    /// A buffer of `size` bytes: a kept one (zeroed only where it was
    /// shorter), else a new one.
    pub(crate) fn take(&self, size: usize) -> Vec<u8> {
        let kept = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut buf = kept.unwrap_or_default();
        if buf.len() < size {
            buf.resize(size, 0);
        } else {
            buf.truncate(size);
        }
        buf
    }

    /// Keeps `buf` for a later read, unless enough are kept (or it holds
    /// no memory).
    pub(crate) fn give(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < Self::KEEP && buf.capacity() <= MAX_KEPT_BUFFER {
            free.push(buf);
        }
    }
}

/// The largest buffer kept for reuse: the kernel's largest read.
const MAX_KEPT_BUFFER: usize = 1 << 20;

/// Ends a read the kernel asked for `size` bytes at `offset` of: awaits
/// the engine's read in flight (`pending`), then reads on from what `got`
/// holds until the `size` bytes are there or the object ends (an answer
/// shorter than asked is the end of the file to the kernel, and the
/// engine's async read stops at a window), and answers. The buffers go
/// back to `buffers`.
pub(crate) async fn finish_read(
    file: File,
    pending: Option<ahead::ReadOwned>,
    mut got: Vec<u8>,
    offset: u64,
    size: usize,
    reply: ReplyData,
    buffers: Arc<Buffers>,
) {
    if let Some(p) = pending {
        if let Err(e) = add(&mut got, p.await, &buffers) {
            buffers.give(got);
            return reply.error(e);
        }
    }
    while got.len() < size {
        let at = offset + got.len() as u64;
        let done = file.read_owned(buffers.take(size - got.len()), at).await;
        match add(&mut got, done, &buffers) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                buffers.give(got);
                return reply.error(e);
            }
        }
    }
    reply.data(&got);
    buffers.give(got);
}

/// Adds an engine read's bytes (`done`: its buffer and result) to `got`,
/// taking the buffer whole when `got` is empty (no copy), and gives back
/// the buffer not kept: the bytes added, or the errno to answer.
fn add(
    got: &mut Vec<u8>,
    done: (Vec<u8>, ahead::Result<usize>),
    buffers: &Buffers,
) -> Result<usize, Errno> {
    match done {
        (mut buf, Ok(n)) if got.is_empty() => {
            buf.truncate(n);
            buffers.give(std::mem::replace(got, buf));
            Ok(n)
        }
        (buf, Ok(n)) => {
            got.extend_from_slice(&buf[..n]);
            buffers.give(buf);
            Ok(n)
        }
        (buf, Err(e)) => {
            buffers.give(buf);
            Err(errno(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_comes_back_at_the_size_asked_and_the_pool_stays_bounded() {
        let b = Buffers::default();
        let mut first = b.take(64 << 10);
        assert_eq!(first.len(), 64 << 10);
        first[0] = 7;
        let at = first.as_ptr();
        b.give(first);
        // The same memory again, shorter or longer.
        let again = b.take(4096);
        assert_eq!((again.len(), again.as_ptr(), again[0]), (4096, at, 7));
        b.give(again);
        let longer = b.take(128 << 10);
        assert_eq!(longer.len(), 128 << 10);
        assert!(longer[64 << 10..].iter().all(|&x| x == 0));
        b.give(longer);
        // Never more than KEEP, nothing larger than the kernel's reads,
        // nothing empty.
        for _ in 0..Buffers::KEEP + 5 {
            b.give(vec![0; 4096]);
        }
        b.give(vec![0; MAX_KEPT_BUFFER + 1]);
        b.give(Vec::new());
        let free = b.free.lock().unwrap();
        assert_eq!(free.len(), Buffers::KEEP);
        assert!(free
            .iter()
            .all(|v| v.capacity() > 0 && v.capacity() <= MAX_KEPT_BUFFER));
    }
}
