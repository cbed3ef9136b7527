//! Closed files whose pages the cache keeps for the next open.
//!
//! The kernel keeps a file's pages after it is closed: a program that
//! opens a file again, or a process that reads a file through one handle
//! after another (pyarrow opens a Parquet file for its footer and again
//! for its columns; a Python loop opens each file every round), reads
//! them from memory. ahead's cache dropped a file's pages at its close, so
//! a Direct-mode file read again read the device again, where the kernel
//! would have served it from memory. Now the last handle of a regular file
//! leaves its pages in the cache, evicted as any other pages are, under
//! the file's identity (device and inode) and the version they were read
//! at (size, modification and change times, [`crate::io::Version`]). An
//! open of the same identity at the same version takes them back; at any
//! other version they are dropped and it starts empty.
//!
//! An object is kept the same way, under a hash of its store and name,
//! at its size and ETag, when its open asked the store for them (a HEAD);
//! one opened from a listing's size and ETag, which may be as old as the
//! listing, is not, nor one without an ETag.
//!
//! Bounded by [`KEPT_FILES`]: the oldest kept file beyond it is dropped.
//! A file open on two handles at once has two sets of pages, as before.

use std::collections::{HashMap, VecDeque};

use super::FileId;
use crate::io::Version;

/// A file's identity: its device and inode numbers (an object's: 128 bits
/// of hash of its store and name).
pub(crate) type Identity = (u64, u64);

/// How many closed files keep their pages at most. Their pages are
/// bounded by the cache itself; this bounds their page tables and shadows
/// (a file all of whose pages were evicted still has its shadows). The
/// kernel keeps any number; 1,024 is more files than the cache's 256 MiB
/// holds at a few hundred KiB each.
pub(crate) const KEPT_FILES: usize = 1024;

/// The closed files kept, oldest first.
#[derive(Default)]
pub(crate) struct Kept {
    by_identity: HashMap<Identity, (FileId, Version)>,
    /// In order of closing; an entry whose file was taken back or replaced
    /// is skipped when it comes up.
    order: VecDeque<(Identity, FileId)>,
}

impl Kept {
    /// Keeps file `id`, closed at `version`. The files to drop: one kept
    /// before under the same identity, and the oldest beyond the bound.
    pub(crate) fn insert(
        &mut self,
        identity: Identity,
        id: FileId,
        version: Version,
    ) -> Vec<FileId> {
        let mut drop = Vec::new();
        if let Some((old, _)) = self.by_identity.insert(identity, (id, version)) {
            drop.push(old);
        }
        self.order.push_back((identity, id));
        while self.by_identity.len() > KEPT_FILES {
            let Some((identity, id)) = self.order.pop_front() else {
                break;
            };
            if self
                .by_identity
                .get(&identity)
                .is_some_and(|&(i, _)| i == id)
            {
                self.by_identity.remove(&identity);
                drop.push(id);
            }
        }
        // Stale entries are dropped as they come up; never more than twice
        // the files kept.
        if self.order.len() > 2 * self.by_identity.len() + 16 {
            let live = &self.by_identity;
            self.order
                .retain(|(identity, id)| live.get(identity).is_some_and(|&(i, _)| i == *id));
        }
        drop
    }

    /// The file kept under `identity`, no longer kept.
    pub(crate) fn take(&mut self, identity: Identity) -> Option<(FileId, Version)> {
        self.by_identity.remove(&identity)
    }

    /// How many files are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_identity.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(size: u64) -> Version {
        Version { size, tag: 7 }
    }

    #[test]
    fn one_file_an_identity_and_the_oldest_dropped_beyond_the_bound() {
        let mut k = Kept::default();
        assert!(k.insert((1, 1), 10, v(1)).is_empty());
        // The same file closed again on another handle: the first goes.
        assert_eq!(k.insert((1, 1), 11, v(1)), vec![10]);
        assert_eq!(k.take((1, 1)), Some((11, v(1))));
        assert_eq!(k.take((1, 1)), None);
        for i in 0..KEPT_FILES as u64 {
            assert!(k.insert((2, i), 100 + i, v(i)).is_empty());
        }
        // One more: the oldest (inode 0) goes.
        assert_eq!(k.insert((3, 0), 5000, v(0)), vec![100]);
        assert_eq!(k.len(), KEPT_FILES);
        assert_eq!(k.take((2, 0)), None);
        // A file taken back is not dropped later as the oldest.
        assert_eq!(k.take((2, 1)), Some((101, v(1))));
        assert!(k.insert((3, 1), 5001, v(0)).is_empty());
        assert_eq!(k.insert((3, 2), 5002, v(0)), vec![102]);
        assert!(k.order.len() <= 2 * k.len() + 16);
    }
}
