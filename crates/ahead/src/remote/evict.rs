//! The disk tier's eviction: S3-FIFO over object versions (see
//! [`super::tier`]), run by whichever process finds the tier over its
//! bound, under an flock(2) of the tier's `lock` file.

use std::collections::VecDeque;
use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::tier::{now_ns, DiskTier, Header, GHOSTS};

/// An object version as a pass finds it.
pub(crate) struct Listed {
    stem: String,
    pub(crate) header: Header,
    /// Bytes its data and index files hold on disk.
    pub(crate) bytes: u64,
}

/// A data file without an index, older than this, is an orphan (its
/// index was removed by a pass while a process was opening it, or the
/// process died between the two): a pass removes it. Younger, it may be
/// one whose index a concurrent open is making.
const ORPHAN_AGE_S: i64 = 60;

/// Every version in the tier, with its header and its data's bytes; an
/// index that is not one (no header) is skipped. Data files without an
/// index, in `orphans`.
fn list_all(tier: &DiskTier, orphans: &mut Vec<String>) -> io::Result<Vec<Listed>> {
    let mut out = Vec::new();
    let dir = tier.dir();
    let mut data = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy();
        if let Some(stem) = name.strip_suffix(".dat") {
            data.push(stem.to_owned());
        }
        let Some(stem) = name.strip_suffix(".idx") else {
            continue;
        };
        let Ok(fd) = open(dir, &format!("{stem}.idx")) else {
            continue;
        };
        let Some(header) = Header::read(&fd) else {
            continue;
        };
        let index = rustix::fs::fstat(&fd).map_or(0, |st| st.st_blocks as u64 * 512);
        let bytes = index
            + rustix::fs::statat(dir, format!("{stem}.dat"), AtFlags::SYMLINK_NOFOLLOW)
                .map_or(0, |st| st.st_blocks as u64 * 512);
        out.push(Listed {
            stem: stem.to_owned(),
            header,
            bytes,
        });
    }
    let indexed: std::collections::HashSet<&str> = out.iter().map(|o| o.stem.as_str()).collect();
    orphans.extend(data.into_iter().filter(|s| !indexed.contains(s.as_str())));
    Ok(out)
}

/// Every version in the tier ([`list_all`]).
pub(crate) fn list(tier: &DiskTier) -> io::Result<Vec<Listed>> {
    list_all(tier, &mut Vec::new())
}

/// Removes the orphans among `stems` (see [`ORPHAN_AGE_S`]).
fn remove_orphans(dir: &OwnedFd, stems: &[String]) {
    let now = now_ns() as i64 / 1_000_000_000;
    for stem in stems {
        let name = format!("{stem}.dat");
        let old = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
            #[allow(clippy::unnecessary_cast)] // its width varies by architecture
            let mtime = st.st_mtime as i64;
            now - mtime > ORPHAN_AGE_S
        });
        // Its index may have come meanwhile.
        let indexed =
            rustix::fs::statat(dir, format!("{stem}.idx"), AtFlags::SYMLINK_NOFOLLOW).is_ok();
        if old && !indexed {
            let _ = rustix::fs::unlinkat(dir, &name, AtFlags::empty());
        }
    }
}

fn open(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// One pass: while the tier holds more than its bound, the small queue's
/// head (while that queue holds more than its share, or the main queue is
/// empty) moves to the main queue if it was opened again, else is dropped
/// and kept as a ghost; otherwise the main queue's head goes round once
/// more if it was opened again, else is dropped. Returns the bytes left.
pub(crate) fn pass(tier: &DiskTier) -> io::Result<u64> {
    let mut orphans = Vec::new();
    let listed = list_all(tier, &mut orphans)?;
    remove_orphans(tier.dir(), &orphans);
    let mut total: u64 = listed.iter().map(|o| o.bytes).sum();
    let limit = tier.limit();
    if total <= limit {
        return Ok(total);
    }
    let target = limit / super::tier::AFTER_PASS.1 * super::tier::AFTER_PASS.0;
    let (mut ghosts, live): (Vec<Listed>, Vec<Listed>) =
        listed.into_iter().partition(|o| o.header.ghost);
    let dir = tier.dir();
    // Ghosts first: as many as there are versions with data (S3-FIFO's
    // ghost queue is as long as its main one), and at most GHOSTS.
    let keep = live.len().clamp(64, GHOSTS);
    if ghosts.len() > keep {
        ghosts.sort_by_key(|o| o.header.inserted);
        let drop = ghosts.len() - keep;
        for o in ghosts.drain(..drop) {
            let _ = rustix::fs::unlinkat(dir, format!("{}.idx", o.stem), AtFlags::empty());
            total -= o.bytes;
        }
    }
    let (mut main, mut small): (Vec<Listed>, Vec<Listed>) =
        live.into_iter().partition(|o| o.header.main);
    main.sort_by_key(|o| o.header.inserted);
    small.sort_by_key(|o| o.header.inserted);
    let (mut main, mut small) = (VecDeque::from(main), VecDeque::from(small));
    let mut small_bytes: u64 = small.iter().map(|o| o.bytes).sum();
    let counters = &tier.counters;
    while total > target {
        if !small.is_empty() && (small_bytes > limit / super::tier::SMALL_SHARE || main.is_empty())
        {
            let Some(mut o) = small.pop_front() else {
                break;
            };
            small_bytes -= o.bytes;
            if o.header.freq > 0 {
                o.header = Header {
                    main: true,
                    freq: 0,
                    inserted: now_ns(),
                    ..o.header
                };
                rewrite(dir, &o);
                main.push_back(o);
            } else {
                let _ = rustix::fs::unlinkat(dir, format!("{}.dat", o.stem), AtFlags::empty());
                o.header.ghost = true;
                o.header.inserted = now_ns();
                if let Ok(fd) = open(dir, &format!("{}.idx", o.stem)) {
                    let _ = rustix::fs::ftruncate(&fd, 0);
                    let _ = o.header.write(&fd);
                }
                // What is left of it: its header's block.
                total -= o.bytes.saturating_sub(4096);
                counters
                    .evicted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ghosts.push(o);
            }
        } else if let Some(mut o) = main.pop_front() {
            if o.header.freq > 0 {
                o.header.freq -= 1;
                o.header.inserted = now_ns();
                rewrite(dir, &o);
                main.push_back(o);
            } else {
                let _ = rustix::fs::unlinkat(dir, format!("{}.dat", o.stem), AtFlags::empty());
                let _ = rustix::fs::unlinkat(dir, format!("{}.idx", o.stem), AtFlags::empty());
                total -= o.bytes;
                counters
                    .evicted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        } else {
            break;
        }
    }
    Ok(total)
}

/// Writes a version's header back (its queue, count and time).
fn rewrite(dir: &OwnedFd, o: &Listed) {
    if let Ok(fd) = open(dir, &format!("{}.idx", o.stem)) {
        // Only if it is still the same version's index.
        if Header::read(&fd).is_some_and(|h| h.key == o.header.key) {
            let _ = o.header.write(&fd);
        }
    }
}
