//! The resume journal of a copy: which chunks of the destination's
//! temporary file are complete, and what each holds, so that `--resume`
//! after a crash or a `kill -9` redoes only the rest — and so that nobody
//! else can make it believe anything.
//!
//! Where it lives. Not beside the destination, where another user who can
//! write that directory could plant one (a forged journal and a temporary
//! file of their choosing once made a resumed copy differ from its source),
//! nor anywhere a copy of a user's file can land (`ahead copy -r` of a tree
//! holding a crafted `.f.ahead-journal` would otherwise have put a
//! root-owned forgery there). Journals live in the caller's own state
//! directory, `$XDG_STATE_HOME/ahead/copy` (default `~/.local/state`, the
//! home taken from the password database, not from `$HOME`), made with mode
//! 0700 and accepted only when every level is owned by the caller and
//! writable by nobody else. Where there is no such directory (a user
//! without a home, a read-only one), a copy runs without a journal: it
//! cannot be resumed, and says so.
//!
//! One journal per destination: its name is a hash of the destination
//! directory's device and inode and of the destination's name. It is also the
//! lock that lets one copy at a time write a destination (flock(2),
//! LOCK_EX|LOCK_NB): a second copy is refused while the first runs.
//!
//! Its first line binds it: a random token (also in the temporary file's
//! name), the destination directory and name, the temporary file's name,
//! device and inode, and the source as it was (size, mtime, ctime, inode,
//! device, block device or not) with the chunk size. Every further line is
//! one finished chunk: its offset and the XXH3-64 of its bytes (`hole` for
//! a chunk with no data), appended after the chunk's write returned, with
//! one write(2). A fast checksum rather than a cryptographic one is enough:
//! it guards against lost or stray writes to a file only the caller can
//! write, listed in a journal only the caller can write (BLAKE3 here cost
//! 0.45 s of CPU per 2 GiB copied, more than the rest of the copy). A
//! resumed copy reads each listed chunk back from the temporary
//! file and keeps only those whose checksum still matches; the others are
//! copied again. A torn last line (a crash mid-append) is ignored.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

/// The caller's private directory of copy journals.
#[derive(Debug)]
pub struct StateDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Where the directory's levels below the base are made.
const LEVELS: [&str; 2] = ["ahead", "copy"];

/// Whether a directory is one only the caller controls: owned by the caller,
/// writable by nobody else.
fn private(fd: impl AsFd, euid: u32) -> io::Result<()> {
    let st = rustix::fs::fstat(fd)?;
    if st.st_uid != euid {
        return Err(io::Error::other(format!(
            "owned by uid {}, not by the caller ({euid})",
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "writable by others (mode {:o})",
            st.st_mode & 0o7777
        )));
    }
    Ok(())
}

impl StateDir {
    /// Opens (making what is missing) the caller's journal directory, or
    /// says why there is none.
    pub fn open() -> Result<StateDir, String> {
        StateDir::open_at(&LEVELS)
    }

    /// Opens (making what is missing) the caller's private directory
    /// `levels` below the state directory (`$XDG_STATE_HOME` when it is the
    /// caller's own, else `~/.local/state`, with `~` `$HOME` when it is the
    /// caller's own, else the password database's), every level made 0700
    /// and checked to be the caller's alone.
    pub fn open_at(levels: &[&str]) -> Result<StateDir, String> {
        let euid = rustix::process::geteuid().as_raw();
        // $XDG_STATE_HOME is honoured only when it is the caller's own: an
        // environment inherited through sudo may name another user's.
        let own = |var: &str| {
            let p = PathBuf::from(std::env::var_os(var)?);
            if !p.is_absolute() {
                return None;
            }
            let fd = open_dir_at(rustix::fs::CWD, &p, true).ok()?;
            private(&fd, euid).ok()?;
            Some((fd, p))
        };
        let (base_fd, base) = match own("XDG_STATE_HOME") {
            Some(b) => b,
            None => {
                // $HOME on the same terms (the password database's answer
                // costs every `ahead run` a tenth of a millisecond).
                let (mut fd, home) = match own("HOME") {
                    Some(h) => h,
                    None => {
                        let home = crate::sys::home_of(euid)
                            .ok_or_else(|| format!("uid {euid} has no home directory"))?;
                        let fd = open_dir_at(rustix::fs::CWD, &home, true)
                            .map_err(|e| format!("{}: {e}", home.display()))?;
                        private(&fd, euid).map_err(|e| format!("{}: {e}", home.display()))?;
                        (fd, home)
                    }
                };
                let state = home.join(".local/state");
                for level in [".local", "state"] {
                    fd = make_level(&fd, level, euid)
                        .map_err(|e| format!("{}: {e}", state.display()))?;
                }
                (fd, state)
            }
        };
        let mut fd = base_fd;
        let mut path = base;
        for &level in levels {
            path.push(level);
            fd = make_level(&fd, level, euid).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(StateDir { fd, path })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn open_dir_at(dir: impl AsFd, name: &Path, follow: bool) -> io::Result<OwnedFd> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// Opens `name` in `dir` as a private directory, making it (0700) if it
/// does not exist; a link there is not followed.
fn make_level(dir: &OwnedFd, name: &str, euid: u32) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, name, Mode::RWXU) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = open_dir_at(dir, Path::new(name), false)?;
    private(&fd, euid)?;
    Ok(fd)
}

/// The source as a copy found it; a resumed copy must find it the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceId {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time (which no user can set back), nanoseconds.
    pub ctime_ns: i128,
    /// Inode.
    pub ino: u64,
    /// Device.
    pub dev: u64,
    /// A block device (whose contents can change with no time changing).
    pub block: bool,
    /// Chunk size the offsets are multiples of.
    pub chunk: u64,
    /// For an object: a hash of its URL and ETag (0 for a file).
    pub object: u128,
}

impl SourceId {
    /// A source of `size` bytes known by nothing else (the fields a file's
    /// metadata or an object's tag fill are zero).
    pub(super) fn blank(size: u64, chunk: u64) -> SourceId {
        SourceId {
            size,
            mtime_ns: 0,
            ctime_ns: 0,
            ino: 0,
            dev: 0,
            block: false,
            chunk,
            object: 0,
        }
    }
}

/// What binds a journal to its copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Random, also in the temporary file's name.
    pub token: String,
    /// The destination directory's device and inode.
    pub dir: (u64, u64),
    /// The destination's name in it.
    pub name: Vec<u8>,
    /// The temporary file's name in it.
    pub tmp_name: Vec<u8>,
    /// The temporary file's device and inode.
    pub tmp: (u64, u64),
    /// The source.
    pub src: SourceId,
}

const MAGIC: &str = "ahead-copy-journal 2";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Header {
    fn line(&self) -> String {
        let s = &self.src;
        format!(
            "{MAGIC} token={} dir={}:{} name={} tmp={} tmp_id={}:{} size={} mtime_ns={} \
             ctime_ns={} ino={} dev={} block={} chunk={} object={:032x}\n",
            self.token,
            self.dir.0,
            self.dir.1,
            hex(&self.name),
            hex(&self.tmp_name),
            self.tmp.0,
            self.tmp.1,
            s.size,
            s.mtime_ns,
            s.ctime_ns,
            s.ino,
            s.dev,
            u8::from(s.block),
            s.chunk,
            s.object
        )
    }

    fn parse(line: &str) -> Option<Header> {
        let rest = line.strip_prefix(MAGIC)?.trim();
        let mut f: HashMap<&str, &str> = HashMap::new();
        for field in rest.split_whitespace() {
            let (k, v) = field.split_once('=')?;
            f.insert(k, v);
        }
        let pair = |k: &str| -> Option<(u64, u64)> {
            let (a, b) = f.get(k)?.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        };
        let num = |k: &str| f.get(k)?.parse::<u64>().ok();
        let ns = |k: &str| f.get(k)?.parse::<i128>().ok();
        let token = f.get("token")?.to_string();
        let h = Header {
            token,
            dir: pair("dir")?,
            name: unhex(f.get("name")?)?,
            tmp_name: unhex(f.get("tmp")?)?,
            tmp: pair("tmp_id")?,
            src: SourceId {
                size: num("size")?,
                mtime_ns: ns("mtime_ns")?,
                ctime_ns: ns("ctime_ns")?,
                ino: num("ino")?,
                dev: num("dev")?,
                block: num("block")? == 1,
                chunk: num("chunk")?,
                // (Journals written before objects could be copied have
                // no such field: they were of files.)
                object: match f.get("object") {
                    Some(v) => u128::from_str_radix(v, 16).ok()?,
                    None => 0,
                },
            },
        };
        (h.src.chunk > 0 && !h.token.is_empty()).then_some(h)
    }
}

/// What a finished chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkSum {
    /// No data: the chunk reads as zeroes.
    Hole,
    /// XXH3-64 of the chunk's bytes.
    Xxh3(u64),
}

impl ChunkSum {
    fn text(&self) -> String {
        match self {
            ChunkSum::Hole => "hole".into(),
            ChunkSum::Xxh3(h) => format!("{h:016x}"),
        }
    }

    fn parse(s: &str) -> Option<ChunkSum> {
        if s == "hole" {
            return Some(ChunkSum::Hole);
        }
        (s.len() == 16)
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
            .map(ChunkSum::Xxh3)
    }
}

/// An open, locked journal.
#[derive(Debug)]
pub struct Journal {
    file: File,
    /// Where the next line goes (the descriptor is read too, so it is not
    /// O_APPEND; the copy's threads append under this lock).
    end: std::sync::Mutex<u64>,
    path: PathBuf,
    /// Its name in the state directory.
    name: String,
}

/// A journal's contents.
#[derive(Debug)]
pub struct Loaded {
    /// The first line.
    pub header: Header,
    /// Finished chunks: offset → what it holds.
    pub done: HashMap<u64, ChunkSum>,
}

impl Journal {
    /// Opens and locks the journal of destination `name` in the directory
    /// with device and inode `dir`. `Ok(None)`: another copy holds it.
    pub fn lock(state: &StateDir, dir: (u64, u64), name: &[u8]) -> io::Result<Option<Journal>> {
        let mut key = blake3::Hasher::new();
        key.update(&dir.0.to_le_bytes());
        key.update(&dir.1.to_le_bytes());
        key.update(name);
        let jname = format!("{}.journal", &key.finalize().to_hex()[..32]);
        loop {
            let fd = rustix::fs::openat(
                &state.fd,
                jname.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::RUSR | Mode::WUSR,
            )?;
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            // A copy that finished removes its journal while holding the
            // lock; a lock taken on that removed file must be taken again.
            let st = rustix::fs::fstat(&fd)?;
            let named = rustix::fs::statat(&state.fd, jname.as_str(), AtFlags::SYMLINK_NOFOLLOW);
            if !matches!(named, Ok(n) if (n.st_dev, n.st_ino) == (st.st_dev, st.st_ino)) {
                continue;
            }
            let euid = rustix::process::geteuid().as_raw();
            if st.st_uid != euid || st.st_nlink != 1 || st.st_mode & 0o170000 != 0o100000 {
                return Err(io::Error::other(format!(
                    "{}: not a journal of this user's",
                    state.path.join(&jname).display()
                )));
            }
            return Ok(Some(Journal {
                file: File::from(fd),
                end: std::sync::Mutex::new(st.st_size as u64),
                path: state.path.join(&jname),
                name: jname,
            }));
        }
    }

    /// What the journal holds (`None`: empty or not a journal).
    pub fn load(&self) -> io::Result<Option<Loaded>> {
        let mut text = Vec::new();
        let mut f = &self.file;
        f.seek(io::SeekFrom::Start(0))?;
        f.read_to_end(&mut text)?;
        let text = String::from_utf8_lossy(&text);
        let mut lines = text.split_inclusive('\n');
        let Some(header) = lines
            .next()
            .filter(|l| l.ends_with('\n'))
            .and_then(Header::parse)
        else {
            return Ok(None);
        };
        let chunk = header.src.chunk;
        let size = header.src.size;
        let done = lines
            .filter(|l| l.ends_with('\n'))
            .filter_map(|l| {
                let (off, sum) = l.trim().split_once(' ')?;
                Some((off.parse::<u64>().ok()?, ChunkSum::parse(sum)?))
            })
            .filter(|(off, _)| off % chunk == 0 && *off < size.max(1))
            .collect();
        Ok(Some(Loaded { header, done }))
    }

    /// Starts the journal afresh with `header`.
    pub fn start(&self, header: &Header) -> io::Result<()> {
        let mut end = self.end.lock().unwrap_or_else(|p| p.into_inner());
        self.file.set_len(0)?;
        *end = 0;
        self.append(&mut end, header.line().as_bytes())
    }

    /// Records the chunk at `offset` as complete (one write(2)).
    pub fn done(&self, offset: u64, sum: ChunkSum) -> io::Result<()> {
        let mut end = self.end.lock().unwrap_or_else(|p| p.into_inner());
        self.append(&mut end, format!("{offset} {}\n", sum.text()).as_bytes())
    }

    fn append(&self, end: &mut u64, line: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(line, *end)?;
        *end += line.len() as u64;
        Ok(())
    }

    /// Removes the journal (its copy is over), still holding the lock.
    pub fn remove(self, state: &StateDir) {
        let _ = rustix::fs::unlinkat(&state.fd, self.name.as_str(), AtFlags::empty());
    }

    /// Where the journal is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A name for the temporary file of destination `name`, with `token` in it:
/// `.NAME.ahead-TOKEN.part`, the name cut so the whole fits NAME_MAX.
pub fn tmp_name(name: &[u8], token: &str) -> Vec<u8> {
    const NAME_MAX: usize = 255;
    let suffix = format!(".ahead-{token}.part");
    let room = NAME_MAX - 1 - suffix.len();
    let mut out = Vec::with_capacity(NAME_MAX);
    out.push(b'.');
    out.extend_from_slice(&name[..name.len().min(room)]);
    out.extend_from_slice(suffix.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            token: "0123456789abcdef".into(),
            dir: (7, 99),
            name: b"out\xff.img".to_vec(),
            tmp_name: tmp_name(b"out\xff.img", "0123456789abcdef"),
            tmp: (7, 1234),
            src: SourceId {
                size: 10 << 20,
                mtime_ns: 1_700_000_000_123_456_789,
                ctime_ns: 1_700_000_001_000_000_000,
                ino: 42,
                dev: 7,
                block: false,
                chunk: 1 << 20,
                object: 0xfeed_0000_0000_0000_0000_0000_beef,
            },
        }
    }

    fn state() -> (tempfile::TempDir, StateDir) {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir_at(rustix::fs::CWD, dir.path(), true).unwrap();
        let path = dir.path().to_path_buf();
        (dir, StateDir { fd, path })
    }

    #[test]
    fn round_trip_and_a_torn_last_line_is_ignored() {
        let (_d, st) = state();
        let j = Journal::lock(&st, (7, 99), b"out").unwrap().unwrap();
        j.start(&header()).unwrap();
        j.done(0, ChunkSum::Xxh3(0x0123_4567_89ab_cdef)).unwrap();
        j.done(3 << 20, ChunkSum::Hole).unwrap();
        // A crash in the middle of an append.
        j.append(&mut j.end.lock().unwrap(), b"52428").unwrap();
        let l = j.load().unwrap().unwrap();
        assert_eq!(l.header, header());
        assert_eq!(
            l.done,
            HashMap::from([
                (0, ChunkSum::Xxh3(0x0123_4567_89ab_cdef)),
                (3 << 20, ChunkSum::Hole)
            ])
        );
    }

    #[test]
    fn a_second_copy_of_the_same_destination_finds_it_locked() {
        let (_d, st) = state();
        let j = Journal::lock(&st, (7, 99), b"out").unwrap().unwrap();
        assert!(Journal::lock(&st, (7, 99), b"out").unwrap().is_none());
        // Another destination has its own journal.
        assert!(Journal::lock(&st, (7, 99), b"other").unwrap().is_some());
        j.remove(&st);
        assert!(Journal::lock(&st, (7, 99), b"out").unwrap().is_some());
    }

    #[test]
    fn garbage_or_an_empty_journal_holds_nothing() {
        let (_d, st) = state();
        let j = Journal::lock(&st, (1, 2), b"x").unwrap().unwrap();
        assert!(j.load().unwrap().is_none());
        j.append(&mut j.end.lock().unwrap(), b"garbage\n0 hole\n")
            .unwrap();
        assert!(j.load().unwrap().is_none());
    }

    #[test]
    fn temporary_names_fit_name_max_and_keep_every_byte_they_can() {
        let long = vec![b'a'; 255];
        let t = tmp_name(&long, "0123456789abcdef");
        assert_eq!(t.len(), 255);
        assert!(t.ends_with(b".ahead-0123456789abcdef.part"));
        let t = tmp_name(b"x\xfe", "00");
        assert_eq!(t, b".x\xfe.ahead-00.part");
        // Two names that a lossy conversion would make equal stay apart.
        assert_ne!(tmp_name(b"a\xff", "00"), tmp_name(b"a\xfe", "00"));
    }
}
