//! A read of an object whose engine has a disk tier ([`super::tier`]):
//! the chunks the tier holds are read from it, only the runs of chunks it
//! lacks are fetched from the store (each one ranged GET), and those are
//! kept for the next reader before the read completes.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::tier::{TierObject, CHUNK};
use super::{Body, Request};

impl Request {
    /// [`Request::run`] through the tier: the range widened to whole
    /// chunks, read from the tier where it holds them and fetched where it
    /// does not; `body` gets the range asked for.
    pub(super) async fn run_tiered(
        self,
        tier: Arc<TierObject>,
        body: Body<'_>,
    ) -> io::Result<usize> {
        let (offset, end) = (self.range.start, self.range.end);
        let (first, last) = (offset / CHUNK, end.div_ceil(CHUNK));
        let lo = first * CHUNK;
        let hi = (last * CHUNK).min(tier.size());
        let t = tier.clone();
        let (have, mut whole) = tokio::task::spawn_blocking(move || {
            let mut whole = vec![0u8; (hi - lo) as usize];
            let have = t.read(first, last, &mut whole);
            (have, whole)
        })
        .await
        .map_err(|_| io::Error::other("the disk tier's read ended without an answer"))?;
        let mut fetched = Vec::new();
        let mut i = 0;
        while i < have.len() {
            if have[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < have.len() && !have[i] {
                i += 1;
            }
            let from = lo + start as u64 * CHUNK;
            let to = (lo + i as u64 * CHUNK).min(hi);
            let mut v = Vec::with_capacity((to - from) as usize);
            let part = Request {
                range: from..to,
                tier: None,
                ..self.clone()
            };
            part.fetch(Body::Collect(&mut v)).await?;
            whole[(from - lo) as usize..(to - lo) as usize].copy_from_slice(&v);
            fetched.push((first + start as u64, v));
        }
        let c = &self.counters;
        let hit: u64 = have.iter().filter(|&&h| h).count() as u64;
        c.tier_chunks_hit.fetch_add(hit, Ordering::Relaxed);
        c.tier_chunks_missed
            .fetch_add(have.len() as u64 - hit, Ordering::Relaxed);
        let tier_bytes = (hi - lo) - fetched.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
        c.tier_bytes.fetch_add(tier_bytes, Ordering::Relaxed);
        let part = &whole[(offset - lo) as usize..(end - lo) as usize];
        match body {
            Body::Collect(v) => v.extend_from_slice(part),
            Body::Into(buf) => {
                buf.fill_at(0, part);
            }
        }
        if !fetched.is_empty() {
            // Kept before the read completes, off the runtime's threads: a
            // write queued behind it would be lost with a process that
            // exits without running destructors (multiprocessing's
            // workers, os._exit), and the queue would have no bound. A
            // window is read ahead of its reader, so the write (a few ms
            // for 4 MiB) is rarely waited for.
            let _ = tokio::task::spawn_blocking(move || {
                for (c, v) in fetched {
                    tier.admit(c, &v);
                }
            })
            .await;
        }
        Ok(part.len())
    }
}
