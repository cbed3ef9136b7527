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

use crate::Buffers;

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

impl Stream {
    /// A request `[offset, end)` reached the daemon: whether a task must
    /// start storing (none is running, and the stream goes backward).
    fn request(&mut self, offset: u64, end: u64) -> bool {
        let hole = self.holes.iter().any(|&h| offset <= h && h < end);
        let backward = hole
            || self
                .last
                .is_some_and(|(lo, _)| end <= lo && lo - end <= NEAR && offset > 0);
        self.last = Some((offset, end));
        if !backward {
            self.frontier = None;
            self.holes.clear();
            return false;
        }
        self.holes.retain(|&h| h < offset);
        match self.frontier {
            Some(f) if f <= end => {}
            // Not storing yet, or the reader is below what was stored.
            _ => self.frontier = Some(offset),
        }
        self.target = offset.saturating_sub(AHEAD * BLOCK);
        !std::mem::replace(&mut self.running, true)
    }

    /// The next block to store, `[lo, hi)`; `None` (and the task ends)
    /// once the frontier reached the target, the file's start, or the
    /// stream stopped.
    fn next_block(&mut self) -> Option<(u64, u64)> {
        match self.frontier.filter(|&f| f > 0 && f > self.target) {
            Some(f) => {
                let lo = f.saturating_sub(BLOCK);
                self.frontier = Some(lo);
                Some((lo, f))
            }
            None => {
                self.running = false;
                None
            }
        }
    }

    /// A block was stored, leaving `hole` out (`None`: it failed): whether
    /// the task goes on.
    fn stored(&mut self, hole: Option<u64>) -> bool {
        match hole {
            Some(h) if self.frontier.is_some() => {
                self.holes.push(h);
                true
            }
            _ => {
                self.frontier = None;
                self.running = false;
                false
            }
        }
    }
}

/// The streams of every open handle, and where stores go.
#[derive(Default)]
pub(crate) struct Pusher {
    streams: Mutex<HashMap<u64, Arc<Mutex<Stream>>>>,
    notifier: OnceLock<Notifier>,
    /// Set when the kernel refused a store: no more are tried (each try
    /// costs a block's read).
    refused: AtomicBool,
    /// The blocks' buffers, kept from one store to the next.
    buffers: Buffers,
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
        if lock(&stream).request(offset, offset + size) {
            let (me, file) = (self.clone(), file.clone());
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
            let Some((lo, hi)) = lock(&stream).next_block() else {
                return;
            };
            let hole = self.clone().store(file.clone(), ino, lo, hi).await;
            if !lock(&stream).stored(hole) {
                return;
            }
        }
    }

    /// Reads `[lo, hi)` through `file` and stores it without its top page
    /// in the kernel's cache of `ino`; that page (the hole), if stored.
    async fn store(self: Arc<Self>, file: File, ino: INodeNo, lo: u64, hi: u64) -> Option<u64> {
        let (mut buf, got) = file
            .read_owned(self.buffers.take((hi - lo) as usize), lo)
            .await;
        // A failed or short read stores nothing: the reader's own request
        // will say why.
        let Some(n) = got.ok().filter(|&n| n as u64 == hi - lo) else {
            self.buffers.give(buf);
            return None;
        };
        // The block without its top page: the reader's request for that
        // page is the next block's cue.
        buf.truncate(n - PAGE as usize);
        tokio::task::spawn_blocking(move || {
            let stored = match self.notifier.get().map(|n| n.store(ino, lo, &buf)) {
                None => None,
                Some(Ok(())) => Some(hi - PAGE),
                Some(Err(_)) => {
                    // (An inode the kernel no longer holds is not an
                    // error: fuser answers Ok.)
                    self.refused.store(true, Ordering::Relaxed);
                    None
                }
            };
            self.buffers.give(buf);
            stored
        })
        .await
        .ok()?
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A reader of `step`-byte requests at `offsets`, with the kernel's
    /// cache modelled as the pages stored (each store lands at once): a
    /// request reaches the daemon only where one of its pages is missing.
    /// Returns the requests that reached the daemon and the most bytes
    /// stored below the reader that it had not read at any point.
    fn drive(offsets: impl Iterator<Item = u64>, step: u64) -> (usize, u64) {
        let mut s = Stream::default();
        let mut cached: BTreeSet<u64> = BTreeSet::new();
        let (mut requests, mut ahead_most) = (0, 0);
        let mut lowest = u64::MAX;
        for at in offsets {
            let pages = (at / PAGE..(at + step).div_ceil(PAGE)).collect::<Vec<_>>();
            if pages.iter().any(|p| !cached.contains(p)) {
                requests += 1;
                if s.request(at, at + step) {
                    while let Some((lo, hi)) = s.next_block() {
                        cached.extend(lo / PAGE..(hi - PAGE) / PAGE);
                        assert!(s.stored(Some(hi - PAGE)));
                    }
                }
            }
            cached.extend(pages);
            lowest = lowest.min(at);
            let below = cached.range(..lowest / PAGE).count() as u64 * PAGE;
            ahead_most = ahead_most.max(below);
        }
        (requests, ahead_most)
    }

    #[test]
    fn a_backward_reader_asks_once_a_block_and_finds_at_most_the_lookahead_stored() {
        let size = 32 * BLOCK;
        let step = 64 << 10;
        let (requests, ahead) = drive((0..size / step).rev().map(|k| k * step), step);
        // Two requests to start, then one hole a block (and the reader's
        // first request of each block where the hole was its top page).
        assert!(
            requests <= 2 + 2 * 32,
            "{requests} requests reached the daemon"
        );
        assert!(requests < (size / step) as usize / 4, "{requests}");
        assert!(
            ahead <= (AHEAD + 1) * BLOCK,
            "{ahead} bytes stored below the reader"
        );
    }

    #[test]
    fn a_forward_or_random_reader_starts_no_stores() {
        let step = 64 << 10;
        let (requests, ahead) = drive((0..64u64).map(|k| k * step), step);
        assert_eq!((requests, ahead), (64, 0));
        // Jumps far apart, down and up: none within reach of the last.
        let far = [40, 3, 90, 17, 60, 1].map(|k| k * BLOCK);
        let (requests, ahead) = drive(far.into_iter(), step);
        assert_eq!((requests, ahead), (6, 0));
    }

    #[test]
    fn a_reader_that_turns_forward_stops_the_stores() {
        let mut s = Stream::default();
        let b = 8 * BLOCK;
        assert!(!s.request(b, b + 4096));
        assert!(s.request(b - 4096, b));
        assert!(s.next_block().is_some());
        assert!(s.stored(Some(b - 4096 - PAGE)));
        // Forward again: the task ends at its next block.
        assert!(!s.request(b + 4096, b + 8192));
        assert_eq!(s.next_block(), None);
        assert!(!s.running);
    }
}
