//! `ahead._ahead`: the native half of the Python package `ahead` (the
//! Python half, `python/ahead/`, makes its files `io.BufferedIOBase`
//! objects).
//!
//! * **Engines.** An `Engine` is a configuration and, per process, the
//!   library's engine built from it on first use. A process-wide default
//!   engine serves `ahead.open` without one.
//! * **Forks.** A forked child has none of its parent's threads, rings or
//!   runtime. Every call compares the process id with the one the engine
//!   and the file were made in; in a child, the parent's engine and file
//!   are forgotten (never dropped: their threads are not there to join)
//!   and made again — the engine from its configuration, the file by its
//!   path or URL, at the position it had. A child never reads through the
//!   parent's cache, and never hangs on its threads.
//! * **The GIL** is released while a read waits and copies: other Python
//!   threads run, and threads may share one file.
//! * **Errors** are `OSError`s with the errno and the path (Python picks
//!   the subclass from the errno: `FileNotFoundError`, `PermissionError`,
//!   `IsADirectoryError`, …); bad arguments are `ValueError`s.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

fn pid() -> u32 {
    std::process::id()
}

/// An `ahead::Error` as the Python exception a file object would raise.
fn os_error(e: ahead::Error) -> PyErr {
    match &e {
        ahead::Error::Io { source, .. }
            if source.raw_os_error().is_none()
                && source.kind() == std::io::ErrorKind::InvalidInput =>
        {
            // A URL or an option the store does not take: the caller's
            // argument, as Python's own functions report one.
            PyValueError::new_err(e.to_string())
        }
        ahead::Error::Io { path, source, .. } => {
            let msg = e.to_string();
            let name = path.to_string_lossy().into_owned();
            match source.raw_os_error() {
                Some(errno) => PyOSError::new_err((errno, msg, name)),
                None => {
                    let errno = match source.kind() {
                        std::io::ErrorKind::NotFound => libc::ENOENT,
                        std::io::ErrorKind::PermissionDenied => libc::EACCES,
                        std::io::ErrorKind::StaleNetworkFileHandle => libc::ESTALE,
                        _ => libc::EIO,
                    };
                    PyOSError::new_err((errno, msg, name))
                }
            }
        }
        ahead::Error::Invalid { .. } => PyValueError::new_err(e.to_string()),
        _ => PyOSError::new_err(e.to_string()),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A configuration and the engine built from it in this process.
struct EngineCell {
    config: ahead::EngineConfig,
    built: Mutex<Option<(u32, Arc<ahead::Engine>)>>,
}

impl EngineCell {
    fn new(config: ahead::EngineConfig) -> EngineCell {
        EngineCell {
            config,
            built: Mutex::new(None),
        }
    }

    /// This process's engine, made on first use (again in a fork's child).
    fn get(&self) -> PyResult<Arc<ahead::Engine>> {
        let mut b = lock(&self.built);
        match b.take() {
            Some((p, e)) if p == pid() => {
                *b = Some((p, e.clone()));
                return Ok(e);
            }
            // The parent's: its threads are not in this process.
            Some(old) => std::mem::forget(old),
            None => {}
        }
        let e = Arc::new(ahead::Engine::new(self.config.clone()).map_err(os_error)?);
        *b = Some((pid(), e.clone()));
        Ok(e)
    }
}

static DEFAULT: Mutex<Option<Arc<EngineCell>>> = Mutex::new(None);
static DEFAULT_OBJECTS: Mutex<Option<Arc<EngineCell>>> = Mutex::new(None);

/// The process-wide engine for local files, or for objects (whose windows
/// and GETs are sized for a store: `EngineConfig::for_objects`).
fn default_engine(objects: bool) -> Arc<EngineCell> {
    let (cell, config): (_, fn() -> ahead::EngineConfig) = if objects {
        (&DEFAULT_OBJECTS, ahead::EngineConfig::for_objects)
    } else {
        (&DEFAULT, ahead::EngineConfig::default)
    };
    lock(cell)
        .get_or_insert_with(|| Arc::new(EngineCell::new(config())))
        .clone()
}

/// An engine: one cache budget and readahead configuration shared by the
/// files opened through it.
#[pyclass(module = "ahead._ahead", frozen)]
struct Engine {
    cell: Arc<EngineCell>,
}

#[pymethods]
impl Engine {
    /// `cache`: the cache budget in bytes; `policy`: `ahead`, `ondemand` or
    /// `legacy`; `max_readahead`: the largest window in bytes; `objects`:
    /// windows and requests sized for objects in a store; `max_io`: the
    /// largest single read (or GET) in bytes; `cache_dir`: a directory
    /// for a disk tier of objects' chunks, shared by every process (and
    /// forked worker) that names it; `cache_dir_size`: its bound in bytes
    /// (default: half the space free under it).
    #[new]
    #[pyo3(signature = (cache=None, policy=None, max_readahead=None, objects=false, max_io=None, cache_dir=None, cache_dir_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        cache: Option<u64>,
        policy: Option<&str>,
        max_readahead: Option<u64>,
        objects: bool,
        max_io: Option<u64>,
        cache_dir: Option<std::path::PathBuf>,
        cache_dir_size: Option<u64>,
    ) -> PyResult<Self> {
        let mut config = if objects {
            ahead::EngineConfig::for_objects()
        } else {
            ahead::EngineConfig::default()
        };
        if let Some(c) = cache {
            config = config.with_cache_bytes(c);
        }
        if let Some(p) = policy {
            let kind = p
                .parse::<ahead::ra::PolicyKind>()
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            config = config.with_policy(kind);
        }
        match max_readahead {
            Some(m) => config = config.with_max_readahead(m),
            // A budget too small for the default window (the engine needs
            // three): the largest window it holds, whole pages.
            None if config.max_readahead.saturating_mul(3) > config.cache_bytes => {
                let page = config.page_size.max(1);
                let fit = (config.cache_bytes / 3 / page * page).max(page);
                let io = config.max_io.min(fit);
                config = config.with_max_readahead(fit).with_max_io(io);
            }
            None => {}
        }
        if let Some(m) = max_io {
            config = config.with_max_io(m);
        }
        if let Some(d) = cache_dir {
            config = config.with_cache_dir(d);
        }
        if let Some(b) = cache_dir_size {
            config = config.with_cache_dir_bytes(b);
        }
        Ok(Engine {
            cell: Arc::new(EngineCell::new(config)),
        })
    }

    /// The engine's counters (of every file opened through it) as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let e = self.cell.get()?;
        stats_dict(py, &e.stats())
    }

    /// Drops the pages the engine keeps of the closed local file at `path`
    /// (a file closed and opened again reads them while it is unchanged):
    /// its next open reads the device. The number of pages dropped.
    fn evict(&self, path: std::path::PathBuf) -> PyResult<u64> {
        let e = self.cell.get()?;
        e.evict(&path).map_err(os_error)
    }

    /// Opens `path` (a local file, or an `s3://` or `http(s)://` URL;
    /// `options`: object_store configuration for a URL, over the `AWS_*`
    /// environment).
    #[pyo3(signature = (path, io=None, options=None))]
    fn open(
        &self,
        py: Python<'_>,
        path: &str,
        io: Option<&str>,
        options: Option<Vec<(String, String)>>,
    ) -> PyResult<RawFile> {
        // An object's open asks the store (a HEAD, up to its timeouts):
        // the program's other threads run meanwhile, as they do during
        // Python's own blocking calls.
        py.detach(|| RawFile::open(self.cell.clone(), path, io, options.unwrap_or_default()))
    }
}

/// The default engine, shared by every `ahead.open` without one: the one
/// for local files, or with `objects` the one for objects.
#[pyfunction]
#[pyo3(signature = (objects=false))]
fn default(objects: bool) -> Engine {
    Engine {
        cell: default_engine(objects),
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &ahead::Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requests", s.requests)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("late", s.late)?;
    d.set_item("device_reads", s.device_reads)?;
    d.set_item("device_bytes", s.device_bytes)?;
    d.set_item("readahead_pages", s.readahead_pages)?;
    d.set_item("readahead_used", s.readahead_used)?;
    d.set_item("readahead_wasted", s.readahead_wasted)?;
    d.set_item("evicted_before_use", s.evicted_before_use)?;
    d.set_item("recycled", s.recycled)?;
    Ok(d)
}

/// An open file as this process has it.
struct Open {
    pid: u32,
    file: Arc<ahead::File>,
}

/// What a file keeps to be made again in a fork's child.
struct State {
    open: Option<Open>,
    pos: u64,
    closed: bool,
}

/// A file opened for reading, with its own position; threads may share it.
#[pyclass(module = "ahead._ahead", frozen)]
struct RawFile {
    engine: Arc<EngineCell>,
    path: String,
    mode: ahead::Mode,
    options: Vec<(String, String)>,
    size: u64,
    state: Mutex<State>,
}

fn parse_mode(io: Option<&str>) -> PyResult<ahead::Mode> {
    match io {
        None | Some("direct") => Ok(ahead::Mode::Direct),
        Some("buffered") => Ok(ahead::Mode::Buffered),
        Some("uncached") => Ok(ahead::Mode::Uncached),
        Some(other) => Err(PyValueError::new_err(format!(
            "io={other:?}: one of 'direct', 'buffered', 'uncached'"
        ))),
    }
}

fn open_file(
    engine: &ahead::Engine,
    path: &str,
    mode: ahead::Mode,
    options: &[(String, String)],
) -> ahead::Result<ahead::File> {
    if ahead::remote::is_url(path) {
        return engine.open_url_with(path, options);
    }
    let mut opts = ahead::OpenOptions::default();
    opts.mode = mode;
    engine.open_with(path, &opts)
}

impl RawFile {
    fn open(
        engine: Arc<EngineCell>,
        path: &str,
        io: Option<&str>,
        options: Vec<(String, String)>,
    ) -> PyResult<RawFile> {
        let mode = parse_mode(io)?;
        if !options.is_empty() && !ahead::remote::is_url(path) {
            return Err(PyValueError::new_err(format!(
                "{path}: options are for objects (s3://, http(s)://), not local files"
            )));
        }
        if ahead::remote::is_url(path) && io.is_some_and(|m| m != "direct") {
            return Err(PyValueError::new_err(format!(
                "{path}: an object is read through ahead's cache (io='direct')"
            )));
        }
        if !ahead::remote::is_url(path) && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(PyOSError::new_err((
                libc::EISDIR,
                format!("{path}: is a directory"),
                path.to_owned(),
            )));
        }
        let e = engine.get()?;
        let file = open_file(&e, path, mode, &options).map_err(os_error)?;
        Ok(RawFile {
            engine,
            path: path.to_owned(),
            mode,
            options,
            size: file.len(),
            state: Mutex::new(State {
                open: Some(Open {
                    pid: pid(),
                    file: Arc::new(file),
                }),
                pos: 0,
                closed: false,
            }),
        })
    }

    /// The file as this process has it (opened again in a fork's child)
    /// and the position, with the GIL released: opening again asks an
    /// object's store. No thread may hold the state's lock while it waits
    /// for the GIL: it would deadlock with one holding the GIL while
    /// waiting for the lock (`set_pos` and `close` take the lock with the
    /// GIL held, and wait for nothing inside it).
    fn file(&self, py: Python<'_>) -> PyResult<(Arc<ahead::File>, u64)> {
        py.detach(|| self.file_here())
    }

    /// [`RawFile::file`]'s work; the state's lock is held only for this.
    fn file_here(&self) -> PyResult<(Arc<ahead::File>, u64)> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(PyValueError::new_err("I/O operation on closed file."));
        }
        let here = pid();
        if st.open.as_ref().is_some_and(|o| o.pid != here) {
            if let Some(old) = st.open.take() {
                std::mem::forget(old);
            }
        }
        if st.open.is_none() {
            let e = self.engine.get()?;
            let file = open_file(&e, &self.path, self.mode, &self.options).map_err(os_error)?;
            st.open = Some(Open {
                pid: here,
                file: Arc::new(file),
            });
        }
        match &st.open {
            Some(o) => Ok((o.file.clone(), st.pos)),
            None => Err(PyOSError::new_err("the file could not be opened again")),
        }
    }

    fn set_pos(&self, pos: u64) {
        lock(&self.state).pos = pos;
    }
}

/// Reads into `buf` at `offset` until it is full or the file ends.
fn read_full(file: &ahead::File, buf: &mut [u8], offset: u64) -> ahead::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

#[pymethods]
impl RawFile {
    /// The path or URL it was opened with.
    #[getter]
    fn name(&self) -> &str {
        &self.path
    }

    /// Its size in bytes when opened.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Up to `size` bytes from the position (all to the end if negative).
    #[pyo3(signature = (size=-1))]
    fn read<'py>(&self, py: Python<'py>, size: i64) -> PyResult<Bound<'py, PyBytes>> {
        let (file, at) = self.file(py)?;
        let left = self.size.saturating_sub(at);
        let want = if size < 0 {
            left
        } else {
            (size as u64).min(left)
        } as usize;
        let mut v = vec![0u8; want];
        let n = py
            .detach(|| read_full(&file, &mut v, at))
            .map_err(os_error)?;
        v.truncate(n);
        self.set_pos(at + n as u64);
        Ok(PyBytes::new(py, &v))
    }

    /// Up to `size` bytes at `offset`; the position does not move.
    fn pread<'py>(
        &self,
        py: Python<'py>,
        size: usize,
        offset: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let want = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        let (file, _) = self.file(py)?;
        let mut v = vec![0u8; want];
        let n = py
            .detach(|| read_full(&file, &mut v, offset))
            .map_err(os_error)?;
        v.truncate(n);
        Ok(PyBytes::new(py, &v))
    }

    /// Fills the writable, contiguous buffer `buf` (bytearray, memoryview,
    /// numpy array) from the position, with no copy in between; the bytes
    /// read.
    fn readinto(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let b = PyBuffer::<u8>::get(buf)?;
        if b.readonly() || !b.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "readinto needs a writable, contiguous buffer of bytes",
            ));
        }
        let (ptr, len) = (b.buf_ptr() as usize, b.len_bytes());
        let (file, at) = self.file(py)?;
        let n = py
            .detach(|| {
                // SAFETY: `b` holds the buffer's export until this returns,
                // so the memory stays where it is and its size (`len`) does
                // not change; it is writable (checked).
                let s = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
                read_full(&file, s, at)
            })
            .map_err(os_error)?;
        self.set_pos(at + n as u64);
        Ok(n)
    }

    /// Moves the position: `whence` 0 from the start, 1 from the
    /// position, 2 from the end; the new position.
    #[pyo3(signature = (offset, whence=0))]
    fn seek(&self, py: Python<'_>, offset: i64, whence: i32) -> PyResult<u64> {
        let (_, pos) = self.file(py)?;
        let base = match whence {
            0 => 0,
            1 => pos as i64,
            2 => self.size as i64,
            w => return Err(PyValueError::new_err(format!("invalid whence ({w})"))),
        };
        let to = base
            .checked_add(offset)
            .filter(|&t| t >= 0)
            .ok_or_else(|| PyValueError::new_err(format!("negative seek position {offset}")))?;
        self.set_pos(to as u64);
        Ok(to as u64)
    }

    fn tell(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.file(py)?.1)
    }

    /// The file's counters as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (file, _) = self.file(py)?;
        let d = stats_dict(py, &file.stats())?;
        if let Some(r) = file.remote_stats() {
            d.set_item("remote_requests", r.requests)?;
            d.set_item("remote_bytes_fetched", r.bytes_fetched)?;
            d.set_item("remote_failed", r.failed)?;
            d.set_item("tier_bytes", r.tier_bytes)?;
            d.set_item("tier_chunks_hit", r.tier_chunks_hit)?;
            d.set_item("tier_chunks_missed", r.tier_chunks_missed)?;
        }
        Ok(d)
    }

    /// Tells the readahead how `[offset, offset + length)` will be read:
    /// `normal`, `sequential`, `reverse`, `random` or `willneed`
    /// (`length` 0: to the end).
    #[pyo3(signature = (advice, offset=0, length=0))]
    fn advise(&self, py: Python<'_>, advice: &str, offset: u64, length: u64) -> PyResult<()> {
        let a = match advice {
            "normal" => ahead::Advice::Normal,
            "sequential" => ahead::Advice::Sequential,
            "reverse" => ahead::Advice::Reverse,
            "random" => ahead::Advice::Random,
            "willneed" => ahead::Advice::WillNeed,
            other => {
                return Err(PyValueError::new_err(format!(
                    "advice {other:?}: normal, sequential, reverse, random or willneed"
                )))
            }
        };
        let length = if length == 0 {
            u64::MAX - offset
        } else {
            length
        };
        self.file(py)?.0.advise(offset, length, a);
        Ok(())
    }

    /// Starts reading the `(offset, length)` ranges now, for reads to come.
    fn prefetch(&self, py: Python<'_>, ranges: Vec<(u64, u64)>) -> PyResult<()> {
        let (file, _) = self.file(py)?;
        py.detach(|| file.prefetch(&ranges));
        Ok(())
    }

    /// Closes the file (again: nothing).
    fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        if let Some(o) = st.open.take() {
            if o.pid == pid() {
                drop(o);
            } else {
                std::mem::forget(o);
            }
        }
    }
}

/// Whether `s` names an object by a URL ahead reads (`s3://`, `s3a://`,
/// `http://`, `https://`) rather than a local path: the library's test.
#[pyfunction]
fn is_url(s: &str) -> bool {
    ahead::remote::is_url(s)
}

#[pymodule]
fn _ahead(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<RawFile>()?;
    m.add_function(wrap_pyfunction!(default, m)?)?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    Ok(())
}
