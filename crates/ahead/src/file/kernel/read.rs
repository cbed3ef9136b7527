//! An async read through the kernel's cache: the probe on the first poll,
//! the rest handed to the backend, and the slot the backend leaves its
//! result in.

use super::*;

/// Where an async kernel-mode read stands.
#[derive(Default)]
pub(in crate::file) enum KernelRead {
    /// Not started.
    #[default]
    Start,
    /// The probe served `done` bytes; the rest is with the backend.
    Waiting {
        done: usize,
        slot: Arc<Slot>,
        started: Instant,
    },
    /// Finished (polled again after Ready).
    Done,
}

/// Where the backend leaves a completed read and whom to wake.
#[derive(Default)]
pub(in crate::file) struct Slot {
    pub(super) result: Mutex<Option<(ReadOp, std::io::Result<usize>)>>,
    pub(super) waker: Mutex<Option<Waker>>,
}

impl KernelRead {
    /// Polls a read of `buf.len()` bytes at `offset`: the first poll probes
    /// inline and hands the rest to the backend, which never blocks the
    /// caller beyond the probe (unless the backend already has its full
    /// depth in flight); later polls copy the backend's bytes out.
    pub(in crate::file) fn poll(
        &mut self,
        kf: &KernelFile,
        backend: &Arc<dyn Backend>,
        buf: &mut [u8],
        offset: u64,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        loop {
            match std::mem::take(self) {
                KernelRead::Start => {
                    let done = kf.probe(buf, offset);
                    kf.hint(offset, buf.len(), done == buf.len());
                    if done == buf.len() {
                        if buf.is_empty() {
                            add(&kf.counters.empty_requests, 1);
                        }
                        *self = KernelRead::Done;
                        return Poll::Ready(Ok(done));
                    }
                    let rest = buf.len() - done;
                    let at = offset + done as u64;
                    let slot = Arc::new(Slot::default());
                    *slot.waker.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(cx.waker().clone());
                    let before = kf.residency_before(at, rest);
                    let fd = kf.fd.clone();
                    let snap = kf.snapshot.clone();
                    let s = slot.clone();
                    add(&kf.counters.backend_reads, 1);
                    let op = ReadOp {
                        source: kf.fd.clone(),
                        offset: at,
                        len: rest,
                        buf: IoBuf::Owned(AlignedBuf::new(rest, 512)),
                        flags: kf.flags(),
                        // The probe missed (or was skipped for a file that
                        // rarely hits).
                        known_miss: true,
                    };
                    *self = KernelRead::Waiting {
                        done,
                        slot,
                        started: Instant::now(),
                    };
                    backend.submit(
                        op,
                        Box::new(move |op, r| {
                            KernelFile::drop_new(&fd, before);
                            if let (Some(snap), Ok(got)) = (&snap, &r) {
                                snap.read(at, *got as u64);
                            }
                            *s.result.lock().unwrap_or_else(|p| p.into_inner()) = Some((op, r));
                            let w = s.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
                            if let Some(w) = w {
                                w.wake();
                            }
                        }),
                    );
                    // Completed already? Look before sleeping.
                }
                KernelRead::Waiting {
                    done,
                    slot,
                    started,
                } => {
                    let got = slot.result.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let Some((op, r)) = got else {
                        *slot.waker.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(cx.waker().clone());
                        // The completion may have come between the two locks.
                        let got = slot.result.lock().unwrap_or_else(|p| p.into_inner()).take();
                        match got {
                            None => {
                                *self = KernelRead::Waiting {
                                    done,
                                    slot,
                                    started,
                                };
                                return Poll::Pending;
                            }
                            Some(x) => {
                                return Poll::Ready(self.finish(kf, buf, done, started, x));
                            }
                        }
                    };
                    return Poll::Ready(self.finish(kf, buf, done, started, (op, r)));
                }
                KernelRead::Done => return Poll::Ready(Ok(0)),
            }
        }
    }

    pub(super) fn finish(
        &mut self,
        kf: &KernelFile,
        buf: &mut [u8],
        done: usize,
        started: Instant,
        (op, r): (ReadOp, std::io::Result<usize>),
    ) -> std::io::Result<usize> {
        *self = KernelRead::Done;
        add(&kf.counters.backend_ns, nanos(started));
        let n = r?;
        if let IoBuf::Owned(b) = &op.buf {
            buf[done..done + n].copy_from_slice(&b.as_slice()[..n]);
        }
        add(&kf.counters.backend_bytes, n as u64);
        Ok(done + n)
    }
}
