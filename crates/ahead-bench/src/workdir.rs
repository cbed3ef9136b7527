//! Where benchmarks put their files: a private directory (made with
//! O_EXCL under a random name, mode 0700, removed when dropped) in a
//! directory that takes O_DIRECT.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A new directory for a benchmark's files in `parent`: mode 0700, an
/// unpredictable name (`prefix` and a random tail), made with mkdir's
/// O_EXCL semantics by `tempfile`, and removed with its contents when
/// dropped. Files made inside it cannot be planted or swapped by another
/// user, whatever `parent` is (`/tmp`).
pub fn private_dir(parent: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(|e| {
            Error::from(e).context(format!("make a private directory in {}", parent.display()))
        })
}

/// The directory benchmarks use without `--dir`: the temporary directory,
/// else the current one, whichever takes O_DIRECT.
pub fn default_dir() -> Result<PathBuf> {
    let tmp = std::env::temp_dir();
    if ahead::testdata::supports_direct(&tmp) {
        return Ok(tmp);
    }
    let cwd = std::env::current_dir()?;
    if ahead::testdata::supports_direct(&cwd) {
        eprintln!(
            "{} does not support O_DIRECT; using the current directory",
            tmp.display()
        );
        return Ok(cwd);
    }
    Err(Error::msg(format!(
        "neither {} nor the current directory supports O_DIRECT; pass --dir or --file",
        tmp.display()
    )))
}

/// The file a benchmark reads: `file` if given, else `size` bytes of
/// generated data in a [`private_dir`] of `dir` (or [`default_dir`]),
/// named with `prefix`; at least `least` bytes either way. Returns the
/// path, its size, and the directory to keep alive while it is read.
pub fn data_file(
    file: Option<&Path>,
    size: u64,
    dir: Option<&Path>,
    prefix: &str,
    least: u64,
) -> Result<(PathBuf, u64, Option<tempfile::TempDir>)> {
    let (path, work) = match file {
        Some(f) => (f.to_path_buf(), None),
        None => {
            let dir = match dir {
                Some(d) => d.to_path_buf(),
                None => default_dir()?,
            };
            let work = private_dir(&dir, prefix)?;
            let path = work.path().join("data");
            eprintln!(
                "generating {} test file {} ...",
                ahead::units::format_size(size),
                path.display()
            );
            ahead::testdata::write_file(&path, size)
                .map_err(|e| Error::msg(format!("write {}: {e}", path.display())))?;
            (path, Some(work))
        }
    };
    let size = std::fs::metadata(&path)
        .map_err(|e| Error::msg(format!("{}: {e}", path.display())))?
        .len();
    if size < least {
        return Err(Error::msg(format!(
            "{}: at least {} needed",
            path.display(),
            ahead::units::format_size(least)
        )));
    }
    Ok((path, size, work))
}
