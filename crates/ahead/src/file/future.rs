//! The futures of async reads: one that borrows its buffer and one that
//! owns it (so that it can be spawned).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::kernel::KernelRead;
use super::{File, Issue};
use crate::{Error, Result};

/// Where an async read stands, in either kind of file.
#[derive(Default)]
pub(super) struct State {
    /// Direct: the demand reads planned by the first poll.
    demand: Option<Vec<(u64, u64)>>,
    /// Buffered and Uncached: the probe and the backend's read.
    kernel: KernelRead,
}

/// The future of [`File::read_at_async`].
pub struct ReadAt<'a> {
    pub(super) file: &'a File,
    pub(super) buf: &'a mut [u8],
    pub(super) offset: u64,
    pub(super) state: State,
}

/// The future of [`File::read_owned`]: owns its file handle and buffer, so
/// it is `'static` and can be spawned; gives the buffer back with the
/// result, as io-uring and tokio-uring do.
pub struct ReadOwned {
    pub(super) file: File,
    pub(super) buf: Option<Vec<u8>>,
    pub(super) offset: u64,
    pub(super) state: State,
}

/// Polls a read of `buf.len()` bytes at `offset` (at most one piece in
/// Direct mode, as [`File::read_at_async`] documents).
fn poll_read(
    file: &File,
    buf: &mut [u8],
    offset: u64,
    st: &mut State,
    cx: &mut Context<'_>,
) -> Poll<Result<usize>> {
    if let Some(k) = file.kernel() {
        return st
            .kernel
            .poll(k, file.inner.engine.buffered_backend(), buf, offset, cx)
            .map_err(|e| file.io_error("read", offset, e));
    }
    let len = file.piece_len(offset, buf.len());
    if len == 0 {
        return Poll::Ready(Ok(0));
    }
    if st.demand.is_none() {
        st.demand = Some(file.start_piece(offset, len as u64, Issue::Backend));
    }
    // Ready when no page of the request is still being read; then the
    // blocking walk below finds everything without waiting (it plans
    // again only what eviction took meanwhile).
    let cache = &file.inner.engine.cache;
    {
        let page = file.page();
        let pages = offset / page..(offset + len as u64).div_ceil(page);
        let mut g = cache.lock();
        if g.any_reading(file.inner.id, pages) {
            g.add_waker(cx.waker());
            return Poll::Pending;
        }
    }
    let demand = st.demand.take();
    let r = file.read_piece(&mut buf[..len], offset, Issue::Inline, demand);
    if let Ok(n) = r {
        file.served(n as u64);
    }
    Poll::Ready(r)
}

impl Future for ReadAt<'_> {
    type Output = Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<usize>> {
        let this = self.get_mut();
        poll_read(this.file, this.buf, this.offset, &mut this.state, cx)
    }
}

impl Future for ReadOwned {
    type Output = (Vec<u8>, Result<usize>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(buf) = this.buf.as_mut() else {
            let e = Error::Invalid {
                what: "read_owned",
                why: "polled again after it completed".into(),
            };
            return Poll::Ready((Vec::new(), Err(e)));
        };
        match poll_read(&this.file, buf, this.offset, &mut this.state, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => Poll::Ready((this.buf.take().unwrap_or_default(), r)),
        }
    }
}

/// Runs a future to completion on the calling thread, parking it until the
/// future's waker is called: for a caller without an executor, who wants
/// one of [`File`]'s async reads (or several at once, joined) without
/// taking on one. Any executor (tokio, smol, async-std) drives these
/// futures as well.
///
/// ```
/// # let path = ahead::testdata::scratch_root().join(format!("ahead-block-on-{}", std::process::id()));
/// # ahead::testdata::write_file(&path, 1 << 20).unwrap();
/// let engine = ahead::Engine::new(ahead::EngineConfig::default())?;
/// let file = engine.open(&path)?;
/// let mut buf = vec![0u8; 4096];
/// let n = ahead::block_on(file.read_at_async(&mut buf, 8192))?;
/// assert_eq!(n, 4096);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), ahead::Error>(())
/// ```
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        // A wake before this park makes it return at once.
        std::thread::park();
    }
}
