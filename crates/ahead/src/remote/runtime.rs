//! The engine's runtime for object requests, and its depth of requests
//! in flight.

use std::io;
use std::sync::Arc;

use super::depth;

/// The engine's runtime for object requests: two worker threads (the
/// requests wait on the network, not on the CPU), shut down without
/// waiting when the engine goes, so that an engine dropped inside a
/// caller's own runtime does not panic.
pub(crate) struct Runtime {
    rt: Option<tokio::runtime::Runtime>,
    /// Requests in flight, engine-wide: the engine's depth to begin
    /// with, grown to what the path holds ([`depth::Depth`]).
    pub(super) depth: Arc<depth::Depth>,
}

impl Runtime {
    pub(crate) fn new(depth: usize) -> io::Result<Runtime> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ahead-remote")
            .enable_all()
            .build()?;
        Ok(Runtime {
            rt: Some(rt),
            depth: Arc::new(depth::Depth::new(depth)),
        })
    }

    /// How many requests it keeps in flight at most, now.
    pub(crate) fn depth(&self) -> usize {
        self.depth.now()
    }

    /// What sizes that number.
    #[cfg(test)]
    pub(crate) fn depth_meter(&self) -> &depth::Depth {
        &self.depth
    }

    pub(crate) fn handle(&self) -> tokio::runtime::Handle {
        match &self.rt {
            Some(rt) => rt.handle().clone(),
            None => unreachable!("the runtime is only taken when dropped"),
        }
    }

    /// Runs `fut` on the runtime and waits for it on this thread, which
    /// may be any thread (a caller's, a backend's, or a worker of the
    /// caller's own runtime: the wait is a channel, never `block_on`).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = tx.send(fut.await);
        });
        // The task is dropped unfinished only if it panicked or the
        // runtime is shutting down: an error, never a panic here.
        rx.recv()
            .map_err(|_| io::Error::other("the request's task ended without an answer"))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
