//! Backward readers' windows placed in the kernel's page cache.
//!
//! The kernel reads ahead of a FUSE file's forward readers on its own:
//! their `read`s are answered from its page cache, and the daemon sees
//! large requests ahead of them. A reader going the other way (`tac`,
//! `tail`, a database's descending index scan, 64 KiB `pread`s from the
//! end) gets no such help: every request that misses the kernel's cache is
//! a round trip through the daemon, one after the other, even when the
//! engine's backward readahead holds the bytes already. On the `s3`
//! profile 2,048 backward 64 KiB `pread`s of a 128 MiB object were 2,048
//! such round trips.
//!
//! So once a handle's requests go backward, the daemon writes the blocks
//! below the reader into the kernel's cache itself (`FUSE_NOTIFY_STORE`),
//! [`BLOCK`] at a time, one to two blocks ahead of it. Each block is
//! stored without its top page: the reader's request for that page (a
//! miss, the only one in the block) tells the daemon where the reader is,
//! as the kernel's lookahead marker tells it where a forward reader is,
//! and the daemon stores the next block. A request that does not continue
//! the stream stops it: at most two blocks are stored that nobody reads.
//!
//! The bytes come from the handle's own engine file (the version its
//! ETag pins), so the engine's policy sees the blocks as the backward
//! stream's reads and reads ahead of them. The kernel's copy is what a
//! request's answer would have made; whether it is kept between opens is
//! decided as for any page (`FOPEN_KEEP_CACHE`, lib.rs). Stores are
//! written from tokio's blocking pool, never from the threads that answer
//! reads: a store waits for any page of its range that the kernel is
//! reading through the daemon, and that read must be answered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ahead::File;
use fuser::{INodeNo, Notifier};

/// Bytes stored at a time: the kernel's own readahead of the mount
/// (`KERNEL_READAHEAD`), so a backward reader's lookahead is one to two
/// of the kernel's windows.
pub(crate) const BLOCK: u64 = 1 << 20;
/// Blocks stored ahead of a backward reader: one to two, the reader's
/// request for a block's hole asking for the next. (Four were within
/// noise of two on `tac` and 64 KiB `pread`s backwards, and leave twice
/// as much unread where a reader stops; one was within noise of two as
/// well, `tail`'s bytes included.)
const AHEAD: u64 = 2;
/// The kernel's page: the unit of its cache and of the hole left in each
/// block.
const PAGE: u64 = 4096;
/// A request that ends at most this far below the handle's last one
/// continues a backward stream (a program's buffer, a B-tree's next
/// leaf).
const NEAR: u64 = 64 << 10;

/// One handle's backward stream.
#[derive(Default)]
struct Stream {
    /// The handle's last request that reached the daemon: `[lo, hi)`.
    last: Option<(u64, u64)>,
    /// The lowest offset stored or being stored; `None`: not pushing.
    frontier: Option<u64>,
    /// Store down to here.
    target: u64,
    /// The pages left out of stored blocks, whose reads say where the
    /// reader is.
    holes: Vec<u64>,
    /// A task is storing.
    running: bool,
}

/// The streams of every open handle, and where stores go.
#[derive(Default)]
pub(crate) struct Pusher {
    streams: Mutex<HashMap<u64, Arc<Mutex<Stream>>>>,
    notifier: OnceLock<Notifier>,
    /// Set when the kernel refused a store: no more are tried (each try
    /// costs a block's read).
    refused: AtomicBool,
}

impl Pusher {
    /// Stores go through `notifier` (the session's, known once mounted).
    pub(crate) fn start(&self, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// Handle `fh` closed.
    pub(crate) fn release(&self, fh: u64) {
        let s = lock(&self.streams).remove(&fh);
        if let Some(s) = s {
            lock(&s).frontier = None;
        }
    }

    /// A request of `size` bytes at `offset` reached the daemon on handle
    /// `fh` of inode `ino`, read through `file`: starts, moves on or stops
    /// the handle's stores.
    pub(crate) fn on_read(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Runtime,
        fh: u64,
        ino: INodeNo,
        file: &File,
        offset: u64,
        size: u64,
    ) {
        if self.notifier.get().is_none() || self.refused.load(Ordering::Relaxed) {
            return;
        }
        let stream = lock(&self.streams).entry(fh).or_default().clone();
        let mut s = lock(&stream);
        let end = offset + size;
        let hole = s.holes.iter().any(|&h| offset <= h && h < end);
        let backward = hole
            || s.last
                .is_some_and(|(lo, _)| end <= lo && lo - end <= NEAR && offset > 0);
        s.last = Some((offset, end));
        if !backward {
            s.frontier = None;
            s.holes.clear();
            return;
        }
        s.holes.retain(|&h| h < offset);
        match s.frontier {
            Some(f) if f <= end => {}
            // Not pushing yet, or the reader is below what was stored.
            _ => s.frontier = Some(offset),
        }
        s.target = offset.saturating_sub(AHEAD * BLOCK);
        if !s.running {
            s.running = true;
            let (me, file, stream) = (self.clone(), file.clone(), stream.clone());
            runtime.spawn(async move { me.push(stream, file, ino).await });
        }
    }

    /// Stores blocks below the stream's frontier down to its target, one
    /// after another: each block's read is a request of the engine's
    /// backward stream, which reads ahead of them. (Four blocks read
    /// together made 64 KiB `pread`s backwards slower through the `s3`
    /// profile: 0.91-0.93 s, where one block at a time took 0.77-0.80 s.)
    async fn push(self: Arc<Self>, stream: Arc<Mutex<Stream>>, file: File, ino: INodeNo) {
        loop {
            let (lo, hi) = {
                let mut s = lock(&stream);
                match s.frontier.filter(|&f| f > 0 && f > s.target) {
                    Some(f) => {
                        let lo = f.saturating_sub(BLOCK);
                        s.frontier = Some(lo);
                        (lo, f)
                    }
                    None => {
                        s.running = false;
                        return;
                    }
                }
            };
            let hole = self.clone().store(file.clone(), ino, lo, hi).await;
            let mut s = lock(&stream);
            match hole {
                Some(h) if s.frontier.is_some() => s.holes.push(h),
                _ => {
                    s.frontier = None;
                    s.running = false;
                    return;
                }
            }
        }
    }

    /// Reads `[lo, hi)` through `file` and stores it without its top page
    /// in the kernel's cache of `ino`; that page (the hole), if stored.
    async fn store(self: Arc<Self>, file: File, ino: INodeNo, lo: u64, hi: u64) -> Option<u64> {
        let (mut buf, got) = file.read_owned(vec![0u8; (hi - lo) as usize], lo).await;
        // A failed or short read stores nothing: the reader's own request
        // will say why.
        let n = got.ok().filter(|&n| n as u64 == hi - lo)?;
        // The block without its top page: the reader's request for that
        // page is the next block's cue.
        buf.truncate(n - PAGE as usize);
        tokio::task::spawn_blocking(move || match self.notifier.get()?.store(ino, lo, &buf) {
            Ok(()) => Some(hi - PAGE),
            Err(_) => {
                // (An inode the kernel no longer holds is not an error:
                // fuser answers Ok.)
                self.refused.store(true, Ordering::Relaxed);
                None
            }
        })
        .await
        .ok()?
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
