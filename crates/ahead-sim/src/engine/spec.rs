//! What a simulation is asked to run (readers and their requests) and what
//! one phase of it counted.

/// One request of a reader.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Op {
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub len: u64,
    /// The file it reads, where not the reader's: a thread of a traced
    /// program reads several files, one after another.
    pub file: Option<usize>,
    /// Whether it is a page fault of a mapping, where not as the reader's
    /// [`ReaderSpec::page_faults`] says.
    pub fault: Option<bool>,
    /// The program's time between this request's completion and its next
    /// request, seconds (computing, as a trace's timestamps hold it): the
    /// kernel's asynchronous readahead runs on during it.
    pub think: f64,
}

impl From<(u64, u64)> for Op {
    fn from((offset, len): (u64, u64)) -> Op {
        Op {
            offset,
            len,
            file: None,
            fault: None,
            think: 0.0,
        }
    }
}

/// A reader: a sequence of requests, by default of one file.
pub struct ReaderSpec {
    /// Which file (index into the engine's files).
    pub file: usize,
    /// When the reader starts, seconds after the phase starts.
    pub start: f64,
    /// Least time between the issue of two requests, seconds.
    pub interval: f64,
    /// Requests in flight at once.
    pub depth: usize,
    /// The requests, one after another (a tuple `(offset, length)` makes
    /// a request of the reader's file with no time between).
    pub ops: Box<dyn Iterator<Item = Op>>,
    /// The requests are page faults of a mapping of the file (an `ahead
    /// trace`'s `map=1` lines), served as the kernel's `filemap_fault`
    /// does: read-around on a miss, the policy only at a marker.
    pub page_faults: bool,
}

/// Counters of one phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseStats {
    /// Virtual seconds from the phase's start to its last reader's last
    /// request.
    pub seconds: f64,
    /// Bytes the readers asked for (cut to the file).
    pub bytes_requested: u64,
    /// Pages the readers asked for.
    pub pages_requested: u64,
    /// Pages found cached (not in flight) when asked for.
    pub pages_hit: u64,
    /// Bytes read from the device.
    pub device_bytes: u64,
    /// I/Os sent to the device.
    pub device_ios: u64,
    /// Pages read by readahead windows.
    pub readahead_pages: u64,
    /// Readahead pages evicted before any reader used them.
    pub evicted_before_use: u64,
    /// Readahead pages of this phase never used by its end.
    pub unused_at_end: u64,
    /// Requests that waited for a page readahead had already asked for.
    pub late_prefetches: u64,
    /// Requests served.
    pub requests: u64,
    /// Per bucket: (delivered bytes, device bytes, device I/Os).
    pub timeline: Vec<(u64, u64, u64)>,
}
