//! The library's one error type.
//!
//! Every error that comes from the operating system keeps its
//! [`std::io::Error`] as the source and says which file, and where in it, the
//! failed operation was; the command-line tool prints it as one line.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong, with the file and offset it concerns.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    Io {
        /// What was being done ("open", "read", ...).
        op: &'static str,
        /// The file concerned (empty when none).
        path: PathBuf,
        /// The byte offset concerned, when there is one.
        offset: Option<u64>,
        /// The operating system's error.
        source: io::Error,
    },
    /// The file cannot be used the way it was asked to be used.
    Unsupported {
        /// The file concerned.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// An argument is out of range (a size too large, a rate of zero).
    Invalid {
        /// What it was for ("copy", ...).
        what: &'static str,
        /// What is wrong and what is allowed.
        why: String,
    },
    /// The operation was refused to protect data (copying a file onto
    /// itself, writing to a mounted device, ...).
    Refused {
        /// The file concerned.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A copy's checksums differ: the destination is not the source.
    Mismatch {
        /// The destination.
        path: PathBuf,
        /// The source's checksum.
        src: String,
        /// The destination's checksum.
        dst: String,
    },
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error on `path` (at `offset`, if known) while doing `op`.
    pub fn io(op: &'static str, path: &Path, offset: Option<u64>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            offset,
            source,
        }
    }

    /// The operating system's error number, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io {
                op,
                path,
                offset,
                source,
            } => {
                write!(f, "{op} {}", path.display())?;
                if let Some(offset) = offset {
                    write!(f, " at offset {offset}")?;
                }
                write!(f, ": {source}")
            }
            Error::Unsupported { path, why } => write!(f, "{}: {why}", path.display()),
            Error::Invalid { what, why } => write!(f, "invalid {what} setting: {why}"),
            Error::Refused { path, why } => write!(f, "{}: refused: {why}", path.display()),
            Error::Mismatch { path, src, dst } => write!(
                f,
                "{}: verification failed: source {src}, destination {dst}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { source, .. } => source.kind(),
            Error::Unsupported { .. } => io::ErrorKind::Unsupported,
            Error::Invalid { .. } | Error::Refused { .. } => io::ErrorKind::InvalidInput,
            Error::Mismatch { .. } => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// A name that does not parse: a mode, a backend, an eviction or readahead
/// policy, a device profile. One type for every `FromStr` of the
/// workspace's names, saying what was given and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What the name was for ("mode", "backend", ...).
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// What is accepted.
    pub expected: &'static str,
}

impl ParseError {
    /// `given` is not a `what`; `expected` lists what is.
    pub fn new(what: &'static str, given: &str, expected: &'static str) -> ParseError {
        ParseError {
            what,
            given: given.to_string(),
            expected,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} '{}' (expected {})",
            self.what, self.given, self.expected
        )
    }
}

impl std::error::Error for ParseError {}
