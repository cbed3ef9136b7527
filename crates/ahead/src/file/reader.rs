//! A stream over a file with its own position.

use std::io::{self, BufRead, Read, Seek, SeekFrom};

use super::File;

/// A stream over a [`File`] with its own position: `Read + Seek + BufRead`.
pub struct Reader {
    pub(super) file: File,
    pub(super) pos: u64,
    pub(super) buf: Vec<u8>,
    pub(super) buf_start: usize,
    pub(super) buf_len: usize,
}

/// Size of a [`Reader`]'s buffer: 64 KiB, large enough that the per-call
/// cost of a read vanishes next to the copy.
const READER_BUF: usize = 64 << 10;

impl Read for Reader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buf_start == self.buf_len && out.len() >= READER_BUF {
            let n = self.file.read_at(out, self.pos)?;
            self.pos += n as u64;
            return Ok(n);
        }
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Reader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.buf_start == self.buf_len {
            if self.buf.is_empty() {
                self.buf = vec![0; READER_BUF];
            }
            let n = self.file.read_at(&mut self.buf, self.pos)?;
            self.buf_start = 0;
            self.buf_len = n;
        }
        Ok(&self.buf[self.buf_start..self.buf_len])
    }

    fn consume(&mut self, amt: usize) {
        let amt = amt.min(self.buf_len - self.buf_start);
        self.buf_start += amt;
        self.pos += amt as u64;
    }
}

impl Seek for Reader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.file.len().checked_add_signed(d),
        }
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start of the file",
            )
        })?;
        self.buf_start = 0;
        self.buf_len = 0;
        self.pos = new;
        Ok(new)
    }
}
