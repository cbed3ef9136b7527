//! What the helper writes out: the `--stats` lines of each file at exit,
//! and the trace lines of `ahead trace`, appended to their files.

use super::*;

/// Counters of one file as one descriptor saw it.
#[derive(Clone, Debug, Default)]
pub(super) struct FileStats {
    pub(super) path: String,
    pub(super) requests: u64,
    pub(super) bytes: u64,
    pub(super) writes: u64,
    pub(super) written: u64,
    pub(super) hints: u64,
    pub(super) hinted_pages: u64,
    pub(super) hinted_read: u64,
    pub(super) policy: &'static str,
    /// Mappings of the file (reads through them are not seen).
    pub(super) maps: u64,
    /// The policy's view of the streams, when the file was last closed
    /// or at exit.
    pub(super) streams: Vec<String>,
    /// The last trial of the kernel's readahead on the file, if one
    /// started: finished, or under way with `off_ns` 0 until measured
    /// ([`ahead::ra::hints::trial::Trial::outcome`]).
    pub(super) kernel_readahead: Option<ahead::ra::hints::trial::Outcome>,
}

impl State {
    pub(super) fn flush_trace(&mut self, config: &Config, force: bool) {
        if self.trace.is_empty() || (!force && self.trace.len() < TRACE_FLUSH) {
            return;
        }
        if let Some(path) = &config.trace {
            append(path, self.trace.as_bytes());
        }
        self.trace.clear();
    }

    pub(super) fn finish(&mut self, config: &Config, dropped: u64) {
        self.end_faults();
        self.flush_trace(config, true);
        let Some(path) = &config.stats else { return };
        let mut all: Vec<FileStats> = std::mem::take(&mut self.done);
        all.extend(self.open.drain().map(|(_, o)| o.finish()));
        // One record per file: descriptors of the same path add up.
        let mut by_path: Vec<FileStats> = Vec::new();
        for s in all {
            match by_path.iter_mut().find(|b| b.path == s.path) {
                Some(b) => {
                    b.requests += s.requests;
                    b.bytes += s.bytes;
                    b.writes += s.writes;
                    b.written += s.written;
                    b.hints += s.hints;
                    b.hinted_pages += s.hinted_pages;
                    b.hinted_read += s.hinted_read;
                    b.maps += s.maps;
                    if !s.streams.is_empty() {
                        b.streams = s.streams;
                    }
                    if s.kernel_readahead.is_some() {
                        b.kernel_readahead = s.kernel_readahead;
                    }
                }
                None => by_path.push(s),
            }
        }
        let mut out = String::new();
        let m = mode_name();
        for s in by_path {
            let accuracy = if s.hinted_pages > 0 {
                format!("{:.4}", s.hinted_read as f64 / s.hinted_pages as f64)
            } else {
                "null".into()
            };
            // The last trial of the kernel's readahead: its mean read
            // with readahead and without, and whether it stayed off.
            let kernel_readahead = s.kernel_readahead.map_or("null".into(), |o| {
                format!(
                    "{{\"on_us\":{:.1},\"off_us\":{:.1},\"off\":{},\"trials\":{}}}",
                    o.on_ns as f64 / 1e3,
                    o.off_ns as f64 / 1e3,
                    o.off,
                    o.trials
                )
            });
            let _ = writeln!(
                out,
                "{{\"pid\":{},\"mode\":\"{}\",\"file\":{},\"requests\":{},\"bytes\":{},\"writes\":{},\"written\":{},\"hints\":{},\"hinted_pages\":{},\"hinted_pages_read\":{},\"accuracy\":{},\"policy\":\"{}\",\"streams\":[{}],\"maps\":{},\"kernel_readahead\":{},\"events_dropped\":{}}}",
                std::process::id(),
                m,
                json_string(&s.path),
                s.requests,
                s.bytes,
                s.writes,
                s.written,
                s.hints,
                s.hinted_pages,
                s.hinted_read,
                accuracy,
                s.policy,
                s.streams.iter().map(|x| json_string(x)).collect::<Vec<_>>().join(","),
                s.maps,
                kernel_readahead,
                dropped
            );
        }
        append(path, out.as_bytes());
    }
}

/// The process's own line of `--stats`, after its files' (when stats are
/// asked for): the reads the library passed over without an event
/// (`quiet`), the file positions asked of the kernel for reads at the
/// position ([`crate::position`]), events dropped on a full queue, and the
/// helper thread's CPU time.
pub(super) fn process_line(config: &Config, dropped: u64, helper_cpu_ns: u64) {
    let Some(path) = &config.stats else { return };
    let m = mode_name();
    let line = format!(
        "{{\"pid\":{},\"mode\":\"{}\",\"process\":true,\"reads_passed\":{},\"positions_asked\":{},\"events_dropped\":{},\"helper_cpu_s\":{:.6}}}\n",
        std::process::id(),
        m,
        crate::quiet::PASSED.load(Ordering::Relaxed),
        crate::POSITIONS_ASKED.load(Ordering::Relaxed),
        dropped,
        helper_cpu_ns as f64 / 1e9
    );
    append(path, line.as_bytes());
}

fn mode_name() -> &'static str {
    match mode() {
        Mode::Readahead => "readahead",
        Mode::Uncached => "uncached",
        Mode::Trace => "trace",
        Mode::Off => "off",
    }
}

pub(super) fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Appends `bytes` to `path` in one write (O_APPEND: the processes of one
/// run share the file), never creating it (ahead run did) and only if it
/// is still a regular file of this user's. The descriptor lives only for
/// the call.
pub(super) fn append(path: &str, bytes: &[u8]) {
    use rustix::fs::{Mode as FMode, OFlags};
    let Ok(fd) = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::APPEND | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        FMode::from_raw_mode(0o600),
    ) else {
        return;
    };
    // Only into a regular file of this process's own user (ahead run made
    // it so; a file swapped in since is left alone).
    match rustix::fs::fstat(&fd) {
        Ok(st)
            if st.st_uid == rustix::process::geteuid().as_raw()
                && rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() => {}
        _ => return,
    }
    let mut rest = bytes;
    while !rest.is_empty() {
        match rustix::io::write(&fd, rest) {
            Ok(0) | Err(_) => break,
            Ok(n) => rest = &rest[n..],
        }
    }
}

/// At exit: let the helper take what is queued, then write the outputs.
pub(crate) fn at_exit() {
    let Some(rt) = runtime() else {
        // No read ever reached the helper: the process's line alone.
        if let Some(c) = config() {
            process_line(c, 0, 0);
        }
        return;
    };
    rt.exiting.store(true, Ordering::SeqCst);
    if rt.config.stats.is_none() && rt.config.trace.is_none() {
        // Nothing to count or record: what the helper has not yet taken
        // are hints for reads this process will no longer make. Waiting
        // for it to drain them cost `tail -n 1629` of a cached file 6.8 ms
        // (1.1 ms plain): the helper, woken on the other vCPU of an idle
        // VM, takes milliseconds to run.
        return;
    }
    if !rt.started.load(Ordering::Acquire) {
        process_line(&rt.config, rt.dropped.load(Ordering::Relaxed), 0);
        return;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !rt.queue.is_empty() && std::time::Instant::now() < deadline {
        wake(rt, true);
        std::thread::sleep(Duration::from_micros(200));
    }
    loop {
        match rt.state.try_lock() {
            Ok(mut st) => {
                st.finish(&rt.config, rt.dropped.load(Ordering::Relaxed));
                let cpu = rt.cpu_ns.load(Ordering::Relaxed);
                process_line(&rt.config, rt.dropped.load(Ordering::Relaxed), cpu);
                return;
            }
            Err(std::sync::TryLockError::Poisoned(_)) => return,
            Err(std::sync::TryLockError::WouldBlock) => {
                if std::time::Instant::now() >= deadline {
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}
