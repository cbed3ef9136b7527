//! Reading the source: O_DIRECT, RWF_DONTCACHE or plain reads, as the
//! cache mode asks, and the source's identity for the journal.

use std::fs::File;
use std::io::{self};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use std::sync::OnceLock;

use super::journal::SourceId;
use super::place::{Origin, Source, SrcKind};
use super::{aligned, bump, io_err, open_direct, CacheMode, CopyOptions, FlagProbe, Used};
use crate::io::AlignedBuf;
use crate::{residency, sys, Error, Result};

/// Reads a copy's source: a local one as [`SrcReader`] does, an object by
/// one ranged GET per chunk, conditional on the version the copy opened.
pub(super) enum Reader<'a> {
    Local(SrcReader<'a>),
    #[cfg(feature = "remote")]
    Object {
        object: &'a crate::remote::ObjectSource,
        path: &'a Path,
    },
}

impl<'a> Reader<'a> {
    pub(super) fn new(source: &'a Source, opts: &CopyOptions) -> Self {
        match &source.origin {
            Origin::Local { file, .. } => Reader::Local(SrcReader::new(file, &source.path, opts)),
            #[cfg(feature = "remote")]
            Origin::Object(object) => Reader::Object {
                object,
                path: &source.path,
            },
        }
    }

    /// The source's name, for messages.
    pub(super) fn path(&self) -> &Path {
        match self {
            Reader::Local(r) => r.path,
            #[cfg(feature = "remote")]
            Reader::Object { path, .. } => path,
        }
    }

    /// Fills `buf` from `offset`, as [`SrcReader::read_exact_at`].
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self {
            Reader::Local(r) => r.read_exact_at(buf, offset),
            #[cfg(feature = "remote")]
            Reader::Object { object, path } => {
                use crate::io::ReadSource;
                match object.read_at(buf, offset, 0) {
                    Ok(n) if n == buf.len() => Ok(()),
                    Ok(n) => Err(shrank(path, offset + n as u64)),
                    Err(e) => Err(Error::io("read", path, Some(offset), object.explain(e))),
                }
            }
        }
    }

    /// The read paths used, as a report names them.
    pub(super) fn names(&self) -> String {
        match self {
            Reader::Local(r) => r.used.names(),
            #[cfg(feature = "remote")]
            Reader::Object { .. } => "ranged-get".into(),
        }
    }
}

/// Reads from the source without disturbing its cached pages (or with the
/// behaviour of the other modes).
pub(super) struct SrcReader<'a> {
    pub(super) file: &'a File,
    pub(super) path: &'a Path,
    pub(super) mode: CacheMode,
    pub(super) want_direct: bool,
    pub(super) dontcache: FlagProbe,
    pub(super) direct: OnceLock<Option<(File, usize)>>,
    pub(super) used: Used,
}

impl<'a> SrcReader<'a> {
    pub(super) fn new(file: &'a File, path: &'a Path, opts: &CopyOptions) -> Self {
        if opts.cache == CacheMode::Neutral {
            // Chunks are read whole, in one I/O each (Bhattacharya's AIO
            // readahead patch's rule), so the kernel's readahead adds nothing —
            // and what it would read past a chunk that another thread reads
            // with O_DIRECT, or past the last chunk read, would stay cached.
            // Off, for this descriptor only.
            let _ = sys::fadvise(file, 0, 0, rustix::fs::Advice::Random);
        }
        SrcReader {
            file,
            path,
            mode: opts.cache,
            want_direct: opts.direct,
            dontcache: FlagProbe::new(opts.dontcache),
            direct: OnceLock::new(),
            used: Used::default(),
        }
    }

    pub(super) fn direct(&self) -> Option<&(File, usize)> {
        self.direct
            .get_or_init(|| open_direct(self.file, false))
            .as_ref()
    }

    /// Fills `buf` from `offset`; EOF before the end is an error (the source
    /// shrank under the copy).
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self.mode {
            CacheMode::Keep => {
                bump(&self.used.buffered);
                self.fill(self.file, buf, offset, 0)
            }
            CacheMode::Drop => {
                bump(&self.used.buffered);
                self.fill(self.file, buf, offset, 0)?;
                let _ = crate::residency::evict(self.file, offset, buf.len() as u64);
                Ok(())
            }
            CacheMode::Neutral => {
                // Nothing of it cached: O_DIRECT skips the page cache (no
                // page allocated, filled, copied and dropped).
                if self.want_direct
                    && sys::cachestat(self.file, offset, buf.len() as u64)
                        .is_ok_and(|st| st.cached == 0)
                    && self.read_direct(buf, offset)?
                {
                    return Ok(());
                }
                let flagged = || self.fill(self.file, buf, offset, sys::RWF_DONTCACHE);
                if let Some(r) = self.dontcache.attempt(flagged) {
                    if r.is_ok() {
                        bump(&self.used.dontcache);
                    }
                    return r;
                }
                self.read_keeping_residency(buf, offset)
            }
        }
    }

    /// The fallback: look at the chunk's residency now, read, drop only
    /// what was not cached before.
    pub(super) fn read_keeping_residency(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        // (The descriptor's readahead is off, see `new`: otherwise pages past
        // the chunk would look to the next chunk like pages cached before.)
        let len = buf.len() as u64;
        let page = residency::page_size();
        let (first, end) = (offset / page, (offset + len).div_ceil(page));
        let pages = end - first;
        let cached = match sys::cachestat(self.file, first * page, pages * page) {
            Ok(st) => Some(st.cached),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => None,
            Err(_) => residency::page_map(self.file, first * page, pages * page)
                .ok()
                .flatten()
                .map(|m| m.iter().filter(|&&c| c).count() as u64),
        };
        let Some(cached) = cached else {
            // Residency cannot be seen: O_DIRECT neither adds nor drops.
            return self.read_unseen(buf, offset);
        };
        bump(&self.used.residency);
        if cached == 0 {
            self.fill(self.file, buf, offset, 0)?;
            let _ = crate::residency::evict(self.file, offset, len);
            return Ok(());
        }
        if cached >= pages {
            return self.fill(self.file, buf, offset, 0);
        }
        let map = residency::page_map(self.file, first * page, pages * page).map_err(io_err(
            "mincore",
            self.path,
            Some(offset),
        ))?;
        let Some(map) = map else {
            return self.read_unseen(buf, offset);
        };
        self.fill(self.file, buf, offset, 0)?;
        for (s, n) in residency::runs(&map, false) {
            let _ = crate::residency::evict(self.file, (first + s) * page, n * page);
        }
        Ok(())
    }

    pub(super) fn read_unseen(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.read_direct(buf, offset)? {
            return Ok(());
        }
        // No O_DIRECT either: the one case where a neutral copy may leave
        // source pages behind.
        bump(&self.used.buffered);
        self.fill(self.file, buf, offset, 0)
    }

    /// Reads with O_DIRECT, through an aligned bounce buffer when `buf` or
    /// `offset` is not aligned. `false` when O_DIRECT is not available.
    pub(super) fn read_direct(&self, buf: &mut [u8], offset: u64) -> Result<bool> {
        let Some((direct, align)) = self.direct() else {
            return Ok(false);
        };
        let align = *align;
        if aligned(buf, offset, align) {
            self.fill(direct, buf, offset, 0)?;
            bump(&self.used.direct);
            return Ok(true);
        }
        let a = align as u64;
        let start = offset / a * a;
        let end = (offset + buf.len() as u64).div_ceil(a) * a;
        let mut bounce = AlignedBuf::new((end - start) as usize, align);
        let want = (offset - start) as usize + buf.len();
        let mut got = 0;
        while got < want {
            let at = start + got as u64;
            match sys::pread_flags(direct, &mut bounce.as_mut_slice()[got..], at, 0) {
                Ok(0) => return Err(shrank(self.path, at)),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", self.path, Some(at), e)),
            }
        }
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce.as_slice()[skip..skip + buf.len()]);
        bump(&self.used.direct);
        Ok(true)
    }

    pub(super) fn fill(&self, file: &File, buf: &mut [u8], offset: u64, flags: i32) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            match sys::pread_flags(file, &mut buf[done..], at, flags) {
                Ok(0) => return Err(shrank(self.path, at)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", self.path, Some(at), e)),
            }
        }
        Ok(())
    }
}

pub(super) fn shrank(path: &Path, at: u64) -> Error {
    Error::io(
        "read",
        path,
        Some(at),
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the source ended early (truncated during the copy?)",
        ),
    )
}

/// The source's identity, as a journal records it: a file's inode and
/// times, an object's URL and ETag.
pub(super) fn source_id(source: &Source, chunk: u64) -> Option<SourceId> {
    let size = match source.kind {
        SrcKind::Regular(n) | SrcKind::Block(n) => n,
        SrcKind::Stream => return None,
    };
    let (meta, kind) = match &source.origin {
        Origin::Local { meta, .. } => (meta, source.kind),
        #[cfg(feature = "remote")]
        Origin::Object(object) => {
            let tag = object.etag()?;
            let id = format!("{}\n{tag}", object.url());
            return Some(SourceId {
                object: xxhash_rust::xxh3::xxh3_128(id.as_bytes()),
                ..SourceId::blank(size, chunk)
            });
        }
    };
    Some(SourceId {
        size,
        mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        ino: meta.ino(),
        dev: meta.dev(),
        block: matches!(kind, SrcKind::Block(_)),
        chunk,
        object: 0,
    })
}
