//! Listing ahead of a walk. `find`, `du`, `ls -R` and `rsync` open every
//! directory under one, and a listing with a delimiter per directory costs
//! them a round trip each: 111 for a tree of 2,000 keys. A listing without
//! a delimiter gives every key under a prefix, a thousand to a page, and
//! every directory it passed whole is listed by it.
//!
//! So, as the kernel's readahead waits for a second sequential read, the
//! mount waits for a program to open a second directory of one it listed
//! (the first might be a single `cd`). Then it lists the parent's keys from
//! that directory on, one page ([`WALK_KEYS`]), and keeps the listing of
//! every directory the page covered whole, marked as read ahead. The
//! directory's `opendir` takes its listing from there, once; a later
//! `opendir` lists it again, as always. When the walk reaches a directory
//! past the page, that directory is again the second of its parent, and the
//! next page is listed from there.
//!
//! A listing read ahead is used only within the metadata TTL, as every
//! other listing; with a TTL of 0 nothing is read ahead.

use std::collections::BTreeMap;
use std::io;
use std::time::UNIX_EPOCH;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;

use crate::listing::{Kids, Listing};
use crate::{Node, ObjectFs};

/// Keys listed ahead at a time: one page of `ListObjectsV2` (S3's and
/// Ceph's largest and default `max-keys`), so a walk waits one round trip
/// per thousand keys, and what it is given is at most one page old.
pub(crate) const WALK_KEYS: usize = 1000;

/// A directory's children as a listing without a delimiter showed them:
/// subdirectories' names and files, each in key order.
#[derive(Debug, PartialEq)]
struct Seen<T> {
    dirs: Vec<String>,
    files: Vec<(String, T)>,
}

impl<T> Default for Seen<T> {
    fn default() -> Seen<T> {
        Seen {
            dirs: Vec::new(),
            files: Vec::new(),
        }
    }
}

/// The directories a page of a listing without a delimiter shows whole,
/// with their children: `page` is the keys (relative to the mount) under
/// directory `parent`, in order, from the first after `from`, a child of
/// `parent`; `done` if the listing ended with it. A directory is whole if
/// its keys all sort after `from` and the page ended past them; `parent`
/// itself never is.
fn whole_dirs<T>(
    page: impl Iterator<Item = (String, T)>,
    parent: &str,
    from: &str,
    done: bool,
) -> BTreeMap<String, Seen<T>> {
    let depth = if parent.is_empty() {
        0
    } else {
        parent.split('/').count()
    };
    let mut seen: BTreeMap<String, Seen<T>> = BTreeMap::new();
    let mut last = String::new();
    for (rel, item) in page {
        // Every directory from the parent's child to the key's own, each
        // with the next part as its child.
        last.clone_from(&rel);
        let parts: Vec<&str> = rel.split('/').collect();
        let n = parts.len();
        let under = parent.is_empty() || rel.starts_with(&format!("{parent}/"));
        if !under || n < depth + 2 || parts.iter().any(|p| p.is_empty()) {
            continue;
        }
        for i in depth..n - 2 {
            let e = seen.entry(parts[..=i].join("/")).or_default();
            if e.dirs.last().map(String::as_str) != Some(parts[i + 1]) {
                e.dirs.push(parts[i + 1].to_owned());
            }
        }
        let name = parts[n - 1].to_owned();
        seen.entry(parts[..n - 1].join("/"))
            .or_default()
            .files
            .push((name, item));
    }
    seen.retain(|dir, _| {
        let slash = format!("{dir}/");
        slash.as_str() > from && (done || !last.starts_with(&slash))
    });
    seen
}

impl ObjectFs {
    /// The children of directory `ino` for its `opendir`: a listing read
    /// ahead for it if there is one (used once), else one read ahead now
    /// if a walk of its parent is seen, else a listing of its own.
    pub(crate) fn opendir_listing(&self, ino: u64) -> io::Result<Kids> {
        if self.single.is_some() || self.metadata_ttl.is_zero() {
            return self.list(ino);
        }
        let walk = self.walked_into(ino);
        if let Some(kids) = self.take_ahead(ino) {
            return Ok(kids);
        }
        if let Some(key) = walk {
            if let Some(kids) = self.list_ahead(ino, &key)? {
                return Ok(kids);
            }
        }
        self.list(ino)
    }

    /// A listing read ahead for `ino`, not yet used and within the TTL.
    fn take_ahead(&self, ino: u64) -> Option<Kids> {
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let l = tree.children.get_mut(&ino)?;
        if !l.ahead || l.at.elapsed() >= self.metadata_ttl {
            return None;
        }
        l.ahead = false;
        Some(l.kids.clone())
    }

    /// Counts the opening of directory `ino` in its parent's listing
    /// (whether read ahead or not), and returns `ino`'s key if it is the
    /// second directory of that listing the program opened: a walk.
    fn walked_into(&self, ino: u64) -> Option<String> {
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let key = tree.nodes.get(&ino).filter(|n| n.dir)?.key.clone();
        if key.is_empty() {
            return None;
        }
        let parent = key.rsplit_once('/').map_or("", |(p, _)| p).to_owned();
        let &up = tree.by_key.get(&(true, parent))?;
        let l = tree
            .children
            .get_mut(&up)
            .filter(|l| l.at.elapsed() < self.metadata_ttl)?;
        l.opened += 1;
        (l.opened >= 2).then_some(key)
    }

    /// Lists the parent of directory `key` without a delimiter, from `key`
    /// on, for [`WALK_KEYS`] keys, and keeps the listing of every directory
    /// the page covered whole. Returns `key`'s children (its listing then
    /// used), or `None` where the page ended inside it.
    fn list_ahead(&self, ino: u64, key: &str) -> io::Result<Option<Kids>> {
        let parent = key.rsplit_once('/').map_or("", |(p, _)| p);
        let full_parent = format!("{}{parent}", self.prefix);
        let at = ObjectPath::from(full_parent.trim_end_matches('/'));
        let from = ObjectPath::from(format!("{}{key}", self.prefix).as_str());
        let store = self.store.clone();
        let (metas, done) = self
            .runtime
            .block_on(async move {
                let prefix = (!at.as_ref().is_empty()).then_some(&at);
                let mut s = store.list_with_offset(prefix, &from);
                let mut metas = Vec::new();
                while metas.len() < WALK_KEYS {
                    match s.next().await {
                        Some(m) => metas.push(m?),
                        None => return Ok::<_, object_store::Error>((metas, true)),
                    }
                }
                Ok((metas, false))
            })
            .map_err(|e| io::Error::other(format!("{}: list {full_parent}: {e}", self.url)))?;
        let page = metas
            .into_iter()
            .filter_map(|m| Some((self.relative(&m.location)?, m)));
        let whole = whole_dirs(page, parent, key, done);
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let mtime = tree.nodes.get(&ino).map_or(UNIX_EPOCH, |n| n.mtime);
        let mut mine = None;
        for (dir, s) in whole {
            let mut kids = Vec::with_capacity(s.dirs.len() + s.files.len());
            for name in s.dirs {
                let child = tree.insert(Node {
                    key: format!("{dir}/{name}"),
                    dir: true,
                    size: 0,
                    mtime,
                    listed: None,
                });
                kids.push((name, child));
            }
            for (name, o) in s.files {
                let child = tree.insert(Node::object(format!("{dir}/{name}"), &o));
                kids.push((name, child));
            }
            let mut listing = Listing::new(kids);
            let d = tree.insert(Node {
                key: dir.clone(),
                dir: true,
                size: 0,
                mtime,
                listed: None,
            });
            if d == ino {
                mine = Some(listing.kids.clone());
            } else {
                listing.ahead = true;
            }
            tree.children.insert(d, listing);
        }
        Ok(mine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Directory `dir`'s children as a listing with a delimiter gives them
    /// (the model): the distinct next parts of the keys under it that go
    /// deeper, and the keys directly in it, each in key order.
    fn delimited(keys: &[String], dir: &str) -> Seen<usize> {
        let mut out = Seen::default();
        let pre = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        for (i, k) in keys.iter().enumerate() {
            let Some(rest) = k.strip_prefix(&pre) else {
                continue;
            };
            match rest.split_once('/') {
                Some((d, _)) => {
                    if out.dirs.last().map(String::as_str) != Some(d) {
                        out.dirs.push(d.to_owned());
                    }
                }
                None => out.files.push((rest.to_owned(), i)),
            }
        }
        out
    }

    /// Keys of up to four parts from a small alphabet (with `!`, which
    /// sorts before `/`, and `.` next to it), sorted and distinct.
    fn keys() -> impl Strategy<Value = Vec<String>> {
        let part = proptest::sample::select(vec!["a", "b", "a!", "a.", "b!c", "z"]);
        proptest::collection::btree_set(proptest::collection::vec(part, 1..5), 0..60)
            .prop_map(|s| s.into_iter().map(|p| p.join("/")).collect::<Vec<_>>())
            .prop_map(|mut v: Vec<String>| {
                v.sort();
                v.dedup();
                v
            })
    }

    proptest! {
        /// Every directory a page shows whole has exactly the children a
        /// delimited listing of it would give; a page that ends the
        /// listing shows every directory after `from` whole; `parent`
        /// never is.
        #[test]
        fn a_page_lists_whole_directories_as_a_delimited_listing_would(
            keys in keys(),
            pick in 0usize..1000,
            size in 1usize..40,
        ) {
            // The parent and `from`: a directory of the key set and one
            // of its child directories.
            let mut pairs = Vec::new();
            for k in &keys {
                let parts: Vec<&str> = k.split('/').collect();
                for i in 0..parts.len().saturating_sub(1) {
                    pairs.push((parts[..i].join("/"), parts[..=i].join("/")));
                }
            }
            prop_assume!(!pairs.is_empty());
            let (parent, from) = pairs[pick % pairs.len()].clone();
            let pre = if parent.is_empty() { String::new() } else { format!("{parent}/") };
            let after: Vec<(String, usize)> = keys
                .iter()
                .enumerate()
                .filter(|(_, k)| k.starts_with(&pre) && k.as_str() > from.as_str())
                .map(|(i, k)| (k.clone(), i))
                .collect();
            let done = after.len() <= size;
            let page: Vec<(String, usize)> = after.into_iter().take(size).collect();
            let got = whole_dirs(page.into_iter(), &parent, &from, done);
            prop_assert!(!got.contains_key(&parent));
            for (dir, seen) in &got {
                prop_assert_eq!(seen, &delimited(&keys, dir), "{}", dir);
            }
            if done {
                // Every directory of a key after `from` under the parent.
                for k in keys.iter().filter(|k| k.starts_with(&pre) && k.as_str() > from.as_str()) {
                    let parts: Vec<&str> = k.split('/').collect();
                    let depth = if parent.is_empty() { 0 } else { parent.split('/').count() };
                    for i in depth..parts.len().saturating_sub(1) {
                        let d = parts[..=i].join("/");
                        prop_assert!(got.contains_key(&d), "{} missing", d);
                    }
                }
            }
            // `from` itself is read ahead whole when its keys fit.
            let inside = keys.iter().filter(|k| k.starts_with(&format!("{from}/"))).count();
            let first = keys.iter().filter(|k| k.starts_with(&pre) && k.as_str() > from.as_str() && k.as_str() < format!("{from}/").as_str()).count();
            if first + inside < size {
                prop_assert!(got.contains_key(&from), "{} not whole", from);
            }
        }
    }
}
