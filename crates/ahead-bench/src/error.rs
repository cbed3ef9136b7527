//! The benchmarks' one error type: a message that says which file or
//! program and what failed, built from the errors a benchmark meets.

use std::fmt;

/// A benchmark's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    /// An error with this message.
    pub fn msg(m: impl Into<String>) -> Error {
        Error(m.into())
    }

    /// The same error with `what` in front (`what: message`).
    pub fn context(self, what: impl fmt::Display) -> Error {
        Error(format!("{what}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(m: String) -> Error {
        Error(m)
    }
}

impl From<&str> for Error {
    fn from(m: &str) -> Error {
        Error(m.to_owned())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error(e.to_string())
    }
}

impl From<ahead::Error> for Error {
    fn from(e: ahead::Error) -> Error {
        Error(e.to_string())
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Error {
        Error(std::io::Error::from(e).to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error(format!("JSON: {e}"))
    }
}

impl From<ahead::ParseError> for Error {
    fn from(e: ahead::ParseError) -> Error {
        Error(e.to_string())
    }
}

/// A benchmark's result.
pub type Result<T> = std::result::Result<T, Error>;
