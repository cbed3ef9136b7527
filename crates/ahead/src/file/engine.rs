//! The engine: one cache and one backend shared by the files it opens.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};

use rustix::fs::OFlags;
use std::time::Duration;

use super::kernel::{start_hinter, Hint, KernelFile, Mode};
use super::{File, Kind, OpenOptions, Parts, Served};
use crate::cache::{EvictionKind, PageCache, Stats};
use crate::io::ReadSource;
use crate::io::{Backend, BackendKind};
use crate::ra::{self, PolicyKind, RaConfig};
use crate::{sys, Error, Result};

/// Default cache budget: 256 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 256 << 20;
/// Default maximum readahead window: 4 MiB. On the virtio disk this was
/// developed on, O_DIRECT reads reach the device's limit (1.1 GB/s) with
/// about 4 MiB in flight (fio: 1 MiB × depth 4); the kernel's own default
/// there is 8 MiB (`read_ahead_kb`).
pub const DEFAULT_MAX_READAHEAD: u64 = 4 << 20;
/// Default largest device read: 256 KiB, so that a full window is about 16
/// reads in flight, and one read is past the size where the device's
/// per-request cost matters.
pub const DEFAULT_MAX_IO: u64 = 256 << 10;
/// Default reads in flight: 64, enough for the random-read-at-depth case.
pub const DEFAULT_DEPTH: usize = 64;
/// Whether Direct files' policies decide by their device's learned costs by
/// default ([`EngineConfig::learned_costs`]).
pub const LEARNED_COSTS: bool = false;
/// [`EngineConfig::for_objects`]' largest window: 64 MiB, near an object
/// store's bandwidth-delay product with room for the ramp-up. Reading 1
/// GiB forward on `ahead bench remote`'s `s3` profile (30 ms to the first
/// byte, 250 MB/s) reached 0.47 of what the network allows with 16 MiB
/// windows of 256 KiB GETs and 0.95 with these.
pub const OBJECT_MAX_READAHEAD: u64 = 64 << 20;
/// [`EngineConfig::for_objects`]' largest GET: 4 MiB, so that a full window
/// is 16 requests and each is well past the size where its first byte's
/// latency dominates (30 ms is 2.7 MB at 90 MB/s).
pub const OBJECT_MAX_IO: u64 = 4 << 20;
/// How long a reader that finds no free frame waits before it looks again
/// (pins are dropped without signalling).
pub(super) const FRAME_RETRY: Duration = Duration::from_millis(1);

/// How an engine is set up: `EngineConfig::default()` and the `with_*`
/// setters (the struct is `#[non_exhaustive]`, so that settings can be
/// added without breaking callers).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineConfig {
    /// Budget for cached and in-flight data, in bytes.
    pub cache_bytes: u64,
    /// Page size in bytes (a power of two, at least the O_DIRECT alignment).
    pub page_size: u64,
    /// The readahead policy of every file.
    pub policy: PolicyKind,
    /// Largest readahead window, in bytes; with
    /// [`EngineConfig::readahead_tuning`], the window the engine starts
    /// with.
    pub max_readahead: u64,
    /// Let Direct files' readahead windows grow past `max_readahead` while
    /// readers wait for readahead and doubling the window does not make it
    /// slower, up to a sixteenth of the budget and what the reads in
    /// flight carry ([`crate::ra::tune::WindowTuner`];
    /// [`Engine::readahead_tuning`] says what it chose). Off by default:
    /// on this host's disk larger windows cost CPU (the pages wait longer
    /// between their read and their copy, and are copied from memory
    /// rather than the CPU's caches), and a tuned engine's cold 128 KiB
    /// reads took 1.24–1.36× the CPU of the default's for a throughput
    /// within noise of it (docs/bench.md). `ahead doctor FILE` shows what
    /// the tuner chooses on a device.
    pub readahead_tuning: bool,
    /// Let Direct files' readahead policies decide by what their device
    /// charges as learned from its reads ([`Engine::device_cost`],
    /// [`crate::ra::learn`]): which stride gaps are read through and how
    /// many runs a strided window holds. Until the device's costs are
    /// known, and with this off, the policies use their measured defaults.
    pub learned_costs: bool,
    /// Largest single device read, in bytes.
    pub max_io: u64,
    /// Which backend.
    pub backend: BackendKind,
    /// Where Buffered and Uncached files' async reads go when the kernel's
    /// cache does not have the data: the thread pool by default. In
    /// `ahead bench mix` (2 cores, 32 reads in flight) misses on io_uring
    /// took the cached reads' p99 from 4.4 to 18.6 µs (4.2×), on the pool
    /// from 4.5 to 5.5 µs (1.2×): io_uring runs blocking buffered reads on
    /// its own workers and completes them through the submitter, which
    /// competes with the event loop for the CPUs.
    pub buffered_backend: BackendKind,
    /// Most reads in flight.
    pub depth: usize,
    /// Which eviction policy.
    pub eviction: EvictionKind,
    /// Fail to open files whose file system refuses O_DIRECT, instead of
    /// falling back to buffered reads.
    pub require_direct: bool,
    /// Register the cache's memory with the backend where it can take it
    /// (io_uring's fixed buffers), so the kernel does not pin the pages of
    /// every read. On by default; off compares the two.
    pub registered_buffers: bool,
    /// Serve reads whose pages are all cached and used before without the
    /// cache's lock or the policy's (the policy sees them later, in order).
    /// On by default; off compares the two.
    pub lock_free_hits: bool,
    /// Whether the cache's memory comes in transparent huge pages
    /// ([`HugePages`](crate::io::HugePages): off, on, or measured as the
    /// cache fills, the default).
    pub huge_pages: crate::io::HugePages,
    /// A directory for a disk tier under the cache, for objects
    /// ([`crate::remote::DiskTier`]): chunks of what the engine fetches
    /// are kept there, shared by every process that names it, and read
    /// from there the next time. `None` (the default): none.
    pub cache_dir: Option<std::path::PathBuf>,
    /// The disk tier's bound in bytes; `None`: half the space free under
    /// `cache_dir` when the engine starts.
    pub cache_dir_bytes: Option<u64>,
}

impl EngineConfig {
    /// The defaults, with windows and requests sized for objects in a
    /// store rather than a local disk (64 MiB windows of 4 MiB GETs: near
    /// a store's bandwidth-delay product; `OBJECT_MAX_READAHEAD` in the
    /// source says what they were measured against): an engine mostly for
    /// [`Engine::open_url`].
    pub fn for_objects() -> EngineConfig {
        EngineConfig::default()
            .with_max_readahead(OBJECT_MAX_READAHEAD)
            .with_max_io(OBJECT_MAX_IO)
    }

    /// Sets the cache budget in bytes.
    pub fn with_cache_bytes(mut self, v: u64) -> EngineConfig {
        self.cache_bytes = v;
        self
    }
    /// Sets the page size in bytes.
    pub fn with_page_size(mut self, v: u64) -> EngineConfig {
        self.page_size = v;
        self
    }
    /// Sets the readahead policy.
    pub fn with_policy(mut self, v: PolicyKind) -> EngineConfig {
        self.policy = v;
        self
    }
    /// Sets the largest readahead window in bytes (the first, if it is
    /// tuned).
    pub fn with_max_readahead(mut self, v: u64) -> EngineConfig {
        self.max_readahead = v;
        self
    }
    /// Sets whether Direct files' windows may grow past `max_readahead`
    /// ([`EngineConfig::readahead_tuning`]).
    pub fn with_readahead_tuning(mut self, v: bool) -> EngineConfig {
        self.readahead_tuning = v;
        self
    }
    /// Sets whether Direct files' policies decide by their device's learned
    /// costs ([`EngineConfig::learned_costs`]).
    pub fn with_learned_costs(mut self, v: bool) -> EngineConfig {
        self.learned_costs = v;
        self
    }
    /// Sets the largest device read in bytes.
    pub fn with_max_io(mut self, v: u64) -> EngineConfig {
        self.max_io = v;
        self
    }
    /// Sets the I/O backend.
    pub fn with_backend(mut self, v: BackendKind) -> EngineConfig {
        self.backend = v;
        self
    }
    /// Sets the backend of Buffered and Uncached files' misses.
    pub fn with_buffered_backend(mut self, v: BackendKind) -> EngineConfig {
        self.buffered_backend = v;
        self
    }
    /// Sets the most reads in flight.
    pub fn with_depth(mut self, v: usize) -> EngineConfig {
        self.depth = v;
        self
    }
    /// Sets the eviction policy.
    pub fn with_eviction(mut self, v: EvictionKind) -> EngineConfig {
        self.eviction = v;
        self
    }
    /// Sets whether the cache's memory is registered with the backend.
    pub fn with_registered_buffers(mut self, v: bool) -> EngineConfig {
        self.registered_buffers = v;
        self
    }
    /// Sets whether cached reads may skip the locks.
    pub fn with_lock_free_hits(mut self, v: bool) -> EngineConfig {
        self.lock_free_hits = v;
        self
    }
    /// Sets whether the cache asks for transparent huge pages.
    pub fn with_huge_pages(mut self, v: crate::io::HugePages) -> EngineConfig {
        self.huge_pages = v;
        self
    }
    /// Keeps objects' chunks in a disk tier in `dir` (see
    /// [`EngineConfig::cache_dir`]).
    pub fn with_cache_dir(mut self, dir: impl Into<std::path::PathBuf>) -> EngineConfig {
        self.cache_dir = Some(dir.into());
        self
    }
    /// Bounds the disk tier to `bytes`.
    pub fn with_cache_dir_bytes(mut self, bytes: u64) -> EngineConfig {
        self.cache_dir_bytes = Some(bytes);
        self
    }
    /// Sets whether files that refuse O_DIRECT are an error.
    pub fn with_require_direct(mut self, v: bool) -> EngineConfig {
        self.require_direct = v;
        self
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_bytes: DEFAULT_CACHE_BYTES,
            page_size: crate::units::PageSize::default().bytes(),
            policy: PolicyKind::Ahead,
            max_readahead: DEFAULT_MAX_READAHEAD,
            readahead_tuning: false,
            learned_costs: LEARNED_COSTS,
            max_io: DEFAULT_MAX_IO,
            backend: BackendKind::Auto,
            buffered_backend: BackendKind::Pool,
            depth: DEFAULT_DEPTH,
            eviction: EvictionKind::Clock,
            require_direct: false,
            registered_buffers: true,
            lock_free_hits: true,
            huge_pages: crate::io::HugePages::Auto,
            cache_dir: None,
            cache_dir_bytes: None,
        }
    }
}

impl Shared {
    #[cfg(feature = "remote")]
    /// The backend objects' reads go to: each source starts its own
    /// requests where it can ([`crate::io::ReadSource::start`]: an object
    /// on the engine's runtime, up to `depth` in flight), a pool of
    /// threads reads the rest.
    pub(super) fn remote_backend(&self) -> &Arc<dyn Backend> {
        self.remote_backend
            .get_or_init(|| Arc::new(crate::io::Requests::new(self.config.depth)))
    }

    /// The backend kernel-mode files hand their misses to.
    pub(super) fn buffered_backend(&self) -> &Arc<dyn Backend> {
        self.buffered_backend.get_or_init(|| {
            if self.config.buffered_backend == self.config.backend {
                return self.backend.clone();
            }
            crate::io::new_backend(self.config.buffered_backend, self.config.depth)
                .unwrap_or_else(|_| self.backend.clone())
        })
    }
}

pub(super) struct Shared {
    pub(super) config: EngineConfig,
    /// Requests and bytes served, over every Direct file: counted outside
    /// the cache's lock (a cached read otherwise took it once more just
    /// to count itself).
    pub(super) served: Served,
    pub(super) cache: PageCache,
    pub(super) backend: Arc<dyn Backend>,
    /// The next file's id: 64 bits never wrap (2^64 opens), so a live
    /// file's id is never handed to another file.
    pub(super) next_id: AtomicU64,
    /// The window the engine started with, in pages: the demand
    /// reserve, Buffered files' hints, and the largest piece of a read.
    pub(super) max_ra_pages: u64,
    /// Direct files' largest window now, in pages: `max_ra_pages` unless
    /// the tuner grew it.
    pub(super) ra_window: AtomicU64,
    /// The tuner of `ra_window` (`None`: not tuned).
    pub(super) tuner: Option<std::sync::Mutex<ra::tune::WindowTuner>>,
    pub(super) max_io_pages: usize,
    /// The thread that issues Buffered files' kernel hints (started on first
    /// use; `None` inside if it could not be started: no hints then).
    pub(super) hinter: OnceLock<Option<Sender<Hint>>>,
    /// The backend of kernel-mode misses (started on first use; the main
    /// backend if it cannot be started).
    pub(super) buffered_backend: OnceLock<Arc<dyn Backend>>,
    #[cfg(feature = "remote")]
    /// The backend of objects' reads (started on first use).
    pub(super) remote_backend: OnceLock<Arc<dyn Backend>>,
    /// The runtime of objects' requests (started on first use).
    #[cfg(feature = "remote")]
    pub(super) runtime: OnceLock<Arc<crate::remote::Runtime>>,
    /// The disk tier for objects ([`EngineConfig::cache_dir`]).
    #[cfg(feature = "remote")]
    pub(super) tier: Option<Arc<crate::remote::DiskTier>>,
    /// What the devices of Direct files charge, learned from their reads
    /// ([`ra::learn`]), and the origin of its times.
    pub(super) learner: std::sync::Mutex<ra::learn::Devices>,
    pub(super) epoch: std::time::Instant,
}

impl Shared {
    /// Nanoseconds since the engine started: the learner's clock.
    pub(super) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// What `device` charges as learned so far, `None` until it is known.
    pub(super) fn learned_cost(&self, device: u64) -> Option<ra::DeviceCost> {
        self.learner.lock().ok()?.cost(device)
    }

    /// A read goes to `device`: when, and how many are in flight there
    /// (0: not learned).
    pub(super) fn submitted(&self, device: u64) -> (u64, u64) {
        let now = self.now_ns();
        let depth = self
            .learner
            .lock()
            .ok()
            .and_then(|mut l| l.of(device).map(|l| l.submitted(now)))
            .unwrap_or(0);
        (now, depth)
    }
}

/// Owns the cache and the backend; opens files. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(super) shared: Arc<Shared>,
}

impl Engine {
    /// An engine with `config`. Fails if the settings do not fit together
    /// (the budget must hold two full readahead windows and the demand
    /// reserve) or the backend cannot be started.
    pub fn new(config: EngineConfig) -> Result<Engine> {
        Engine::check(&config)?;
        let backend = crate::io::new_backend(config.backend, config.depth)
            .map_err(|e| Error::io("start I/O backend", Path::new(""), None, e))?;
        Engine::with_backend(config, backend)
    }

    /// An engine whose reads go to `backend` instead of the one
    /// `config.backend` names (for example, in tests, an `io::fault::Fault`
    /// around a real one).
    pub fn with_backend(config: EngineConfig, backend: Arc<dyn Backend>) -> Result<Engine> {
        let (max_ra_pages, frames) = Engine::check(&config)?;
        let page = config.page_size;
        let max_io_pages = (config.max_io / page).clamp(1, 1024) as usize;
        // Demand reads keep one window's worth of frames for themselves.
        let reserve = max_ra_pages;
        let cache = PageCache::with_huge_pages(
            frames as usize,
            page as usize,
            reserve as usize,
            config.eviction,
            config.huge_pages,
        )
        .map_err(|e| Error::io("reserve the cache's memory", Path::new(""), None, e))?;
        if config.registered_buffers {
            backend.attach(cache.arena());
        }
        #[cfg(feature = "remote")]
        let tier = match &config.cache_dir {
            Some(dir) => Some(
                crate::remote::DiskTier::open(dir, config.cache_dir_bytes)
                    .map_err(|e| Error::io("open the disk tier", dir, None, e))?,
            ),
            None => None,
        };
        let tuner = super::tuning::tuner(&config, frames, max_ra_pages, max_io_pages);
        Ok(Engine {
            shared: Arc::new(Shared {
                cache,
                backend,
                next_id: AtomicU64::new(0),
                max_ra_pages,
                ra_window: AtomicU64::new(max_ra_pages),
                tuner,
                max_io_pages,
                hinter: OnceLock::new(),
                buffered_backend: OnceLock::new(),
                #[cfg(feature = "remote")]
                remote_backend: OnceLock::new(),
                #[cfg(feature = "remote")]
                runtime: OnceLock::new(),
                #[cfg(feature = "remote")]
                tier,
                served: Served::default(),
                learner: std::sync::Mutex::new(ra::learn::Devices::new(page)),
                epoch: std::time::Instant::now(),
                config,
            }),
        })
    }

    /// Checks that the settings fit together; the largest window and the
    /// budget, in pages.
    fn check(config: &EngineConfig) -> Result<(u64, u64)> {
        let page = config.page_size;
        if !page.is_power_of_two() || page < 512 {
            return Err(Error::Invalid {
                what: "engine",
                why: format!("page size {page} is not a power of two ≥ 512"),
            });
        }
        let max_ra_pages = (config.max_readahead / page).max(1);
        let frames = config.cache_bytes / page;
        let needed = 2 * max_ra_pages + max_ra_pages;
        if frames < needed {
            return Err(Error::Invalid {
                what: "engine",
                why: format!(
                    "cache budget {} is too small for a {} readahead window: it needs at least {}",
                    crate::units::format_size(config.cache_bytes),
                    crate::units::format_size(config.max_readahead),
                    crate::units::format_size(needed * page)
                ),
            });
        }
        if frames > u32::MAX as u64 / 2 {
            return Err(Error::Invalid {
                what: "engine",
                why: "cache budget too large".into(),
            });
        }
        // A budget the machine cannot hold would end in an aborted
        // allocation or the OOM killer, not in a clear error.
        if let Some(mem) = crate::sys::physical_memory() {
            if config.cache_bytes > mem {
                return Err(Error::Invalid {
                    what: "engine",
                    why: format!(
                        "cache budget {} is more than this machine's memory ({})",
                        crate::units::format_size(config.cache_bytes),
                        crate::units::format_size(mem)
                    ),
                });
            }
        }
        Ok((max_ra_pages, frames))
    }

    /// What the cache's memory is made of: huge pages or not, and the
    /// probe that chose ([`crate::io::HugePages::Auto`]).
    pub fn huge_pages(&self) -> crate::io::HugeChoice {
        self.shared.cache.arena().huge_pages()
    }

    /// Bytes of the cache in use (pages held and reads in flight); never
    /// more than the budget.
    pub fn cached_bytes(&self) -> u64 {
        self.shared.cache.used_frames() as u64 * self.shared.config.page_size
    }

    /// Frames lent out or being copied from right now (pinned). Zero
    /// whenever no read is running and no [`Pages`](super::Pages) is alive: a frame
    /// pinned for good would be lost to the budget.
    pub fn pinned_frames(&self) -> usize {
        self.shared.cache.pinned()
    }

    /// The engine's settings.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.shared.backend.name()
    }

    /// Device reads sent into registered buffers (io_uring's fixed
    /// buffers, see [`EngineConfig::registered_buffers`]); 0 where the
    /// backend or the kernel has none.
    pub fn fixed_reads(&self) -> u64 {
        self.shared.backend.fixed_reads()
    }

    /// What the device of this engine's Direct files charges, as learned
    /// from their reads so far ([`ra::learn`]): `None` until the latency of
    /// small reads, the bandwidth and the rate of small reads are all
    /// known. Of the device with the most reads, where the engine's files
    /// are on several ([`File::device_cost`] for one file's).
    pub fn device_cost(&self) -> Option<ra::DeviceCost> {
        self.shared.learner.lock().ok()?.busiest()
    }

    /// Counters summed over every file. A page read ahead whose first
    /// use came through the lock-free hit path counts as used
    /// (`readahead_used`) once its file's policy has seen the request:
    /// at the file's next read under the lock, at [`File::stats`], or when
    /// the file closes; until then at most a few dozen requests per file
    /// and thread are not yet counted here.
    pub fn stats(&self) -> Stats {
        let mut s = self.shared.cache.lock().totals;
        self.shared.served.add_to(&mut s);
        s
    }

    /// Drops the pages the engine keeps of the closed file at `path`. A
    /// regular file read in Direct mode keeps its pages in the cache after
    /// its last handle closes, and an open of the same file at the same
    /// version (size, modification and change times) reads them again, as
    /// the kernel's cache serves a file opened again; after this its next
    /// open reads the device. Returns how many pages were dropped: 0 when
    /// none are kept (never read, still open, changed, or already gone).
    pub fn evict(&self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let st = rustix::fs::stat(path).map_err(|e| Error::io("stat", path, None, e.into()))?;
        #[allow(clippy::unnecessary_cast)] // the fields' widths vary by architecture
        let identity = (st.st_dev as u64, st.st_ino as u64);
        Ok(self.shared.cache.forget_kept(identity))
    }

    /// Opens `path` in Direct mode: O_DIRECT through the engine's cache
    /// (falling back to buffered reads where the file system refuses
    /// O_DIRECT, unless `require_direct`). See [`Engine::open_with`].
    pub fn open(&self, path: impl AsRef<Path>) -> Result<File> {
        self.open_with(path, &OpenOptions::default())
    }

    /// Opens `path` for reading in the mode and with the policy `opts` asks
    /// for. The path is opened once; everything after works on that
    /// descriptor (a Direct file's O_DIRECT descriptor is a second open of
    /// the same file through /proc/self/fd, checked to be the same inode).
    /// A directory, a FIFO or a device other than a block device is refused
    /// (every mode needs random access and a size).
    pub fn open_with(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        let path = path.as_ref();
        let err = |op, e: io::Error| Error::io(op, path, None, e);
        // O_NONBLOCK so that a FIFO does not block the open; cleared below,
        // as io_uring reads of an O_NONBLOCK file would not wait for data.
        let plain = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| err("open", e.into()))?;
        let st = rustix::fs::fstat(&plain).map_err(|e| err("stat", e.into()))?;
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        use rustix::fs::FileType;
        match kind {
            FileType::RegularFile | FileType::BlockDevice => {}
            FileType::Directory => {
                return Err(Error::Unsupported {
                    path: path.into(),
                    why: "is a directory".into(),
                })
            }
            _ => {
                return Err(Error::Unsupported {
                    path: path.into(),
                    why: format!(
                        "not a regular file or block device ({} mode needs random access)",
                        opts.mode
                    ),
                })
            }
        }
        rustix::fs::fcntl_setfl(&plain, OFlags::empty()).map_err(|e| err("fcntl", e.into()))?;
        let (fd, direct) = if opts.mode == Mode::Direct {
            match sys::reopen(&plain, OFlags::RDONLY | OFlags::DIRECT) {
                Ok(fd) => (fd, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    if self.shared.config.require_direct {
                        return Err(Error::Unsupported {
                            path: path.into(),
                            why: "the file system does not support O_DIRECT".into(),
                        });
                    }
                    (plain, false)
                }
                Err(e) => return Err(err("open", e)),
            }
        } else {
            (plain, false)
        };
        if direct {
            if let Some((mem, off)) = sys::dio_alignment(fd.as_fd()) {
                let page = self.shared.config.page_size;
                if !page.is_multiple_of(mem as u64) || !page.is_multiple_of(off as u64) {
                    return Err(Error::Unsupported {
                        path: path.into(),
                        why: format!("O_DIRECT alignment {off} exceeds the page size {page}"),
                    });
                }
            }
        }
        // The file as it is now, from the descriptor that will be read.
        let stamp = fd.version().map_err(|e| err("stat", e))?;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        // A regular file read into ahead's cache keeps its pages past its
        // close, for the next open at the same version (`cache::kept`); a
        // block device's times do not change as it is written, so its
        // pages go at close, as do the kernel's kinds' (none are cached).
        #[allow(clippy::unnecessary_cast)] // the fields' widths vary by architecture
        let keep_as = (opts.mode == Mode::Direct && kind == FileType::RegularFile)
            .then_some((st.st_dev as u64, st.st_ino as u64));
        let id = self.shared.cache.open(id, stamp, keep_as);
        let ra = RaConfig::with_max_pages(self.shared.max_ra_pages);
        let policy_kind = opts.policy.unwrap_or(self.shared.config.policy);
        let fd = Arc::new(fd);
        let policy = ra::new_policy(policy_kind, ra);
        let kind = match opts.mode {
            Mode::Direct => Kind::Direct {
                fd,
                o_direct: direct,
            },
            mode => {
                let hints = mode == Mode::Buffered && opts.hints;
                let hinter = if hints { self.hinter() } else { None };
                // Hints are decided in the kernel's page size.
                let kpage = rustix::param::page_size() as u64;
                let kra = ra::RaConfig {
                    hint_gaps_as_reads: true,
                    ..ra::hints::config(self.shared.config.max_readahead, kpage)
                };
                let policy = hints.then(|| ra::new_policy(policy_kind, kra));
                Kind::Kernel(KernelFile::new(
                    mode,
                    fd,
                    stamp.size,
                    policy,
                    hinter,
                    opts.dontcache,
                ))
            }
        };
        Ok(File::assemble(Parts {
            engine: self.shared.clone(),
            id,
            path: path.into(),
            kind,
            policy,
            stamp,
            keep_as,
        }))
    }

    /// The engine's hint thread, started on first use.
    fn hinter(&self) -> Option<Sender<Hint>> {
        self.shared.hinter.get_or_init(start_hinter).clone()
    }
}
