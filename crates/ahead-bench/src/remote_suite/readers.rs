//! How each engine reads a plan: ahead through a `File`, one GET per
//! read, and object_store's `BufReader`; each checks every byte.

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;

use super::{expect_ok, Objects};
use crate::{Error, Result};

/// Reads `reads` in batches of `depth` with `fetch` (one batch's buffers,
/// in order) until the deadline: every byte checked, each read's latency
/// its batch's; the bytes read.
fn in_batches<B: AsRef<[u8]>>(
    reads: &[(usize, u64, u64)],
    depth: usize,
    (started, deadline): (Instant, Duration),
    lat: &mut Vec<f64>,
    mut fetch: impl FnMut(&[(usize, u64, u64)]) -> Result<Vec<B>>,
) -> Result<u64> {
    let mut done = 0;
    for batch in reads.chunks(depth) {
        if started.elapsed() > deadline {
            break;
        }
        let t = Instant::now();
        let bufs = fetch(batch)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        for (r, b) in batch.iter().zip(&bufs) {
            expect_ok(b.as_ref(), r.0, r.1)?;
            done += r.2;
            lat.push(us);
        }
    }
    Ok(done)
}

pub(super) fn read_ahead(
    files: &[Option<ahead::File>],
    reads: &[(usize, u64, u64)],
    depth: usize,
    started: Instant,
    deadline: Duration,
    lat: &mut Vec<f64>,
) -> Result<u64> {
    in_batches(reads, depth, (started, deadline), lat, |batch| {
        let mut bufs: Vec<Vec<u8>> = batch.iter().map(|r| vec![0u8; r.2 as usize]).collect();
        let file = files[batch[0].0]
            .as_ref()
            .ok_or_else(|| Error::msg("no file"))?;
        if batch.len() == 1 {
            file.read_at(&mut bufs[0], batch[0].1)?;
        } else {
            let mut reqs: Vec<(u64, &mut [u8])> = batch
                .iter()
                .zip(bufs.iter_mut())
                .map(|(r, b)| (r.1, b.as_mut_slice()))
                .collect();
            for r in file.read_many(&mut reqs) {
                r?;
            }
        }
        Ok(bufs)
    })
}

pub(super) fn read_naive(
    objs: &Objects,
    reads: &[(usize, u64, u64)],
    depth: usize,
    started: Instant,
    deadline: Duration,
    rt: &tokio::runtime::Runtime,
    lat: &mut Vec<f64>,
) -> Result<u64> {
    in_batches(reads, depth, (started, deadline), lat, |batch| {
        let got = rt.block_on(async {
            let futs = batch.iter().map(|&(o, off, len)| {
                let store = objs.store.clone();
                let path = objs.paths[o].clone();
                async move { store.get_range(&path, off..off + len).await }
            });
            let mut out = Vec::new();
            for f in futs.map(tokio::spawn).collect::<Vec<_>>() {
                out.push(f.await);
            }
            out
        });
        got.into_iter()
            .map(|g| {
                g.map_err(|e| Error::msg(e.to_string()))?
                    .map_err(|e| Error::msg(e.to_string()))
            })
            .collect()
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn read_bufreader(
    objs: &Objects,
    metas: &Arc<std::collections::HashMap<usize, object_store::ObjectMeta>>,
    reads: &[(usize, u64, u64)],
    depth: usize,
    started: Instant,
    deadline: Duration,
    rt: &tokio::runtime::Runtime,
    lat: &mut Vec<f64>,
) -> Result<u64> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    // Depth: as many readers, each with its own BufReader (one BufReader
    // has one request at a time); reads dealt out in turn.
    rt.block_on(async {
        let mut tasks = Vec::new();
        for lane in 0..depth {
            let mine: Vec<(usize, u64, u64)> =
                reads.iter().skip(lane).step_by(depth).copied().collect();
            let (store, metas) = (objs.store.clone(), metas.clone());
            tasks.push(tokio::spawn(async move {
                let mut readers: std::collections::HashMap<
                    usize,
                    object_store::buffered::BufReader,
                > = Default::default();
                let (mut done, mut lat) = (0u64, Vec::new());
                for (o, off, len) in mine {
                    if started.elapsed() > deadline {
                        break;
                    }
                    let t = Instant::now();
                    let r = readers.entry(o).or_insert_with(|| {
                        object_store::buffered::BufReader::new(store.clone(), &metas[&o])
                    });
                    let mut buf = vec![0u8; len as usize];
                    r.seek(std::io::SeekFrom::Start(off)).await?;
                    r.read_exact(&mut buf).await?;
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                    expect_ok(&buf, o, off).map_err(|e| std::io::Error::other(e.to_string()))?;
                    done += len;
                }
                Ok::<_, std::io::Error>((done, lat))
            }));
        }
        let mut total = 0;
        for t in tasks {
            let (d, l) = t
                .await
                .map_err(|e| Error::msg(e.to_string()))?
                .map_err(Error::from)?;
            total += d;
            lat.extend(l);
        }
        Ok(total)
    })
}
