//! Which version of each object the kernel's page cache of its file may
//! hold, so that a file opened on another version never reads it.
//!
//! The kernel keeps one page cache per inode, and an inode is a key: every
//! open of the key shares it, whatever version (ETag) each open pinned.
//! Told to keep its pages at an open (`FOPEN_KEEP_CACHE`), the kernel
//! answered a file opened after the object was replaced by one of the same
//! size with the old object's bytes, read earlier through another handle.
//! So the mount remembers, per inode, the version whose bytes the cache
//! may hold and how many handles of that version are open:
//!
//! * an open of that version keeps the pages ([`Open::Keep`]);
//! * an open of another version, with no handle of the cached one open,
//!   has the kernel drop them ([`Open::Drop`]), and its version is the
//!   cached one from then on;
//! * an open of another version while handles of the cached one are open
//!   (they may put more of its pages in the cache, read or stored) reads
//!   around the cache ([`Open::Bypass`]: `FOPEN_DIRECT_IO`), and is not
//!   counted.
//!
//! An object without an ETag is a version of its own at each open.

use std::collections::HashMap;
use std::sync::Mutex;

/// How the kernel's cache must treat a new handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Open {
    /// The cache holds this version (or nothing): keep it.
    Keep,
    /// The cache may hold another version, and nothing adds to it now:
    /// drop it at this open.
    Drop,
    /// The cache holds another version that open handles still add to:
    /// read around it.
    Bypass,
}

/// The cached version of an inode, and its open handles.
struct Cached {
    etag: Option<String>,
    open: usize,
}

#[derive(Default)]
pub(crate) struct Versions {
    inodes: Mutex<HashMap<u64, Cached>>,
    /// Counted handles and their inodes.
    handles: Mutex<HashMap<u64, u64>>,
}

impl Versions {
    /// Handle `fh` of inode `ino` opened with `etag` pinned.
    pub(crate) fn opened(&self, ino: u64, fh: u64, etag: Option<&str>) -> Open {
        let mut inodes = lock(&self.inodes);
        let open = match inodes.get_mut(&ino) {
            None => {
                inodes.insert(ino, cached(etag));
                if etag.is_some() {
                    Open::Keep
                } else {
                    Open::Drop
                }
            }
            Some(c) if etag.is_some() && c.etag.as_deref() == etag => {
                c.open += 1;
                Open::Keep
            }
            Some(c) if c.open == 0 => {
                *c = cached(etag);
                Open::Drop
            }
            Some(_) => return Open::Bypass,
        };
        lock(&self.handles).insert(fh, ino);
        open
    }

    /// Whether handle `fh` reads through the kernel's cache as its
    /// inode's cached version (not [`Open::Bypass`]).
    pub(crate) fn counted(&self, fh: u64) -> bool {
        lock(&self.handles).contains_key(&fh)
    }

    /// Handle `fh` closed.
    pub(crate) fn released(&self, fh: u64) {
        let Some(ino) = lock(&self.handles).remove(&fh) else {
            return;
        };
        if let Some(c) = lock(&self.inodes).get_mut(&ino) {
            c.open = c.open.saturating_sub(1);
        }
    }
}

fn cached(etag: Option<&str>) -> Cached {
    Cached {
        etag: etag.map(str::to_owned),
        open: 1,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_other_than_the_cached_one_drops_or_bypasses_the_cache() {
        let v = Versions::default();
        assert_eq!(v.opened(1, 10, Some("x")), Open::Keep);
        assert_eq!(v.opened(1, 11, Some("x")), Open::Keep);
        // Another version while handles of "x" are open: around the cache.
        assert_eq!(v.opened(1, 12, Some("y")), Open::Bypass);
        assert!(!v.counted(12));
        v.released(12);
        v.released(10);
        assert_eq!(v.opened(1, 13, Some("y")), Open::Bypass);
        v.released(11);
        // None of "x" open: "y" drops the cache and is cached from now on.
        assert_eq!(v.opened(1, 14, Some("y")), Open::Drop);
        assert_eq!(v.opened(1, 15, Some("y")), Open::Keep);
        assert!(v.counted(14) && v.counted(15));
        // Another inode is its own.
        assert_eq!(v.opened(2, 16, Some("x")), Open::Keep);
        // No ETag: never kept.
        assert_eq!(v.opened(3, 17, None), Open::Drop);
        v.released(17);
        assert_eq!(v.opened(3, 18, None), Open::Drop);
    }
}
