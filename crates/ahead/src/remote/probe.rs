//! Measuring an endpoint through one of its objects (`ahead doctor URL`).

use std::io;
use std::time::{Duration, Instant};

use object_store::{GetOptions, GetRange, ObjectStoreExt};

use super::{io_error, store_for_url, Runtime};

/// What [`probe`] measured of an endpoint, through one object.
#[derive(Clone, Debug)]
pub struct Probe {
    /// The object's size.
    pub size: u64,
    /// Its ETag, if the server gives one.
    pub etag: Option<String>,
    /// The HEAD's round trip.
    pub head: Duration,
    /// Time to the first byte of a 4 KiB GET, the median of three.
    pub first_byte: Duration,
    /// One connection's throughput: bytes per second of one GET of up to
    /// 16 MiB, its first byte excluded.
    pub bytes_per_sec: f64,
    /// The bytes that GET brought.
    pub probe_bytes: u64,
}

/// Measures the endpoint behind `url` with the object it names: a HEAD,
/// three small GETs (first-byte latency), one large GET (one connection's
/// throughput), on a runtime of its own. What `ahead doctor URL` prints.
pub fn probe(url: &str) -> io::Result<Probe> {
    let (store, path) = store_for_url(url)?;
    let url = url.to_owned();
    let rt = Runtime::new(1)?;
    rt.run(async move {
        let err = |e| io_error(&url, e);
        let t = Instant::now();
        let meta = store.head(&path).await.map_err(err)?;
        let head = t.elapsed();
        let size = meta.size;
        let mut first = Vec::new();
        for i in 0..3u64 {
            let at = (size / 3 * i).min(size.saturating_sub(4096));
            let t = Instant::now();
            let got = store
                .get_opts(
                    &path,
                    GetOptions {
                        range: Some(GetRange::Bounded(at..(at + 4096).min(size))),
                        ..GetOptions::default()
                    },
                )
                .await
                .map_err(err)?;
            first.push(t.elapsed());
            got.bytes().await.map_err(err)?;
        }
        first.sort();
        let n = size.min(16 << 20);
        let t = Instant::now();
        let got = store
            .get_opts(
                &path,
                GetOptions {
                    range: Some(GetRange::Bounded(0..n)),
                    ..GetOptions::default()
                },
            )
            .await
            .map_err(err)?;
        let after_first = t.elapsed();
        let body = got.bytes().await.map_err(err)?;
        let transfer = t
            .elapsed()
            .saturating_sub(after_first)
            .max(Duration::from_micros(1));
        Ok(Probe {
            size,
            etag: meta.e_tag,
            head,
            first_byte: first.get(1).copied().unwrap_or_default(),
            bytes_per_sec: body.len() as f64 / transfer.as_secs_f64(),
            probe_bytes: body.len() as u64,
        })
    })
    .and_then(|r| r)
}
