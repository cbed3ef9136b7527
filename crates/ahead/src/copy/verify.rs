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
