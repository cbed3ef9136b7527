//! The resume journal of a copy: which chunks of the destination's
//! temporary file are complete, so that `--resume` after a crash or a
//! `kill -9` redoes only the rest.
//!
//! A text file beside the temporary file. The first line names the source
//! as it was (size, mtime, inode, device) and the chunk size; every further
//! line is the offset of one chunk whose data was written (or which needed
//! no data: a hole). A line is appended only after the chunk's write
//! returned, with one write(2), so the journal never claims a chunk whose
//! data the kernel does not hold. A torn last line (a crash mid-append) is
//! ignored. The journal protects against the process dying; a power cut can
//! lose written data the journal lists, which `--verify` would catch.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What identifies the source and the chunking of one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Source size in bytes.
    pub size: u64,
    /// Source modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Source inode and device.
    pub ino: u64,
    /// Source device.
    pub dev: u64,
    /// Chunk size the offsets are multiples of.
    pub chunk: u64,
}

const MAGIC: &str = "ahead-copy-journal 1";

impl Header {
    /// The header for a source's metadata and a chunk size.
    pub fn of(meta: &fs::Metadata, size: u64, chunk: u64) -> Header {
        Header {
            size,
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ino: meta.ino(),
            dev: meta.dev(),
            chunk,
        }
    }

    fn line(&self) -> String {
        format!(
            "{MAGIC} size={} mtime_ns={} ino={} dev={} chunk={}\n",
            self.size, self.mtime_ns, self.ino, self.dev, self.chunk
        )
    }

    fn parse(line: &str) -> Option<Header> {
        let rest = line.strip_prefix(MAGIC)?.trim();
        let mut h = Header {
            size: 0,
            mtime_ns: 0,
            ino: 0,
            dev: 0,
            chunk: 0,
        };
        let mut seen = 0;
        for field in rest.split_whitespace() {
            let (k, v) = field.split_once('=')?;
            match k {
                "size" => h.size = v.parse().ok()?,
                "mtime_ns" => h.mtime_ns = v.parse().ok()?,
                "ino" => h.ino = v.parse().ok()?,
                "dev" => h.dev = v.parse().ok()?,
                "chunk" => h.chunk = v.parse().ok()?,
                _ => return None,
            }
            seen += 1;
        }
        (seen == 5 && h.chunk > 0).then_some(h)
    }
}

/// An open journal, appended to as chunks complete.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
}

/// What an existing journal said.
#[derive(Debug)]
pub enum Loaded {
    /// No journal (or an unreadable first line): nothing to resume.
    None,
    /// A journal for another source, or for this one before it changed.
    Mismatch,
    /// The chunks already complete.
    Done(HashSet<u64>),
}

impl Journal {
    /// Reads the journal at `path` and checks it against `want`.
    pub fn load(path: &Path, want: &Header) -> io::Result<Loaded> {
        let text = match fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::None),
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&text);
        let mut lines = text.split_inclusive('\n');
        let Some(first) = lines.next().and_then(Header::parse) else {
            return Ok(Loaded::None);
        };
        if first != *want {
            return Ok(Loaded::Mismatch);
        }
        let done = lines
            .filter(|l| l.ends_with('\n'))
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .filter(|off| off % want.chunk == 0 && *off < want.size.max(1))
            .collect();
        Ok(Loaded::Done(done))
    }

    /// Creates (truncating) a journal with `header` as its first line.
    pub fn create(path: &Path, header: &Header) -> io::Result<Journal> {
        let mut file = File::create(path)?;
        file.write_all(header.line().as_bytes())?;
        drop(file);
        Journal::append_to(path)
    }

    /// Opens an existing journal to append to it.
    pub fn append_to(path: &Path) -> io::Result<Journal> {
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Records the chunk at `offset` as complete (one write(2)).
    pub fn done(&self, offset: u64) -> io::Result<()> {
        (&self.file).write_all(format!("{offset}\n").as_bytes())
    }

    /// Where the journal is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            size: 10 << 20,
            mtime_ns: 1_700_000_000_123_456_789,
            ino: 42,
            dev: 7,
            chunk: 1 << 20,
        }
    }

    #[test]
    fn round_trip_and_a_torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        let j = Journal::create(&p, &header()).unwrap();
        j.done(0).unwrap();
        j.done(3 << 20).unwrap();
        drop(j);
        // A crash in the middle of an append.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"52428").unwrap();
        match Journal::load(&p, &header()).unwrap() {
            Loaded::Done(done) => {
                assert_eq!(done, HashSet::from([0, 3 << 20]));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn another_source_or_chunk_size_is_a_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        Journal::create(&p, &header()).unwrap();
        let mut other = header();
        other.mtime_ns += 1;
        assert!(matches!(
            Journal::load(&p, &other).unwrap(),
            Loaded::Mismatch
        ));
        assert!(matches!(
            Journal::load(&dir.path().join("none"), &header()).unwrap(),
            Loaded::None
        ));
        fs::write(&p, "garbage\n0\n").unwrap();
        assert!(matches!(
            Journal::load(&p, &header()).unwrap(),
            Loaded::None
        ));
    }
}
