//! `ahead mount`: a read-only FUSE file system over a bucket (or a prefix
//! of one) in an S3-compatible store, so that any program, in any
//! language, reads objects through ahead's engine: its cache, its
//! readahead policies (forward, backward, strided and interleaved
//! streams; a random read fetches what it asks and no more), and one
//! memory budget for every open file together.
//!
//! The layout follows the store's listing, as mountpoint-s3 and s3fs show
//! it: a key's `/`-separated prefixes are directories, its last part a
//! file. A directory is listed once (one `ListObjects` with a delimiter,
//! page by page) when it is first looked into, and again when it is
//! opened for reading (`ls`), so new keys appear. Each open of a file
//! opens the object in the engine with its ETag pinned there: the one its
//! listing gave while that is younger than the metadata TTL, else one a
//! `HEAD` finds. (A listing is as young as the store's last confirmation
//! of that version: a HEAD, or a read's GET held to its ETag.) A read that finds the object changed fails with EIO
//! rather than mix old and new bytes. The kernel may keep a file's pages
//! between opens (`FOPEN_KEEP_CACHE`) while its size and modification
//! time are those the listing gave and its version is the one whose bytes
//! the kernel holds (`versions`).
//!
//! Nothing is written: every call that would change the store gets EROFS
//! (the mount is `ro`).
//!
//! Requests are taken by several threads ([`MountOptions::threads`]). A
//! read whose bytes are in the engine's cache is answered at once by the
//! thread that took it; one that must wait for the store is answered when
//! its bytes land, by a task of the mount's runtime, and the thread goes
//! on to the next request: a slow read never holds a cached one, and
//! more readers may wait on the store at once than there are threads.
//!
//! The kernel reads ahead of forward readers itself. For a reader going
//! backward the daemon writes the next blocks into the kernel's cache
//! ahead of it (`push`), so that its requests are answered there rather
//! than one round trip through the daemon each.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use ahead::{Engine, File};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, KernelConfig,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen,
    Request,
};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

mod answer;
use answer::{errno, finish_read, Buffers};
mod listing;
use listing::{Kids, Tree};
mod push;
mod versions;
mod walk;

/// How long the kernel may keep an entry's or attribute's answer before
/// asking again (mountpoint-s3's default metadata TTL is one second too).
const TTL: Duration = Duration::from_secs(1);

/// Largest readahead the kernel is told to do on its own, in bytes: its
/// forward readahead of a sequential reader then asks for large reads,
/// which the engine's own readahead is ahead of.
const KERNEL_READAHEAD: u32 = 1 << 20;

/// How a bucket is mounted.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Threads taking the kernel's requests; a read waiting on the store
    /// holds none of them.
    pub threads: usize,
    /// Let users other than the one who mounted read the files
    /// (`allow_other`; needs root or `user_allow_other` in
    /// /etc/fuse.conf).
    pub allow_other: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            threads: 8,
            allow_other: false,
        }
    }
}

/// One entry of the tree: a directory (a key prefix) or a file (a key).
#[derive(Clone, Debug)]
struct Node {
    /// The key (a file) or the prefix without its trailing `/` (a
    /// directory; empty for the root), relative to the bucket.
    key: String,
    dir: bool,
    size: u64,
    mtime: SystemTime,
    /// A file's ETag as its listing gave it, and when it was listed: an
    /// open within the metadata TTL takes it rather than ask the store.
    listed: Option<(String, std::time::Instant)>,
}

/// The file system: the store, the engine every file is read through, and
/// the tree listed so far.
pub struct ObjectFs {
    engine: Engine,
    store: Arc<dyn ObjectStore>,
    /// The bucket's name and the mounted prefix, for errors and names.
    url: String,
    /// The mounted prefix: empty, or ending in `/`.
    prefix: String,
    runtime: tokio::runtime::Runtime,
    tree: RwLock<Tree>,
    handles: Mutex<HashMap<u64, File>>,
    /// Open directories: the listing each `opendir` took, which its
    /// `readdir`s page through.
    dirs: Mutex<HashMap<u64, Kids>>,
    next_handle: AtomicU64,
    uid: u32,
    gid: u32,
    metadata_ttl: Duration,
    direct_io: bool,
    /// Backward readers' blocks stored in the kernel's cache (`push`);
    /// `None`: off.
    pusher: Option<Arc<push::Pusher>>,
    /// Which version of each object the kernel's cache may hold
    /// (`versions`).
    versions: versions::Versions,
    /// An `http(s)://` URL's object, the root's only file (its name):
    /// such a store cannot be listed, so the root is "listed" by a `HEAD`
    /// of it.
    single: Option<String>,
    /// Pages of walks' listings asked for ahead of the walks (`walk`).
    walks: walk::Pending,
    /// Read buffers kept for the next reads.
    buffers: Arc<Buffers>,
}

impl ObjectFs {
    /// The file system of `url`, read through `engine`: a bucket or a
    /// prefix of one (`s3://bucket[/prefix]`, with the AWS_* environment
    /// and object_store `options`), or one object by `http(s)://` (a web
    /// server has no listing): the root directory then holds that object
    /// alone, under the last part of its path.
    pub fn new(url: &str, options: &[(String, String)], engine: Engine) -> io::Result<ObjectFs> {
        let (store, path) = ahead::remote::store_for_url_with(url, options)?;
        let web = ["http://", "https://"]
            .iter()
            .any(|p| url.len() > p.len() && url[..p.len()].eq_ignore_ascii_case(p));
        let (prefix, single) = match (path.as_ref(), web) {
            (p, true) => {
                let Some(name) = p.rsplit('/').next().filter(|n| !n.is_empty()) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{url}: an http(s) URL mounts one object: name it (a web server cannot be listed)"),
                    ));
                };
                let parent = &p[..p.len() - name.len()];
                (parent.to_owned(), Some(name.to_owned()))
            }
            ("", false) => (String::new(), None),
            (p, false) => (format!("{p}/"), None),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ahead-mount-list")
            .enable_all()
            .build()?;
        let mut tree = Tree {
            next: 1,
            ..Tree::default()
        };
        let root = Node {
            key: String::new(),
            dir: true,
            size: 0,
            mtime: SystemTime::now(),
            listed: None,
        };
        tree.by_key.insert((true, String::new()), 1);
        tree.nodes.insert(1, root);
        let fs = ObjectFs {
            engine,
            store,
            url: url.to_owned(),
            prefix,
            runtime,
            tree: RwLock::new(tree),
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            metadata_ttl: TTL,
            direct_io: false,
            pusher: Some(Arc::default()),
            versions: versions::Versions::default(),
            single,
            walks: walk::Pending::default(),
            buffers: Arc::default(),
        };
        // The store must answer now, not at the first `ls`; a bucket's
        // failure is said as its cause (a web server's HEAD says its own).
        fs.list(1)
            .map_err(|e| if web { e } else { listing::mount_error(e) })?;
        Ok(fs)
    }

    fn node(&self, ino: u64) -> Option<Node> {
        self.tree.read().ok()?.nodes.get(&ino).cloned()
    }

    /// Directory `ino`'s children, listed again if they were not yet or
    /// their listing is older than the metadata TTL.
    fn children(&self, ino: u64) -> io::Result<Kids> {
        if let Some(k) = self.tree.read().ok().and_then(|t| {
            t.children
                .get(&ino)
                .filter(|l| l.at.elapsed() < self.metadata_ttl)
                .map(|l| l.kids.clone())
        }) {
            return Ok(k);
        }
        self.list(ino)
    }

    /// Opens files with FOPEN_DIRECT_IO: the kernel's page cache and its
    /// readahead stay out, and each of the program's reads reaches the
    /// engine as the program made it (mmap of a file is then refused on
    /// kernels before 6.6).
    pub fn with_direct_io(mut self, on: bool) -> ObjectFs {
        self.direct_io = on;
        self
    }

    /// Whether a backward reader's next blocks are stored in the kernel's
    /// cache ahead of it, 1 MiB at a time (`FUSE_NOTIFY_STORE`; on by
    /// default, and off with [`ObjectFs::with_direct_io`], which bypasses
    /// that cache): its reads are then answered there, not one round trip
    /// through the daemon each.
    pub fn with_backward_stores(mut self, on: bool) -> ObjectFs {
        self.pusher = on.then(Arc::default);
        self
    }

    /// How long a directory's listing answers lookups before the store is
    /// asked again (default 1 s, mountpoint-s3's default metadata TTL).
    pub fn with_metadata_ttl(mut self, ttl: Duration) -> ObjectFs {
        self.metadata_ttl = ttl;
        self
    }

    /// The store confirmed `file`'s version (its open's HEAD, or a GET held
    /// to its ETag): the listing of `ino` is as fresh as that, if it lists
    /// the same version. A file read again within the metadata TTL of its
    /// last confirmation then opens without a HEAD, as one within the TTL
    /// of its listing does.
    fn note_confirmed(&self, ino: u64, file: &File) {
        let Some((etag, at)) = file.confirmed() else {
            return;
        };
        let mut tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = tree.nodes.get_mut(&ino) {
            let size = n.size;
            if let Some((listed, when)) = &mut n.listed {
                if *listed == etag && size == file.len() && at > *when {
                    *when = at;
                }
            }
        }
    }

    /// File `name` of directory `parent`, if the store confirmed its
    /// version within the metadata TTL (a listing, a HEAD, a read's GET):
    /// it is there as it was, and the directory need not be listed again
    /// to find it.
    fn confirmed_child(&self, parent: u64, name: &OsStr) -> Option<(u64, Node)> {
        let (ino, n) = self.listed_child(parent, name)?;
        let (_, at) = n.listed.as_ref()?;
        (at.elapsed() < self.metadata_ttl).then_some((ino, n))
    }

    /// Child `name` of `parent` as its last listing gave it, however old.
    fn listed_child(&self, parent: u64, name: &OsStr) -> Option<(u64, Node)> {
        let tree = self.tree.read().ok()?;
        let &ino = tree.children.get(&parent)?.index.get(name.to_str()?)?;
        Some((ino, tree.nodes.get(&ino)?.clone()))
    }

    fn attr(&self, ino: u64, n: &Node) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: n.size,
            blocks: n.size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: n.mtime,
            kind: if n.dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: if n.dir { 0o555 } else { 0o444 },
            nlink: if n.dir { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: 1 << 20,
        }
    }
}

/// The errno a failed call returns: the system's own where there is one,
/// else EIO (a store that failed after its retries, a changed object).
fn errno_of(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Filesystem for ObjectFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_readahead(KERNEL_READAHEAD);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some((ino, n)) = self.confirmed_child(parent.0, name) {
            return reply.entry(&TTL, &self.attr(ino, &n), fuser::Generation(0));
        }
        if let Err(e) = self.children(parent.0) {
            return reply.error(errno_of(&e));
        }
        match self.listed_child(parent.0, name) {
            Some((ino, n)) => reply.entry(&TTL, &self.attr(ino, &n), fuser::Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.node(ino.0) {
            Some(n) => reply.attr(&TTL, &self.attr(ino.0, &n)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let Some(n) = self.node(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if n.dir {
            return reply.error(Errno::EISDIR);
        }
        let key = format!("{}{}", self.prefix, n.key);
        let name = match &self.single {
            Some(_) => self.url.clone(),
            None => format!("{}/{}", self.url.trim_end_matches('/'), n.key),
        };
        let (store, path) = (self.store.clone(), ObjectPath::from(key));
        // Listed within the metadata TTL: that version, without a HEAD
        // (a re-read the kernel holds then costs no round trip at all).
        let (opened, listed) = match &n.listed {
            Some((etag, at)) if at.elapsed() < self.metadata_ttl => (
                self.engine
                    .open_object_listed(store, path, &name, n.size, etag),
                Some(etag.clone()),
            ),
            _ => (self.engine.open_object(store, path, &name), None),
        };
        match opened {
            Ok(file) => {
                self.note_confirmed(ino.0, &file);
                // The version this open pinned: the listing's, or the HEAD's.
                let etag = listed.or_else(|| file.confirmed().map(|(e, _)| e));
                // The object as it is now: a size other than the listing's
                // means it changed; the kernel must not keep old pages.
                let same = file.len() == n.size;
                let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
                self.handles
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(fh, file);
                let flags = if self.direct_io {
                    FopenFlags::FOPEN_DIRECT_IO
                } else {
                    match self.versions.opened(ino.0, fh, etag.as_deref()) {
                        versions::Open::Keep if same => FopenFlags::FOPEN_KEEP_CACHE,
                        versions::Open::Keep | versions::Open::Drop => FopenFlags::empty(),
                        versions::Open::Bypass => FopenFlags::FOPEN_DIRECT_IO,
                    }
                };
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned();
        let Some(file) = file else {
            return reply.error(Errno::EBADF);
        };
        // (Not for a handle that reads around the cache: its version is
        // not the one the cache holds.)
        if let (Some(p), false) = (&self.pusher, self.direct_io || !self.versions.counted(fh.0)) {
            p.on_read(&self.runtime, fh.0, ino, &file, offset, size as u64);
        }
        let size = size as usize;
        let buffers = self.buffers.clone();
        let mut first = file.read_owned(buffers.take(size), offset);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // The first poll serves a read from the cache, or issues what it
        // needs and says so.
        match std::pin::Pin::new(&mut first).poll(&mut cx) {
            std::task::Poll::Ready((buf, Ok(n))) if n == size || n == 0 => {
                reply.data(&buf[..n]);
                buffers.give(buf);
            }
            std::task::Poll::Ready((buf, Err(e))) => {
                reply.error(errno(&e));
                buffers.give(buf);
            }
            std::task::Poll::Ready((mut buf, Ok(n))) => {
                buf.truncate(n);
                self.runtime
                    .spawn(finish_read(file, None, buf, offset, size, reply, buffers));
            }
            std::task::Poll::Pending => {
                self.runtime.spawn(finish_read(
                    file,
                    Some(first),
                    Vec::new(),
                    offset,
                    size,
                    reply,
                    buffers,
                ));
            }
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        let file = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        if let Some(file) = file {
            self.note_confirmed(ino.0, &file);
        }
        if let Some(p) = &self.pusher {
            p.release(fh.0);
        }
        self.versions.released(fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // `ls` sees the store as it is now (or as a walk's listing read
        // ahead of it saw it, within the TTL: `walk`), and pages through
        // that one listing however long it takes (a listing renewed
        // halfway would move the offsets under it).
        match self.opendir_listing(ino.0) {
            Ok(kids) => {
                let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
                self.dirs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(fh, kids);
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: fuser::ReplyEmpty,
    ) {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let snapshot = self
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned();
        let kids = match snapshot.map_or_else(|| self.children(ino.0), Ok) {
            Ok(k) => k,
            Err(e) => return reply.error(errno_of(&e)),
        };
        // Entry 0 is `.`, 1 is `..` (the root's is outside; the kernel
        // fixes it), then the children; each call gives what fits from
        // `offset` on.
        let tree = self.tree.read().unwrap_or_else(|p| p.into_inner());
        for i in offset as usize..kids.len() + 2 {
            let (child, kind, name) = match i {
                0 | 1 => (ino.0, FileType::Directory, if i == 0 { "." } else { ".." }),
                _ => {
                    let (name, child) = &kids[i - 2];
                    let dir = tree.nodes.get(child).is_some_and(|n| n.dir);
                    let kind = if dir {
                        FileType::Directory
                    } else {
                        FileType::RegularFile
                    };
                    (*child, kind, name.as_str())
                }
            };
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mounts `fs` on `mountpoint` and serves it until it is unmounted
/// (`fusermount3 -u`, `umount`, or [`unmount`] from a signal handler's
/// thread).
pub fn serve(fs: ObjectFs, mountpoint: &Path, opts: &MountOptions) -> io::Result<()> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::FSName(format!("ahead:{}", fs.url)),
        MountOption::Subtype("ahead".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if opts.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(opts.threads.max(1));
    let before = rustix::fs::stat(mountpoint).map(|st| st.st_dev).ok();
    let target = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("ahead-mount-ra".into())
        .spawn(move || raise_kernel_readahead(&target, before))?;
    let pusher = fs.pusher.clone();
    let session = fuser::Session::new(fs, mountpoint, &config)?;
    if let Some(p) = pusher {
        p.start(session.notifier());
    }
    session.run()
}

/// Raises the kernel's readahead of the new mount's backing device to
/// [`KERNEL_READAHEAD`] once the mount appears (its `st_dev` changes).
///
/// FUSE takes the smaller of the device's `read_ahead_kb` (128 KiB by
/// default) and the `max_readahead` the daemon answers, and the kernel
/// also reads a request that misses its cache in pieces no larger than the
/// device's readahead. So under the default a program's 256 KiB `pread`
/// at a random offset came as two 128 KiB requests, the second sent only
/// when the first was answered: two round trips to the store (69 ms a
/// read on the `s3` profile, against 35 ms with the limit raised or with
/// `--direct-io`). Writing the sysfs file needs root; otherwise, or if
/// the mount does not appear within 10 s, the kernel's default stays.
fn raise_kernel_readahead(mountpoint: &Path, before: Option<u64>) {
    // Without the directory's own device to tell the mount by, do nothing:
    // never a real disk's setting.
    let Some(before) = before else { return };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if let Ok(st) = rustix::fs::stat(mountpoint) {
            if st.st_dev != before {
                let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
                // A FUSE mount's device is an anonymous one (major 0).
                if major != 0 {
                    return;
                }
                let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
                let _ = std::fs::write(knob, format!("{}\n", KERNEL_READAHEAD >> 10));
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Unmounts `mountpoint` (the mount [`serve`] is serving, which then
/// returns): `fusermount3 -u`, else as root `umount2` detached.
pub fn unmount(mountpoint: &Path) -> io::Result<()> {
    let ok = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mountpoint)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Ok(());
    }
    rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::DETACH).map_err(io::Error::from)
}
