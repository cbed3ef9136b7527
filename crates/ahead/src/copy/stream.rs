//! Copying a stream (a pipe, a socket, a character device) in order.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use super::dest::DstWriter;
use super::{cancelled, interrupted, CopyOptions, Progress};
use crate::{Error, Result};

/// Copies a stream (pipe, socket, character device) in order; returns the
/// bytes copied and, when verifying, the BLAKE3 of what was read.
pub(super) fn copy_stream(
    src: &File,
    src_path: &Path,
    writer: &DstWriter<'_>,
    chunk: u64,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<(u64, Option<String>)> {
    let mut buf = vec![0u8; chunk as usize];
    let mut windows = VecDeque::new();
    let mut hasher = opts.verify.then(blake3::Hasher::new);
    let mut offset = 0u64;
    let mut src = src;
    let result = (|| -> Result<()> {
        loop {
            if cancelled(opts) {
                return Err(interrupted(src_path));
            }
            let mut filled = 0;
            while filled < buf.len() {
                match src.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(Error::io("read", src_path, Some(offset + filled as u64), e))
                    }
                }
            }
            if filled == 0 {
                return Ok(());
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&buf[..filled]);
            }
            writer.write_all_at(&buf[..filled], offset, &mut windows)?;
            offset += filled as u64;
            progress(Progress {
                done: offset,
                total: None,
            });
        }
    })();
    let drained = writer.drain(&mut windows);
    result.and(drained)?;
    Ok((
        offset,
        hasher.map(|h| format!("blake3:{}", h.finalize().to_hex())),
    ))
}
