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
//! As the kernel's asynchronous readahead starts the next window while the
//! reader is still in the one before, the next page is asked for as soon as
//! a page is kept, from the directory the page ended in (listed again
//! whole), and kept when the walk opens a directory it covers: a walk of
//! many pages waits for the store once, not once a page.
//!
//! A listing read ahead is used only within the metadata TTL, as every
//! other listing; with a TTL of 0 nothing is read ahead.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Instant, UNIX_EPOCH};

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore};

use crate::listing::{Kids, Listing};
use crate::{Node, ObjectFs};

/// Keys listed ahead at a time: one page of `ListObjectsV2` (S3's and
/// Ceph's largest and default `max-keys`), so a walk waits one round trip
/// per thousand keys, and what it is given is at most one page old.
pub(crate) const WALK_KEYS: usize = 1000;

/// Pages asked for ahead of walks and not yet kept, at most: one for each
/// of a few walks at once. A walk beyond these lists its next page when it
/// gets there, as before.
const PENDING_MAX: usize = 4;

/// A page of keys, whether the listing ended with it, and when its answer
/// came (the time a listing dates from, as [`ObjectFs::list`]'s does).
type PageResult = object_store::Result<(Vec<ObjectMeta>, bool, Instant)>;

/// A page of a walk's listing asked for ahead of the walk: the keys under
/// directory `parent` after `from` (a child of it).
struct Page {
    parent: String,
    from: String,
    task: tokio::task::JoinHandle<PageResult>,
}

/// The pages asked for ahead of walks ([`PENDING_MAX`] at most).
#[derive(Default)]
pub(crate) struct Pending(Mutex<Vec<Page>>);

/// Up to [`WALK_KEYS`] keys under `parent` (the bucket if `None`) after
/// `from`, in key order.
async fn list_page(
    store: Arc<dyn ObjectStore>,
    parent: Option<ObjectPath>,
    from: ObjectPath,
) -> PageResult {
    let mut s = store.list_with_offset(parent.as_ref(), &from);
    let mut metas = Vec::new();
    while metas.len() < WALK_KEYS {
        match s.next().await {
            Some(m) => metas.push(m?),
            None => return Ok((metas, true, Instant::now())),
        }
    }
    Ok((metas, false, Instant::now()))
}

/// The directory `key` is in (`""`: the root).
fn parent_of(key: &str) -> &str {
    key.rsplit_once('/').map_or("", |(p, _)| p)
}

/// Whether `key` is under directory `dir` (the root holds every key).
fn under(key: &str, dir: &str) -> bool {
    dir.is_empty() || key.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// Where the page after one that ended with key `last` starts, in a walk
/// of `parent` that started after `from`: after `parent`'s child that
/// `last` is in, so that the directory the page ended in is listed whole
/// by the next one (or after `last`, a file of `parent` itself). `None`
/// where that is no further than `from`: the page ended in the directory
/// it started with, too large for a page, which is listed on its own.
fn next_from(parent: &str, from: &str, last: &str) -> Option<String> {
    if !under(last, parent) {
        return None;
    }
    let rest = if parent.is_empty() {
        last
    } else {
        &last[parent.len() + 1..]
    };
    let child = match rest.split_once('/') {
        Some((c, _)) if parent.is_empty() => c.to_owned(),
        Some((c, _)) => format!("{parent}/{c}"),
        None => last.to_owned(),
    };
    (child.as_str() > from).then_some(child)
}

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
        if let Some(kids) = self.take_pending(ino) {
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
        let parent = parent_of(&key).to_owned();
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
        let parent = parent_of(key);
        let (metas, done, at) = self
            .runtime
            .block_on(self.page_of(parent, key))
            .map_err(|e| self.list_error(parent, e))?;
        Ok(self.keep_page(ino, parent, key, metas, done, at))
    }

    fn list_error(&self, parent: &str, e: object_store::Error) -> io::Error {
        io::Error::other(format!("{}: list {}{parent}: {e}", self.url, self.prefix))
    }

    /// The listing of a page of keys under directory `parent` after `from`.
    fn page_of(&self, parent: &str, from: &str) -> impl std::future::Future<Output = PageResult> {
        let full = format!("{}{parent}", self.prefix);
        let at = ObjectPath::from(full.trim_end_matches('/'));
        let from = ObjectPath::from(format!("{}{from}", self.prefix).as_str());
        list_page(
            self.store.clone(),
            (!at.as_ref().is_empty()).then_some(at),
            from,
        )
    }

    /// Asks for the page of keys under `parent` after `from` without
    /// waiting for it, unless it is asked for already. The oldest page
    /// asked goes if [`PENDING_MAX`] are.
    fn ask_page(&self, parent: &str, from: String) {
        let mut pending = self.walks.0.lock().unwrap_or_else(|p| p.into_inner());
        if pending.iter().any(|p| p.parent == parent && p.from == from) {
            return;
        }
        if pending.len() >= PENDING_MAX {
            pending.remove(0).task.abort();
        }
        let task = self.runtime.spawn(self.page_of(parent, &from));
        pending.push(Page {
            parent: parent.to_owned(),
            from,
            task,
        });
    }

    /// Directory `ino`'s children from a page asked for ahead of a walk
    /// that covers it (waiting for the page if it has not come), the page
    /// then kept; `None` if no page covers it, or the page failed or is
    /// older than the TTL (the caller lists as it would have). A page no
    /// `opendir` takes goes when [`PENDING_MAX`] newer ones are asked.
    fn take_pending(&self, ino: u64) -> Option<Kids> {
        let key = {
            let tree = self.tree.read().unwrap_or_else(|p| p.into_inner());
            tree.nodes.get(&ino).filter(|n| n.dir)?.key.clone()
        };
        let page = {
            let mut pending = self.walks.0.lock().unwrap_or_else(|p| p.into_inner());
            let i = pending
                .iter()
                .position(|p| under(&key, &p.parent) && key.as_str() >= p.from.as_str())?;
            pending.remove(i)
        };
        let (metas, done, at) = self.runtime.block_on(page.task).ok()?.ok()?;
        if at.elapsed() >= self.metadata_ttl {
            return None;
        }
        self.keep_page(ino, &page.parent, &page.from, metas, done, at)
    }

    /// Keeps the listing of every directory a page of keys under `parent`
    /// after `from`, answered at `at`, covered whole (not over a newer one),
    /// and asks for the next page if there is one. Returns `ino`'s
    /// children if it is one of them (its listing then used).
    fn keep_page(
        &self,
        ino: u64,
        parent: &str,
        from: &str,
        metas: Vec<ObjectMeta>,
        done: bool,
        at: Instant,
    ) -> Option<Kids> {
        let next = match metas.last().and_then(|m| self.relative(&m.location)) {
            Some(last) if !done => next_from(parent, from, &last),
            _ => None,
        };
        let page = metas
            .into_iter()
            .filter_map(|m| Some((self.relative(&m.location)?, m)));
        let whole = whole_dirs(page, parent, from, done);
        let mine = self.keep_listings(ino, whole, at);
        if let Some(next) = next {
            self.ask_page(parent, next);
        }
        mine
    }

    /// Keeps the listings `whole` gives, answered at `at`, each but `ino`'s
    /// marked as read ahead; a directory listed since keeps its own.
    fn keep_listings(
        &self,
        ino: u64,
        whole: BTreeMap<String, Seen<ObjectMeta>>,
        at: Instant,
    ) -> Option<Kids> {
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let mtime = tree.nodes.get(&ino).map_or(UNIX_EPOCH, |n| n.mtime);
        let mut mine = None;
        for (dir, s) in whole {
            let d = tree.insert(Node {
                key: dir.clone(),
                dir: true,
                size: 0,
                mtime,
                listed: None,
            });
            if tree.children.get(&d).is_some_and(|l| l.at > at) {
                continue;
            }
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
                let child = tree.insert_as_of(Node::object(format!("{dir}/{name}"), &o, at), at);
                kids.push((name, child));
            }
            let mut listing = Listing::new(kids);
            listing.at = at;
            if d == ino {
                mine = Some(listing.kids.clone());
            } else {
                listing.ahead = true;
            }
            tree.children.insert(d, listing);
        }
        mine
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

    /// Keys of up to four parts from `names`, sorted (joined keys sort
    /// differently from their parts where a name holds `!`, which sorts
    /// before `/`) and distinct.
    fn keys_of(names: Vec<&'static str>) -> impl Strategy<Value = Vec<String>> {
        let part = proptest::sample::select(names);
        proptest::collection::btree_set(proptest::collection::vec(part, 1..5), 0..60)
            .prop_map(|s| s.into_iter().map(|p| p.join("/")).collect::<Vec<_>>())
            .prop_map(|mut v: Vec<String>| {
                v.sort();
                v
            })
    }

    /// Keys over names that sort just before and after `/` (`a!`, `a.`).
    fn keys() -> impl Strategy<Value = Vec<String>> {
        keys_of(vec!["a", "b", "a!", "a.", "b!c", "z"])
    }

    /// A directory of `keys` and one of its child directories, chosen by
    /// `pick` (`None` if the keys have no directory).
    fn parent_and_child(keys: &[String], pick: usize) -> Option<(String, String)> {
        let mut pairs = Vec::new();
        for k in keys {
            let parts: Vec<&str> = k.split('/').collect();
            for i in 0..parts.len().saturating_sub(1) {
                pairs.push((parts[..i].join("/"), parts[..=i].join("/")));
            }
        }
        (!pairs.is_empty()).then(|| pairs[pick % pairs.len()].clone())
    }

    /// The keys under `parent` after `from`, with their indices.
    fn after(keys: &[String], parent: &str, from: &str) -> Vec<(String, usize)> {
        keys.iter()
            .enumerate()
            .filter(|(_, k)| under(k, parent) && k.as_str() > from)
            .map(|(i, k)| (k.clone(), i))
            .collect()
    }

    #[test]
    fn the_next_page_starts_after_the_child_the_last_key_is_in() {
        assert_eq!(next_from("", "a", "c/d/e"), Some("c".into()));
        assert_eq!(next_from("p", "p/a", "p/c/d"), Some("p/c".into()));
        // A file of the parent itself: after it.
        assert_eq!(next_from("p", "p/a", "p/f"), Some("p/f".into()));
        // Ended in the directory it started after: too large for a page.
        assert_eq!(next_from("p", "p/a", "p/a/x/y"), None);
        assert_eq!(next_from("p", "p/c", "p/b/x"), None);
        // Not under the parent (a page never holds such a key).
        assert_eq!(next_from("p", "p/a", "q/b"), None);
        assert_eq!(next_from("p", "p/a", "pp/b"), None);
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
            let pair = parent_and_child(&keys, pick);
            prop_assume!(pair.is_some());
            let (parent, from) = pair.unwrap();
            let pre = if parent.is_empty() { String::new() } else { format!("{parent}/") };
            let after = after(&keys, &parent, &from);
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

        /// Pages asked one after the other as a walk asks them (each from
        /// `next_from` of the one before) end, show every directory whole
        /// as a delimited listing would, and together show whole every
        /// directory under the parent after `from` that is in a child
        /// directory no larger than a page, up to the first child larger
        /// than a page. (Names without `!` or `.`: a child's keys then sort
        /// as its name, which the last clause needs; the first two are
        /// checked over such names above for one page.)
        #[test]
        fn pages_asked_ahead_show_every_directory_that_fits_a_page(
            keys in keys_of(vec!["a", "b", "c", "z"]),
            pick in 0usize..1000,
            size in 1usize..40,
        ) {
            let pair = parent_and_child(&keys, pick);
            prop_assume!(pair.is_some());
            let (parent, from) = pair.unwrap();
            let mut start = from.clone();
            let mut shown = std::collections::BTreeSet::new();
            let mut pages = 0;
            loop {
                pages += 1;
                prop_assert!(pages <= keys.len() + 1, "the pages do not end");
                let rest = after(&keys, &parent, &start);
                let done = rest.len() <= size;
                let page: Vec<(String, usize)> = rest.into_iter().take(size).collect();
                let last = page.last().map(|p| p.0.clone());
                for (dir, seen) in whole_dirs(page.into_iter(), &parent, &start, done) {
                    prop_assert_eq!(&seen, &delimited(&keys, &dir), "{}", dir);
                    shown.insert(dir);
                }
                let next = last.and_then(|l| next_from(&parent, &start, &l));
                match next {
                    Some(n) if !done => start = n,
                    _ => break,
                }
            }
            // Child directories after `from` in order, each with the keys
            // under it; every directory in them is shown up to the first
            // child with a page's worth of keys or more.
            let depth = if parent.is_empty() { 0 } else { parent.split('/').count() };
            let mut children: BTreeMap<String, Vec<&String>> = BTreeMap::new();
            for k in keys.iter().filter(|k| under(k, &parent)) {
                let parts: Vec<&str> = k.split('/').collect();
                if parts.len() > depth + 1 {
                    let child = parts[..=depth].join("/");
                    if child >= from {
                        children.entry(child).or_default().push(k);
                    }
                }
            }
            for (child, under_it) in children {
                if under_it.len() >= size {
                    break;
                }
                for k in under_it {
                    let parts: Vec<&str> = k.split('/').collect();
                    for i in depth..parts.len() - 1 {
                        let d = parts[..=i].join("/");
                        prop_assert!(shown.contains(&d), "{} (in {}) not shown", d, child);
                    }
                }
            }
        }
    }
}
