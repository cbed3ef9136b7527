//! Before a run: the file's size as the run reads it, evicted if the run
//! is cold, a throttle's burst drained if asked.

use std::path::Path;

use ahead::io::AlignedBuf;

use super::Workload;

/// The bytes of `path` that `w` reads (the file's size, or its span), after
/// evicting it if `w` is cold and draining a throttle's burst if asked.
pub(super) fn prepare(path: &Path, w: &Workload) -> crate::Result<u64> {
    let meta = std::fs::metadata(path)
        .map_err(|e| crate::Error::msg(format!("{}: {e}", path.display())))?;
    let mut size = if meta.is_file() {
        meta.len()
    } else if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        use std::io::Seek as _;
        std::fs::File::open(path)
            .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)))
            .map_err(|e| crate::Error::msg(format!("{}: {e}", path.display())))?
    } else {
        return Err(format!(
            "{}: not a regular file or block device (a read needs the file's size; \
             `ahead cat` streams pipes and character devices)",
            path.display()
        )
        .into());
    };
    if w.span > 0 {
        size = size.min(w.span);
    }
    if size < w.bs {
        return Err(format!(
            "{}: file is smaller than one request ({} bytes)",
            path.display(),
            w.bs
        )
        .into());
    }
    if w.cold {
        evict(path)?;
    }
    if w.drain > 0 {
        drain(path, w.drain.min(size))?;
    }
    if w.warm {
        cache(path, size)?;
    }
    Ok(size)
}

/// Reads what is missing of the first `bytes` of `path` into the kernel's
/// cache (`residency::warm`, as `ahead warm` does), so that a warm run starts with its span cached whatever ran
/// before it. This machine's reclaimer evicts pages untouched for about 3
/// s (docs/measuring.md), and in `bench --quick` the Direct engine's warm
/// pass over the capped device takes longer than that: the Buffered run
/// after it then warmed its own reads from the device, with readahead
/// hints still being read under its timed pass (`cached-16k` at 0.62x and
/// 0.84x the kernel in two runs, where the same reads run alone at
/// 0.94-1.04x).
fn cache(path: &Path, bytes: u64) -> crate::Result<()> {
    let fd = ahead::testdata::open_read(path, false)
        .map_err(|e| crate::Error::msg(format!("open {}: {e}", path.display())))?;
    ahead::residency::warm(&fd, 0, bytes)
        .map_err(|e| crate::Error::msg(format!("warm {}: {e}", path.display())))?;
    Ok(())
}

/// Reads the first `bytes` of `path` with O_DIRECT in 1 MiB requests:
/// the bandwidth burst a throttle lets through after an idle spell. (Mixing
/// in 4 KiB requests to spend an IOPS burst too made the next runs less
/// steady, not more; runs bound by IOPS are sized to last seconds instead.)
fn drain(path: &Path, bytes: u64) -> crate::Result<()> {
    let fd = ahead::testdata::open_read(path, true)
        .map_err(|e| crate::Error::msg(format!("open {}: {e}", path.display())))?;
    let mut buf = AlignedBuf::new(1 << 20, 4096);
    let mut at = 0;
    while at < bytes {
        let n = rustix::io::pread(&fd, buf.as_mut_slice(), at)
            .map_err(|e| crate::Error::msg(format!("read {}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    Ok(())
}

/// Drops `path` from the kernel's cache.
pub fn evict(path: &Path) -> crate::Result<()> {
    let fd = ahead::testdata::open_read(path, false)
        .map_err(|e| crate::Error::msg(format!("open {}: {e}", path.display())))?;
    ahead::residency::evict(&fd, 0, 0)
        .map_err(|e| crate::Error::msg(format!("evict {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Pattern, Workload};

    /// A warm workload starts with its span in the kernel's cache, whatever
    /// evicted it before (the reclaimer, a cold run), and nothing past the
    /// span is read in.
    #[test]
    fn a_warm_workload_starts_with_its_span_cached() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let path = dir.path().join("f");
        ahead::testdata::write_file(&path, 8 << 20).unwrap();
        evict(&path).unwrap();
        let fd = ahead::testdata::open_read(&path, false).unwrap();
        let size = 8 << 20;
        let Some(false) = ahead::residency::all_cached(&fd, 0, size, size) else {
            // A file system that cannot drop its pages (tmpfs) says
            // nothing here.
            eprintln!("SKIP: the file's pages could not be evicted here");
            return;
        };
        let w = Workload {
            cold: false,
            warm: true,
            span: 2 << 20,
            ..Workload::new(Pattern::Random, 4096)
        };
        assert_eq!(prepare(&path, &w).unwrap(), 2 << 20);
        assert_eq!(
            ahead::residency::all_cached(&fd, 0, 2 << 20, size),
            Some(true)
        );
        // Not warm: nothing is read in.
        evict(&path).unwrap();
        let w = Workload { warm: false, ..w };
        prepare(&path, &w).unwrap();
        assert_eq!(
            ahead::residency::all_cached(&fd, 0, 2 << 20, size),
            Some(false)
        );
    }
}
