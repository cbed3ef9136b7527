//! Completing a planned read: the pages it filled become `Ready`, a read
//! that found the end of the file early shrinks the file's known size, a
//! failed read leaves its pages absent (readahead) or `Failed` (demand),
//! and a read planned before the file was found changed fills nothing.
//!
//! Nothing here may panic: it runs on the backend's thread with the lock
//! held, and a panic would poison the lock for every reader of the engine.
//! Counts saturate and a missing file frees the frames.

use super::eviction::Eviction;
use super::hits::HitTable;
use super::{FilePages, Inner, PageCache, Plan, Slot};

impl PageCache {
    /// Completes a planned read: `result` is the byte count read from the
    /// plan's first page on, or the error.
    pub(crate) fn complete(&self, plan: &Plan, result: std::io::Result<usize>) {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.reading = inner.reading.saturating_sub(plan.frames.len());
        let page = self.page as u64;
        let Some(fp) = inner.files.get_mut(&plan.file) else {
            // Not reachable while files outlive their reads (`close_file`
            // keeps a file until its last read completes); if it ever
            // happens, the frames go back rather than leak.
            free_frames(inner, plan.frames.iter().copied());
            self.signal(g);
            return;
        };
        fp.reading = fp.reading.saturating_sub(plan.frames.len());
        let release = if plan.generation != fp.generation {
            stale(fp, plan)
        } else {
            match result {
                Ok(n) => landed(fp, &self.hits, &mut *inner.eviction, plan, n as u64, page),
                Err(e) => failed(fp, plan, e.raw_os_error().unwrap_or(libc::EIO)),
            }
        };
        if fp.closed && fp.reading == 0 {
            inner.files.remove(&plan.file);
        }
        free_frames(inner, release.into_iter());
        let wakers = std::mem::take(&mut inner.wakers);
        self.signal(g);
        for w in wakers {
            w.wake();
        }
    }
}

/// Gives frames back to the free list.
fn free_frames(inner: &mut Inner, frames: impl Iterator<Item = u32>) {
    for f in frames {
        if let Some(o) = inner.owner.get_mut(f as usize) {
            *o = None;
            inner.free.push(f);
        }
    }
}

/// A read planned before the file was found changed: what it read may be
/// the old file; its pages are absent again, and the size stays as the
/// refresh found it. The frames to free.
fn stale(fp: &mut FilePages, plan: &Plan) -> Vec<u32> {
    for k in 0..plan.frames.len() {
        let index = plan.first + k as u64;
        if matches!(fp.pages.get(index), Some(Slot::Reading { .. })) {
            fp.pages.remove(index);
        }
    }
    plan.frames.clone()
}

/// A read that returned `n` bytes: the pages it filled become `Ready`
/// (unless their file was closed meanwhile), a short read shrinks the
/// file's known size. The frames to free.
fn landed(
    fp: &mut FilePages,
    hits: &HitTable,
    eviction: &mut dyn Eviction,
    plan: &Plan,
    n: u64,
    page: u64,
) -> Vec<u32> {
    if n < plan.frames.len() as u64 * page {
        // The end of the file came early: it shrank (or the read ran into
        // the known end). Nothing past it is valid.
        let end = plan.first * page + n;
        if end < fp.size {
            fp.size = end;
            // Pages that now reach past the end are read under the lock
            // only (it clips them).
            for (index, slot) in fp.pages.iter() {
                if let Slot::Ready { frame, .. } = slot {
                    if (index + 1).saturating_mul(page) > end {
                        hits.retract(*frame);
                    }
                }
            }
        }
    }
    let mut release = Vec::new();
    let closed = fp.closed;
    for (k, &frame) in plan.frames.iter().enumerate() {
        let index = plan.first + k as u64;
        let valid = n.saturating_sub(k as u64 * page).min(page);
        // The page becomes `Ready` where its slot is (one look-up).
        let landed = fp.pages.get_mut(index).and_then(|slot| match *slot {
            Slot::Reading {
                speculative,
                marker,
                ..
            } if !closed && valid > 0 => {
                *slot = Slot::Ready {
                    frame,
                    len: valid as u32,
                    marker,
                    unused_ra: speculative,
                    read_ahead: speculative,
                };
                Some((speculative, marker))
            }
            _ => None,
        });
        match landed {
            Some((speculative, marker)) => {
                eviction.insert(frame);
                // Whole and unmarked: readers may take it without the lock
                // from now on, its first use included (counted when the
                // policy replays the request, `Inner::note_used`).
                if !marker && valid == page {
                    if let Some(id) = super::hits::identity(plan.file, index) {
                        hits.publish(frame, id);
                        if speculative {
                            hits.set_fresh(frame);
                        }
                    }
                }
            }
            None => {
                if !closed {
                    fp.pages.remove(index);
                }
                release.push(frame);
            }
        }
    }
    release
}

/// A read that failed with `errno`. A failed readahead leaves its pages
/// absent: a reader that needs one reads it itself and sees its own result
/// (the kernel's behaviour); no reader gets the error of a read it did not
/// ask for. A failed demand read is reported to its readers (each retries
/// its page alone once, see `File::walk`). The frames to free: all.
fn failed(fp: &mut FilePages, plan: &Plan, errno: i32) -> Vec<u32> {
    if !fp.closed {
        for k in 0..plan.frames.len() {
            let index = plan.first + k as u64;
            if plan.speculative {
                fp.pages.remove(index);
            } else {
                fp.pages.insert(index, Slot::Failed { errno });
            }
        }
    }
    plan.frames.clone()
}
