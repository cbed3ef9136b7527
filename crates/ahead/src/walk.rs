//! Walking directory trees through descriptors, never through a link: the
//! one walker behind `ahead copy -r` and `ahead stat/evict/warm -R`.
//!
//! A directory is listed from its open descriptor ([`names`]); each entry
//! is looked at without following a link (`statat` with
//! `AT_SYMLINK_NOFOLLOW`), opened relative to the directory with
//! `O_NOFOLLOW` only if the caller wants that kind of entry, and what was
//! opened is checked with `fstat` on its descriptor ([`open_entry`]). An
//! entry swapped for a link between the look and the open is reported as a
//! link, one swapped for something else as skipped: a walk never leaves
//! the tree it started in, and never opens a FIFO it did not ask for (where
//! an open could hang).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// The names in the open directory `dir`, sorted (so a walk is the same
/// from run to run), without `.` and `..`.
pub fn names(dir: impl AsFd) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let n = entry?.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            out.push(OsStr::from_bytes(&n).to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// What [`open_entry`] found.
#[derive(Debug)]
pub enum Entry {
    /// Opened, and of the type it was looked at as (a directory, a regular
    /// file, or whatever else the caller asked to open).
    Open(OwnedFd, FileType),
    /// A symbolic link, not followed (also one that replaced the entry
    /// between the look and the open).
    Link,
    /// Not opened: a type the caller does not open, or an entry that
    /// became another type between the look and the open.
    Skipped(FileType),
    /// Gone before it could be opened.
    Gone,
}

/// Looks at the entry `name` of the open directory `dir` and opens it with
/// the flags `flags_for` gives for its type (`None`: not opened, the entry
/// is [`Entry::Skipped`]). `O_NOFOLLOW`, `O_NOCTTY` and `O_CLOEXEC` are
/// always added. Errors other than the entry vanishing or changing are
/// returned.
pub fn open_entry(
    dir: impl AsFd,
    name: &OsStr,
    flags_for: impl Fn(FileType) -> Option<OFlags>,
) -> io::Result<Entry> {
    let dir = dir.as_fd();
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(Entry::Gone),
        Err(e) => return Err(e.into()),
    };
    let want = FileType::from_raw_mode(st.st_mode);
    if want == FileType::Symlink {
        return Ok(Entry::Link);
    }
    let Some(flags) = flags_for(want) else {
        return Ok(Entry::Skipped(want));
    };
    let flags = flags | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Entry::Gone),
        Err(Errno::LOOP) => return Ok(Entry::Link),
        Err(Errno::NOTDIR) => return Ok(Entry::Skipped(want)),
        Err(e) => return Err(e.into()),
    };
    let got = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if got != want {
        return Ok(Entry::Skipped(got));
    }
    Ok(Entry::Open(fd, want))
}

/// The flags a walk opens directories with.
pub fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY
}

/// The bytes in the regular files under the open directory `dir`, walked
/// as above (entries it cannot read count nothing): the total a tree copy
/// reports progress against.
pub fn regular_bytes(dir: impl AsFd) -> u64 {
    let dir = dir.as_fd();
    let Ok(list) = names(dir) else { return 0 };
    let mut sum = 0;
    for name in list {
        let Ok(st) = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => sum += st.st_size as u64,
            FileType::Directory => {
                let only_dirs = |ft| (ft == FileType::Directory).then(dir_flags);
                if let Ok(Entry::Open(sub, _)) = open_entry(dir, &name, only_dirs) {
                    sum += regular_bytes(&sub);
                }
            }
            _ => {}
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;
    use std::os::unix::fs::symlink;

    #[test]
    fn entries_are_opened_by_type_and_links_are_never_followed() {
        let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/f"), [7u8; 100]).unwrap();
        std::fs::write(d.join("a"), [1u8; 10]).unwrap();
        symlink("/etc", d.join("l")).unwrap();
        symlink("/etc/passwd", d.join("lf")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("p").as_path(),
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let top = rustix::fs::open(d, dir_flags(), Mode::empty()).unwrap();
        let list = names(&top).unwrap();
        assert_eq!(list, ["a", "l", "lf", "p", "sub"]);
        let files_and_dirs = |ft| match ft {
            FileType::Directory => Some(dir_flags()),
            FileType::RegularFile => Some(OFlags::RDONLY | OFlags::NONBLOCK),
            _ => None,
        };
        let kinds: Vec<String> = list
            .iter()
            .map(|n| match open_entry(&top, n, files_and_dirs).unwrap() {
                Entry::Open(_, ft) => format!("open {ft:?}"),
                Entry::Link => "link".into(),
                Entry::Skipped(ft) => format!("skipped {ft:?}"),
                Entry::Gone => "gone".into(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "open RegularFile",
                "link",
                "link",
                "skipped Fifo",
                "open Directory"
            ]
        );
        assert!(matches!(
            open_entry(&top, OsStr::new("missing"), files_and_dirs).unwrap(),
            Entry::Gone
        ));
        // 10 + 100 bytes of regular files; /etc behind the link not counted.
        assert_eq!(regular_bytes(&top), 110);
    }
}
