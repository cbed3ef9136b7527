//! The counters of a file and of the whole cache ([`Stats`]), with the
//! Buffered and Uncached modes' own.

/// Counters, per file and per engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Read requests served.
    pub requests: u64,
    /// Bytes returned to readers.
    pub bytes: u64,
    /// Pages found up to date.
    pub hits: u64,
    /// Of those, pages read on the lock-free hit path (up to date, whole,
    /// unmarked and used before; see `File::read_at`).
    pub lock_free_hits: u64,
    /// Pages read on demand (the reader needed them and nothing had asked
    /// for them yet).
    pub misses: u64,
    /// Pages a reader had to wait for although readahead had already asked
    /// for them: late prefetches.
    pub late: u64,
    /// Device reads issued.
    pub device_reads: u64,
    /// Bytes asked of the device.
    pub device_bytes: u64,
    /// Pages read ahead.
    pub readahead_pages: u64,
    /// Pages read ahead that a reader then used.
    pub readahead_used: u64,
    /// Pages read ahead and evicted (or dropped with their file) unused.
    pub readahead_wasted: u64,
    /// Demand misses on pages that had been read ahead and evicted unused:
    /// readahead thrashing.
    pub evicted_before_use: u64,
    /// Pages a scan of a file larger than the cache used and then gave
    /// back for its own readahead (the ring), rather than taking memory
    /// not touched yet or another file's pages.
    pub recycled: u64,
    /// Buffered mode: reads tried first with `preadv2(RWF_NOWAIT)`.
    pub nowait_probes: u64,
    /// Buffered mode: probes that served the whole read from the kernel's
    /// cache.
    pub nowait_hits: u64,
    /// Buffered mode: bytes served by probes, on the caller's thread.
    pub inline_bytes: u64,
    /// Buffered mode: blocking reads served by a plain `pread` with no
    /// probe, the file's last 64 probes or more having all hit (every
    /// 16th read still probes). Requests are `nowait_hits`,
    /// `backend_reads` and these.
    pub plain_reads: u64,
    /// Buffered and Uncached modes: reads (or rests of reads) that went to
    /// a blocking read — the backend, or the caller's thread for the
    /// blocking API, which waits anyway.
    pub backend_reads: u64,
    /// Buffered mode: kernel readahead hints issued (one per run of pages).
    pub hints: u64,
    /// Buffered mode: pages those hints asked for.
    pub hinted_pages: u64,
    /// Buffered mode: nanoseconds spent in probes, estimated from one probe
    /// in 16, which is timed.
    pub inline_ns: u64,
    /// Buffered and Uncached modes: nanoseconds spent in blocking reads.
    pub backend_ns: u64,
}

impl Stats {
    /// Mean bytes per device read.
    pub fn avg_io_bytes(&self) -> u64 {
        self.device_bytes
            .checked_div(self.device_reads)
            .unwrap_or(0)
    }

    /// The counters as (name, value) pairs, for reports and JSON.
    pub fn fields(&self) -> [(&'static str, u64); 23] {
        [
            ("requests", self.requests),
            ("bytes", self.bytes),
            ("hits", self.hits),
            ("lock_free_hits", self.lock_free_hits),
            ("misses", self.misses),
            ("late", self.late),
            ("device_reads", self.device_reads),
            ("device_bytes", self.device_bytes),
            ("avg_io_bytes", self.avg_io_bytes()),
            ("readahead_pages", self.readahead_pages),
            ("readahead_used", self.readahead_used),
            ("readahead_wasted", self.readahead_wasted),
            ("evicted_before_use", self.evicted_before_use),
            ("recycled", self.recycled),
            ("nowait_probes", self.nowait_probes),
            ("nowait_hits", self.nowait_hits),
            ("inline_bytes", self.inline_bytes),
            ("plain_reads", self.plain_reads),
            ("backend_reads", self.backend_reads),
            ("hints", self.hints),
            ("hinted_pages", self.hinted_pages),
            ("inline_ns", self.inline_ns),
            ("backend_ns", self.backend_ns),
        ]
    }
}
