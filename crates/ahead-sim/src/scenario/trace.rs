//! Traces of real programs, as `ahead trace` writes them (or plain
//! `offset length [stream]` lines): parsing, loading (plain or gzip), and
//! keeping one file of several.

use super::SimResult;
use super::{engine_config, per_policy, reader, result, setup, Scenario, SimError, SimOptions};
use super::{KIB, PAGE};
use crate::engine::{cpu_time, Op, ReaderSpec};

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOp {
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub len: u64,
    /// Stream id (0 if the line has none).
    pub stream: u64,
    /// Index of the op's file in [`Trace::files`] (0 for a trace without
    /// `file=` fields).
    pub file: usize,
    /// A page fault of a mapping of the file (`map=1`), not a read.
    pub fault: bool,
    /// The thread that made it (`tid=`).
    pub tid: Option<u64>,
    /// When it returned, nanoseconds of a monotonic clock (`t=`).
    pub t: Option<u64>,
}

/// A file a trace reads.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TraceFile {
    /// The id of its `file=` fields ("" for a trace without them).
    pub id: String,
    /// Its size, from a `# file ID SIZE PATH` line.
    pub size: Option<u64>,
    /// Its path, from the same line.
    pub path: Option<String>,
    /// The kernel's largest readahead window for its device, in bytes,
    /// from a `# readahead ID BYTES` line (`ahead trace` writes one where
    /// sysfs names the device's `read_ahead_kb`).
    pub readahead: Option<u64>,
    /// The program's last `posix_fadvise` of it that changes the kernel's
    /// readahead (`random`, `sequential` or `normal`), from a `# advice ID
    /// WORD` line.
    pub advice: Option<String>,
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The reads, in order.
    pub ops: Vec<TraceOp>,
    /// The files, in order of first mention.
    pub files: Vec<TraceFile>,
}

impl Trace {
    fn file_index(&mut self, id: &str) -> usize {
        match self.files.iter().position(|f| f.id == id) {
            Some(i) => i,
            None => {
                self.files.push(TraceFile {
                    id: id.to_string(),
                    ..TraceFile::default()
                });
                self.files.len() - 1
            }
        }
    }

    /// Keeps the ops of the files whose id or path is `which` (a path
    /// matches whole or by its last component).
    pub fn only(&mut self, which: &str) -> Result<(), String> {
        let keep: Vec<usize> = self
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                f.id == which
                    || f.path.as_deref().is_some_and(|p| {
                        p == which
                            || std::path::Path::new(p)
                                .file_name()
                                .is_some_and(|n| n == which)
                    })
            })
            .map(|(i, _)| i)
            .collect();
        if keep.is_empty() {
            let names: Vec<String> = self
                .files
                .iter()
                .map(|f| format!("{} {}", f.id, f.path.as_deref().unwrap_or("")))
                .collect();
            return Err(format!(
                "no file '{which}' in the trace (it has: {})",
                names.join(", ")
            ));
        }
        self.ops.retain(|op| keep.contains(&op.file));
        Ok(())
    }
}

/// Parses a trace: one read per line, `offset length [stream-id]
/// [file=ID] [tid=N] [t=NS] [map=1]` (`map=1`: a page fault of a mapping), sizes in bytes or with units (`64k`); blank
/// lines and `#` comments are skipped, except `# file ID SIZE PATH`,
/// which names a file, `# readahead ID BYTES`, the kernel's largest
/// window for its device, and `# advice ID WORD`, the program's
/// `posix_fadvise` of the file (`ahead trace` writes them all).
pub fn parse_trace(text: &str, path: &std::path::Path) -> Result<Trace, SimError> {
    let mut trace = Trace::default();
    // A trace without file= fields reads one file.
    let plain = !text.contains("file=");
    if plain {
        trace.file_index("");
    }
    for (n, raw) in text.lines().enumerate() {
        let bad = |reason: String| SimError::Trace {
            path: path.to_path_buf(),
            line: n + 1,
            reason,
        };
        if let Some(rest) = raw.trim_start().strip_prefix("# file ") {
            let mut f = rest.splitn(3, ' ');
            let (Some(id), Some(size)) = (f.next(), f.next()) else {
                return Err(bad(format!(
                    "expected '# file ID SIZE PATH', found '{raw}'"
                )));
            };
            let size = size
                .parse::<u64>()
                .map_err(|_| bad(format!("file size '{size}' is not a whole number")))?;
            if !plain {
                let i = trace.file_index(id);
                trace.files[i].size = Some(size);
                trace.files[i].path = f.next().map(str::to_string);
            }
            continue;
        }
        if let Some(rest) = raw.trim_start().strip_prefix("# readahead ") {
            let mut f = rest.split_whitespace();
            let (Some(id), Some(bytes), None) = (f.next(), f.next(), f.next()) else {
                return Err(bad(format!(
                    "expected '# readahead ID BYTES', found '{raw}'"
                )));
            };
            let bytes = bytes
                .parse::<u64>()
                .map_err(|_| bad(format!("readahead '{bytes}' is not a whole number")))?;
            if !plain {
                let i = trace.file_index(id);
                trace.files[i].readahead = Some(bytes);
            }
            continue;
        }
        if let Some(rest) = raw.trim_start().strip_prefix("# advice ") {
            let mut f = rest.split_whitespace();
            let (Some(id), Some(word), None) = (f.next(), f.next(), f.next()) else {
                return Err(bad(format!("expected '# advice ID WORD', found '{raw}'")));
            };
            // Advice on ranges (willneed, dontneed, noreuse) leaves the
            // kernel's readahead of the file as it was.
            if !plain && matches!(word, "random" | "sequential" | "normal") {
                let i = trace.file_index(id);
                trace.files[i].advice = Some(word.to_string());
            }
            continue;
        }
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let op = parse_op(&mut trace, line).map_err(bad)?;
        trace.ops.push(op);
    }
    if trace.ops.is_empty() {
        return Err(SimError::Usage(format!(
            "{}: the trace has no reads",
            path.display()
        )));
    }
    Ok(trace)
}

/// One read's line: `offset length [stream-id]` and its `key=value`
/// fields.
fn parse_op(trace: &mut Trace, line: &str) -> Result<TraceOp, String> {
    let mut positional: Vec<&str> = Vec::new();
    let mut file = 0;
    let mut fault = false;
    let (mut tid, mut t) = (None, None);
    for field in line.split_whitespace() {
        match field.split_once('=') {
            Some(("file", id)) => file = trace.file_index(id),
            Some((key @ ("tid" | "t"), v)) => {
                let n = v
                    .parse::<u64>()
                    .map_err(|_| format!("{key}={v}: expected a whole number"))?;
                *(if key == "tid" { &mut tid } else { &mut t }) = Some(n);
            }
            Some(("map", v)) => {
                fault = match v {
                    "1" => true,
                    "0" => false,
                    _ => return Err(format!("map={v}: expected 0 or 1")),
                }
            }
            Some((key, _)) => {
                return Err(format!(
                    "unknown field '{key}=' (known: file=, tid=, t=, map=)"
                ))
            }
            None => positional.push(field),
        }
    }
    if positional.len() < 2 || positional.len() > 3 {
        return Err(format!(
            "expected 'offset length [stream-id]', found {} field(s): '{line}'",
            positional.len()
        ));
    }
    let offset = ahead::units::parse_size(positional[0]).map_err(|e| format!("offset: {e}"))?;
    let len = ahead::units::parse_size(positional[1]).map_err(|e| format!("length: {e}"))?;
    if len == 0 {
        return Err("length must be at least 1 byte".into());
    }
    let stream = match positional.get(2) {
        Some(s) => s
            .parse::<u64>()
            .map_err(|_| format!("stream id '{s}' is not a whole number"))?,
        None => 0,
    };
    Ok(TraceOp {
        offset,
        len,
        stream,
        file,
        fault,
        tid,
        t,
    })
}

/// Reads and parses a trace file (gzip-compressed if its name ends in
/// `.gz`, as the corpus's are), keeping one file's reads if asked.
pub fn load_trace(path: &std::path::Path, which: Option<&str>) -> Result<Trace, SimError> {
    let io = |source| SimError::Io {
        path: path.to_path_buf(),
        source,
    };
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let f = std::fs::File::open(path).map_err(io)?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(f), &mut text)
            .map_err(io)?;
        text
    } else {
        std::fs::read_to_string(path).map_err(io)?
    };
    let mut trace = parse_trace(&text, path)?;
    if let Some(w) = which {
        trace.only(w).map_err(SimError::Usage)?;
    }
    Ok(trace)
}

/// `replay`: the trace's reads, one reader per stream (and per stream's
/// page faults), on every policy.
pub(super) fn replay(
    sc: &Scenario,
    o: &SimOptions,
    path: &std::path::Path,
) -> Result<Vec<SimResult>, SimError> {
    let trace = load_trace(path, o.trace_file.as_deref())?;
    let ops = &trace.ops;
    let mut s = setup(sc, o)?;
    // The kernel's window is its device's, where the trace says so (the
    // largest of the files replayed), within half the cache.
    if o.max_readahead.is_none() {
        let recorded = (0..trace.files.len())
            .filter(|&i| ops.iter().any(|op| op.file == i))
            .filter_map(|i| trace.files[i].readahead)
            .max();
        if let Some(bytes) = recorded {
            s.max_ra_pages = (bytes.min(s.memory / 2) / PAGE).max(1);
        }
    }
    // The program's advice on the files replayed, where they all had the
    // same: `random` reads each miss as asked (FMODE_RANDOM), `sequential`
    // doubles the kernel's window (`POSIX_FADV_SEQUENTIAL`).
    let advice: Vec<Option<&str>> = (0..trace.files.len())
        .filter(|&i| ops.iter().any(|op| op.file == i))
        .map(|i| trace.files[i].advice.as_deref())
        .collect();
    if let Some(&first) = advice.first() {
        if advice.iter().all(|&a| a == first) {
            match first {
                Some("random") => s.random_advice = true,
                Some("sequential") if o.max_readahead.is_none() => {
                    s.max_ra_pages = (2 * s.max_ra_pages).min(s.memory / 2 / PAGE).max(1);
                }
                _ => {}
            }
        }
    }
    // Each file sized to the larger of its recorded size and its reads
    // (the simulated file is the first file when there is one).
    let sizes: Vec<u64> = (0..trace.files.len())
        .map(|i| {
            let end = ops
                .iter()
                .filter(|op| op.file == i)
                .map(|op| op.offset + op.len)
                .max()
                .unwrap_or(0);
            let recorded = trace.files[i].size.unwrap_or(0);
            o.file_size.unwrap_or(0).max(end).max(recorded).max(PAGE)
        })
        .collect();
    s.file = sizes.iter().copied().max().unwrap_or(PAGE);
    let pages: Vec<u64> = sizes.iter().map(|b| b.div_ceil(PAGE)).collect();
    // Opens of one path (fio's jobs, a program's workers, one file opened
    // twice) share its cached pages, each with its own readahead state.
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let same_as: Vec<usize> = (0..trace.files.len())
        .map(|i| match trace.files[i].path.as_deref() {
            Some(p) => *first.entry(p).or_insert(i),
            None => i,
        })
        .collect();
    let mut streams: Vec<(usize, u64, bool)> = ops
        .iter()
        .map(|op| (op.file, op.stream, op.fault))
        .collect();
    streams.sort_unstable();
    streams.dedup();
    let timed = match o.timed {
        Some(scale) => Some(threads(ops, scale, path)?),
        None => None,
    };
    let mean = ops.iter().map(|op| op.len).sum::<u64>() as f64 / ops.len() as f64;
    Ok(per_policy(o, |policy| {
        let mut out = Vec::new();
        let mut e = crate::engine::Simulator::with_shared_files(
            engine_config(&s, o, policy, 0.0),
            &pages,
            &same_as,
            o.device.build(),
        );
        let readers = match &timed {
            Some(t) => t.readers(),
            None => streams
                .iter()
                .map(|&(file, id, fault)| {
                    let mine: Vec<(u64, u64)> = ops
                        .iter()
                        .filter(|op| op.stream == id && op.file == file && op.fault == fault)
                        .map(|op| (op.offset, op.len))
                        .collect();
                    ReaderSpec {
                        page_faults: fault,
                        ..reader(file, mine.into_iter())
                    }
                })
                .collect(),
        };
        let stats = e.run_phase(readers);
        let mut r = result(sc.name(), "replay", policy, o.device, mean, &stats);
        r.max_readahead_kib = Some(s.max_ra_pages * PAGE / KIB);
        r.program_s = timed.as_ref().map(|t| t.span);
        out.push(r);
        out
    }))
}

/// A timed replay's readers: one per thread of the traced program, each
/// asking for its reads one after another as it did, with the time it
/// spent between them.
struct Threads {
    /// Per thread: when its first read returned (seconds after the
    /// trace's first), and its requests.
    threads: Vec<(f64, Vec<Op>)>,
    /// Seconds from the trace's first read to its last.
    span: f64,
}

impl Threads {
    fn readers(&self) -> Vec<ReaderSpec> {
        self.threads
            .iter()
            .map(|(start, ops)| ReaderSpec {
                start: *start,
                ops: Box::new(ops.clone().into_iter()),
                ..reader(ops[0].file.unwrap_or(0), std::iter::empty())
            })
            .collect()
    }
}

/// Groups a trace's reads by thread for a timed replay (`--timed`). Each
/// read's `t=` is when it returned, so the time between one read's `t=`
/// and the next's is the program's computing plus the next read itself;
/// the read's own time, as the engine charges a cached one
/// (`cpu_time`: `REQUEST_CPU` and the copy at `COPY_RATE`), is taken off, and
/// the rest, times `scale`, is the program's time before it
/// ([`Op::think`]) in which the kernel's asynchronous readahead runs on.
/// Tracing itself slows each read a little (a timestamp, the thread's id,
/// a queue): `scale` below 1 takes that off, where the caller timed the
/// program with and without the trace. A trace made warm (its reads
/// cached, as `scripts/never-worse` makes its own) times the program and
/// not its device; made cold, its waits would be counted as computing.
fn threads(ops: &[TraceOp], scale: f64, path: &std::path::Path) -> Result<Threads, SimError> {
    if !(scale.is_finite() && scale >= 0.0) {
        return Err(SimError::Usage(format!(
            "--timed {scale}: expected a factor of 0 or more"
        )));
    }
    let Some(first) = ops.iter().map(|op| op.t).min().flatten() else {
        return Err(missing(path));
    };
    if ops.iter().any(|op| op.t.is_none() || op.tid.is_none()) {
        return Err(missing(path));
    }
    let last = ops.iter().filter_map(|op| op.t).max().unwrap_or(first);
    let mut order: Vec<u64> = Vec::new();
    let mut by_tid: std::collections::HashMap<u64, Vec<&TraceOp>> = Default::default();
    for op in ops {
        let tid = op.tid.unwrap_or(0);
        by_tid
            .entry(tid)
            .or_insert_with(|| {
                order.push(tid);
                Vec::new()
            })
            .push(op);
    }
    let secs = |ns: u64| ns as f64 / 1e9;
    let threads = order
        .iter()
        .map(|tid| {
            let mut mine = by_tid.remove(tid).unwrap_or_default();
            mine.sort_by_key(|op| op.t);
            let t = |i: usize| mine[i].t.unwrap_or(first);
            let ops: Vec<Op> = (0..mine.len())
                .map(|i| {
                    let think = match mine.get(i + 1) {
                        Some(next) => {
                            let own = cpu_time(next.len);
                            (secs(t(i + 1).saturating_sub(t(i))) * scale - own).max(0.0)
                        }
                        None => 0.0,
                    };
                    Op {
                        offset: mine[i].offset,
                        len: mine[i].len,
                        file: Some(mine[i].file),
                        fault: Some(mine[i].fault),
                        think,
                    }
                })
                .collect();
            (secs(t(0) - first), ops)
        })
        .collect();
    Ok(Threads {
        threads,
        span: secs(last - first),
    })
}

fn missing(path: &std::path::Path) -> SimError {
    SimError::Usage(format!(
        "{}: a timed replay needs tid= and t= on every read (`ahead trace` writes them)",
        path.display()
    ))
}
