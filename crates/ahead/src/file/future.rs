//! The future of an async read.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{File, Issue};
use crate::Result;

/// The future of [`File::read_at_async`].
pub struct ReadAt<'a> {
    pub(super) file: &'a File,
    pub(super) buf: &'a mut [u8],
    pub(super) offset: u64,
    pub(super) demand: Option<Vec<(u64, u64)>>,
}

impl Future for ReadAt<'_> {
    type Output = Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<usize>> {
        let this = self.get_mut();
        let file = this.file;
        let len = file.piece_len(this.offset, this.buf.len());
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        if this.demand.is_none() {
            this.demand = Some(file.start_piece(this.offset, len as u64, Issue::Backend));
        }
        // Ready when no page of the request is still being read; then the
        // blocking walk below finds everything without waiting (it plans
        // again only what eviction took meanwhile).
        let cache = &file.inner.engine.cache;
        {
            let page = file.page();
            let pages = this.offset / page..(this.offset + len as u64).div_ceil(page);
            let mut g = cache.lock();
            if g.any_reading(file.inner.id, pages) {
                g.add_waker(cx.waker());
                return Poll::Pending;
            }
        }
        let demand = this.demand.take();
        let r = file.read_piece(&mut this.buf[..len], this.offset, Issue::Inline, demand);
        if let Ok(n) = r {
            cache.lock().count(file.inner.id, |s| {
                s.requests += 1;
                s.bytes += n as u64;
            });
        }
        Poll::Ready(r)
    }
}
