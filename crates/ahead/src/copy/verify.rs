//! Checksums of whole files, read as the copy reads.

use std::fs::File;
use std::path::Path;

use super::source::SrcReader;
use super::{io_err, CopyOptions};
use crate::io::AlignedBuf;
use crate::{Error, Result};

/// `blake3:HEX` of the file at `path` (the whole of it, or of a block
/// device), read as a copy in `opts.cache` mode reads: by default without
/// disturbing the page cache.
pub fn checksum_file(path: &Path, opts: &CopyOptions) -> Result<String> {
    let file = File::open(path).map_err(io_err("open", path, None))?;
    let len = rustix::fs::seek(&file, rustix::fs::SeekFrom::End(0))
        .map_err(|e| Error::io("seek", path, None, e.into()))?;
    checksum(&file, path, len, opts)
}

/// BLAKE3 of the first `len` bytes of `file`, read without disturbing the
/// cache (as the copy reads).
pub(super) fn checksum(file: &File, path: &Path, len: u64, opts: &CopyOptions) -> Result<String> {
    let reader = SrcReader::new(file, path, opts);
    let mut hasher = blake3::Hasher::new();
    let mut buf = AlignedBuf::new(4 << 20, 4096);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        let b = &mut buf.as_mut_slice()[..n];
        reader.read_exact_at(b, at)?;
        hasher.update(b);
        at += n as u64;
    }
    Ok(format!("blake3:{}", hasher.finalize().to_hex()))
}

/// How a digest of per-chunk sums begins (an object's check, see
/// [`chunk_sums`]), as against a whole file's `blake3:`.
pub(super) const CHUNK_SUMS: &str = "xxh3-chunks:";

/// The digest of a copy's per-chunk XXH3-64 sums, in offset order.
pub(super) fn digest_chunk_sums(sums: impl Iterator<Item = u64>) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for s in sums {
        h.update(&s.to_le_bytes());
    }
    format!("{CHUNK_SUMS}{:032x}", h.digest128())
}

/// [`digest_chunk_sums`] of the first `len` bytes of `file` in `chunk`s,
/// read without disturbing the cache: what a copy whose source cannot be
/// read twice (an object) compares with the sums taken as it arrived.
pub(super) fn chunk_sums(
    file: &File,
    path: &Path,
    len: u64,
    chunk: u64,
    opts: &CopyOptions,
) -> Result<String> {
    let reader = SrcReader::new(file, path, opts);
    let mut buf = AlignedBuf::new(chunk as usize, 4096);
    let mut sums = Vec::with_capacity(len.div_ceil(chunk.max(1)) as usize);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(chunk) as usize;
        let b = &mut buf.as_mut_slice()[..n];
        reader.read_exact_at(b, at)?;
        sums.push(xxhash_rust::xxh3::xxh3_64(b));
        at += n as u64;
    }
    Ok(digest_chunk_sums(sums.into_iter()))
}
