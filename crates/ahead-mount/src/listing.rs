//! Listing the store: a directory's children from `ListObjects` with a
//! delimiter, or, for an `http(s)://` mount, its one object from a `HEAD`.

use std::io;
use std::time::{Duration, UNIX_EPOCH};

use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;

use std::sync::Arc;

use std::collections::HashMap;

use crate::{Node, ObjectFs};

/// A directory's children, (name, inode) in the listing's order.
pub(crate) type Kids = Arc<Vec<(String, u64)>>;

/// The tree as listed so far.
#[derive(Default)]
pub(crate) struct Tree {
    pub(crate) nodes: HashMap<u64, Node>,
    /// (directory, file) key → inode, so that a key keeps its number
    /// across listings.
    pub(crate) by_key: HashMap<(bool, String), u64>,
    /// A directory's children, once listed.
    pub(crate) children: HashMap<u64, Listing>,
    pub(crate) next: u64,
}

/// A directory's children as one listing gave them, and when.
pub(crate) struct Listing {
    pub(crate) at: std::time::Instant,
    /// (name, inode), in the listing's order: what `readdir` pages
    /// through.
    pub(crate) kids: Kids,
    /// Name → inode: a lookup in a directory of 10,000 keys is one probe,
    /// not a search (it was 42% of the daemon's samples under `ls -l`).
    pub(crate) index: HashMap<String, u64>,
    /// Read ahead of a walk (`walk`), and not yet used by an `opendir`.
    pub(crate) ahead: bool,
    /// Child directories the program opened since this listing: the
    /// second is a walk.
    pub(crate) opened: u32,
}

impl Listing {
    pub(crate) fn new(kids: Vec<(String, u64)>) -> Listing {
        // A name both a prefix (listed first) and a key is the directory,
        // as a search of the listing in order found it.
        let mut index = HashMap::with_capacity(kids.len());
        for (name, ino) in &kids {
            index.entry(name.clone()).or_insert(*ino);
        }
        Listing {
            at: std::time::Instant::now(),
            index,
            kids: Arc::new(kids),
            ahead: false,
            opened: 0,
        }
    }
}

impl Node {
    /// The file `key` as a listing or a HEAD answered for it (`meta`):
    /// its size, its time (one before 1970 read as 1970, not as a
    /// negative count of milliseconds cast to a huge one), and its ETag,
    /// listed now.
    pub(crate) fn object(
        key: String,
        meta: &object_store::ObjectMeta,
        at: std::time::Instant,
    ) -> Node {
        let ms = meta.last_modified.timestamp_millis().max(0) as u64;
        Node {
            key,
            dir: false,
            size: meta.size,
            mtime: UNIX_EPOCH + Duration::from_millis(ms),
            listed: meta.e_tag.clone().map(|e| (e, at)),
        }
    }
}

impl Tree {
    /// Inserts `node` as a listing answered at `at` gave it, unless the tree
    /// has it from an answer after that (a `HEAD` of an open, a listing
    /// since): its inode either way.
    pub(crate) fn insert_as_of(&mut self, node: Node, at: std::time::Instant) -> u64 {
        let k = (node.dir, node.key.clone());
        if let Some(&ino) = self.by_key.get(&k) {
            let newer = self.nodes.get(&ino).and_then(|n| n.listed.as_ref());
            if newer.is_some_and(|l| l.1 > at) {
                return ino;
            }
        }
        self.insert(node)
    }

    pub(crate) fn insert(&mut self, node: Node) -> u64 {
        let k = (node.dir, node.key.clone());
        if let Some(&ino) = self.by_key.get(&k) {
            self.nodes.insert(ino, node);
            return ino;
        }
        self.next += 1;
        let ino = self.next;
        self.by_key.insert(k, ino);
        self.nodes.insert(ino, node);
        ino
    }
}

impl ObjectFs {
    /// A listed key relative to the mounted prefix (`None` if outside it).
    pub(crate) fn relative(&self, p: &ObjectPath) -> Option<String> {
        Some(p.as_ref().strip_prefix(&self.prefix)?.to_owned())
    }

    /// Lists directory `ino` in the store (again) and returns its
    /// children.
    pub(crate) fn list(&self, ino: u64) -> io::Result<Kids> {
        let dir = self
            .node(ino)
            .filter(|n| n.dir)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTDIR))?;
        if let Some(name) = &self.single {
            return self.head_single(ino, name);
        }
        let full = format!("{}{}", self.prefix, dir.key);
        let at = ObjectPath::from(full.trim_end_matches('/'));
        let listing = self
            .runtime
            .block_on(
                self.store
                    .list_with_delimiter((!full.is_empty()).then_some(&at)),
            )
            .map_err(|e| io::Error::other(format!("{}: list {full}: {e}", self.url)))?;
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let mut kids = Vec::new();
        for p in &listing.common_prefixes {
            let Some(key) = self.relative(p) else {
                continue;
            };
            let name = key.rsplit('/').next().unwrap_or(&key).to_owned();
            let child = tree.insert(Node {
                key,
                dir: true,
                size: 0,
                mtime: dir.mtime,
                listed: None,
            });
            kids.push((name, child));
        }
        for o in &listing.objects {
            let Some(key) = self.relative(&o.location) else {
                continue;
            };
            let name = key.rsplit('/').next().unwrap_or(&key).to_owned();
            // A directory marker (`dir/` as an object) or the mounted key.
            if name.is_empty() || key == dir.key {
                continue;
            }
            let child = tree.insert(Node::object(key, o, std::time::Instant::now()));
            kids.push((name, child));
        }
        let listing = Listing::new(kids);
        let kids = listing.kids.clone();
        tree.children.insert(ino, listing);
        Ok(kids)
    }

    /// The root of an `http(s)://` mount "listed": a `HEAD` of its one
    /// object, which then has the size, time and ETag the answer gave.
    fn head_single(&self, ino: u64, name: &str) -> io::Result<Kids> {
        let key = format!("{}{name}", self.prefix);
        let meta = self
            .runtime
            .block_on(self.store.head(&ObjectPath::from(key.as_str())))
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{}: no such object", self.url),
                ),
                e => io::Error::other(format!("{}: HEAD: {e}", self.url)),
            })?;
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let child = tree.insert(Node::object(
            name.to_owned(),
            &meta,
            std::time::Instant::now(),
        ));
        let kids = vec![(name.to_owned(), child)];
        let listing = Listing::new(kids);
        let kids = listing.kids.clone();
        tree.children.insert(ino, listing);
        Ok(kids)
    }
}
