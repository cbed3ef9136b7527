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
            .map_err(|e| {
                let at = if full.is_empty() { "/" } else { &full };
                io::Error::other(format!("{}: list {at}: {e}", self.url))
            })?;
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

/// The first listing's failure, said as what to do about it: `ahead mount`
/// lists the root before it mounts, so that a missing bucket, refused
/// credentials or a store that cannot be reached are the command's error
/// rather than an `EIO` in some later `ls`. object_store keeps the HTTP
/// status only in its message (its retry error is private), so the cause
/// is read from there; the message itself follows the summary.
pub(crate) fn mount_error(e: io::Error) -> io::Error {
    let text = e.to_string();
    let has = |s: &str| text.contains(s);
    let (kind, what) = if has("169.254.169.254") {
        // object_store looks for an instance's role when no key is given.
        (
            io::ErrorKind::PermissionDenied,
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             (none were set, and no instance metadata answered), or \
             -o skip_signature=true for a public bucket",
        )
    } else if has("NoSuchBucket") {
        (io::ErrorKind::NotFound, "no such bucket")
    } else if has("403 Forbidden")
        || has("401 Unauthorized")
        || has("SignatureDoesNotMatch")
        || has("InvalidAccessKeyId")
        || has("AccessDenied")
        || e.kind() == io::ErrorKind::PermissionDenied
    {
        (
            io::ErrorKind::PermissionDenied,
            "the store refused these credentials (AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, or -o access_key_id=… -o secret_access_key=…)",
        )
    } else if has("Missing AccessKeyId") || has("Missing SecretAccessKey") {
        (
            io::ErrorKind::PermissionDenied,
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             (or -o skip_signature=true for a public bucket)",
        )
    } else if has("error sending request") || has("Connection refused") || has("dns error") {
        (
            io::ErrorKind::ConnectionRefused,
            "the store cannot be reached (AWS_ENDPOINT_URL, or -o endpoint=…)",
        )
    } else if e.kind() == io::ErrorKind::NotFound {
        (io::ErrorKind::NotFound, "no such object")
    } else {
        return e;
    };
    io::Error::new(kind, format!("{what}\n  ({text})"))
}

#[cfg(test)]
mod tests {
    use super::mount_error;
    use std::io;

    fn said(text: &str, kind: io::ErrorKind) -> (io::ErrorKind, String) {
        let e = mount_error(io::Error::new(kind, text.to_owned()));
        (e.kind(), e.to_string())
    }

    /// Each cause the mount meets at its first listing is named, with the
    /// store's own message kept after it; a message of no known cause is
    /// passed on as it was.
    #[test]
    fn a_first_listings_failure_says_its_cause() {
        let other = io::ErrorKind::Other;
        let (k, s) = said("... 404 Not Found: <Code>NoSuchBucket</Code>", other);
        assert_eq!(k, io::ErrorKind::NotFound);
        assert!(s.starts_with("no such bucket\n") && s.contains("NoSuchBucket"));
        let (k, s) = said(
            "... 403 Forbidden: <Code>SignatureDoesNotMatch</Code>",
            other,
        );
        assert_eq!(k, io::ErrorKind::PermissionDenied);
        assert!(s.contains("refused these credentials"));
        let (_, s) = said("PUT http://169.254.169.254/latest/api/token: 403", other);
        assert!(s.starts_with("no credentials"));
        let (k, s) = said("HTTP error: error sending request", other);
        assert_eq!(k, io::ErrorKind::ConnectionRefused);
        assert!(s.contains("cannot be reached"));
        let (k, s) = said("something else", other);
        assert_eq!((k, s.as_str()), (other, "something else"));
    }
}
