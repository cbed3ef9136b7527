//! The `copy` pattern: the large object downloaded to a local file, fsynced,
//! by `ahead copy`'s engine ([`ahead::copy::download_object`]: 8 MiB ranged
//! GETs, `COPY_DEPTH` at once, cache-neutral) beside what a Rust user
//! writes with object_store: its `BufReader` copied into a file, and one
//! GET streamed into a file. The destination is read back and checked
//! byte by byte after each run, outside the clock.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use object_store::ObjectStoreExt;
use tokio::io::AsyncReadExt;

use super::{Objects, RemoteConfig};
use crate::{Error, Result};

/// Chunks of `ahead copy` in flight for an object, as the CLI has them:
/// 8 MiB GETs 8 at a time reached 0.85 of the s3 profile's oracle, 16 at a
/// time 0.95 (16 MiB GETs: 0.88 and 0.94; bench remote --patterns copy,
/// 2 repetitions each).
pub const COPY_DEPTH: usize = 16;

/// Copies the large object to a file in `dir` with `engine`; (bytes
/// copied, seconds). The readers other than ahead stop at the run's time
/// limit with what they copied so far.
pub(super) fn copy_engine(
    engine: &str,
    objs: &Objects,
    cfg: &RemoteConfig,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
) -> Result<(u64, f64)> {
    let dst = dir.join("copy.out");
    let _ = std::fs::remove_file(&dst);
    let store = objs.connect.store()?;
    let path = objs.paths[0].clone();
    let deadline = Duration::from_secs_f64(cfg.seconds);
    let started = Instant::now();
    let bytes = match engine {
        "ahead" => {
            let mut opts = ahead::copy::CopyOptions::default();
            opts.depth = COPY_DEPTH;
            let r = ahead::copy::download_object(store, path, "bench/big", &dst, &opts, &|_| {})?;
            r.totals.bytes
        }
        "naive" => rt.block_on(async {
            let mut out = std::fs::File::create(&dst)?;
            let mut body = store.get(&path).await.map_err(msg)?.into_stream();
            let mut n = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(msg)?;
                out.write_all(&chunk)?;
                n += chunk.len() as u64;
                if started.elapsed() > deadline {
                    break;
                }
            }
            out.sync_all()?;
            Ok::<_, Error>(n)
        })?,
        _ => rt.block_on(async {
            let meta = store.head(&path).await.map_err(msg)?;
            let mut reader = object_store::buffered::BufReader::new(store.clone(), &meta);
            let mut out = std::fs::File::create(&dst)?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let k = reader.read(&mut buf).await?;
                if k == 0 || started.elapsed() > deadline {
                    break;
                }
                out.write_all(&buf[..k])?;
                n += k as u64;
            }
            out.sync_all()?;
            Ok::<_, Error>(n)
        })?,
    };
    let secs = started.elapsed().as_secs_f64();
    check(&dst, bytes)?;
    let _ = std::fs::remove_file(&dst);
    Ok((bytes, secs))
}

fn msg(e: object_store::Error) -> Error {
    Error::msg(e.to_string())
}

/// The first `len` bytes of `dst` are the large object's (read in 8 MiB
/// pieces: the run's peak memory is measured after).
fn check(dst: &Path, len: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(dst)?;
    let mut buf = vec![0u8; 8 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        super::expect_ok(&buf[..n], 0, at)?;
        at += n as u64;
    }
    Ok(())
}
