//! The engine: one cache and one backend shared by the files it opens.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{File, FileInner, Stamp};
use crate::cache::{EvictionKind, PageCache, Stats};
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
/// How long a reader that finds no free frame waits before it looks again
/// (pins are dropped without signalling).
pub(super) const FRAME_RETRY: Duration = Duration::from_millis(1);

/// How an engine is set up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Budget for cached and in-flight data, in bytes.
    pub cache_bytes: u64,
    /// Page size in bytes (a power of two, at least the O_DIRECT alignment).
    pub page_size: u64,
    /// The readahead policy of every file.
    pub policy: PolicyKind,
    /// Largest readahead window, in bytes.
    pub max_readahead: u64,
    /// Largest single device read, in bytes.
    pub max_io: u64,
    /// Which backend.
    pub backend: BackendKind,
    /// Most reads in flight.
    pub depth: usize,
    /// Which eviction policy.
    pub eviction: EvictionKind,
    /// Fail to open files whose file system refuses O_DIRECT, instead of
    /// falling back to buffered reads.
    pub require_direct: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_bytes: DEFAULT_CACHE_BYTES,
            page_size: crate::units::PageSize::default().bytes(),
            policy: PolicyKind::Ahead,
            max_readahead: DEFAULT_MAX_READAHEAD,
            max_io: DEFAULT_MAX_IO,
            backend: BackendKind::Auto,
            depth: DEFAULT_DEPTH,
            eviction: EvictionKind::Clock,
            require_direct: false,
        }
    }
}

pub(super) struct Shared {
    pub(super) config: EngineConfig,
    pub(super) cache: PageCache,
    pub(super) backend: Arc<dyn Backend>,
    /// The next file's id: 64 bits never wrap (2^64 opens), so a live
    /// file's id is never handed to another file.
    pub(super) next_id: AtomicU64,
    pub(super) max_ra_pages: u64,
    pub(super) max_io_pages: usize,
}

/// Owns the cache and the backend; opens files. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
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

    /// An engine whose reads go to `backend` (for example a
    /// [`crate::io::fault::Fault`] around a real one) instead of the one
    /// `config.backend` names.
    pub fn with_backend(config: EngineConfig, backend: Arc<dyn Backend>) -> Result<Engine> {
        let (max_ra_pages, frames) = Engine::check(&config)?;
        let page = config.page_size;
        let max_io_pages = (config.max_io / page).clamp(1, 1024) as usize;
        // Demand reads keep one window's worth of frames for themselves.
        let reserve = max_ra_pages;
        Ok(Engine {
            shared: Arc::new(Shared {
                cache: PageCache::new(
                    frames as usize,
                    page as usize,
                    reserve as usize,
                    config.eviction,
                )
                .map_err(|e| Error::io("reserve the cache's memory", Path::new(""), None, e))?,
                backend,
                next_id: AtomicU64::new(0),
                max_ra_pages,
                max_io_pages,
                config,
            }),
        })
    }

    /// Checks that the settings fit together; the largest window and the
    /// budget, in pages.
    fn check(config: &EngineConfig) -> Result<(u64, u64)> {
        let page = config.page_size;
        if !page.is_power_of_two() || page < 512 {
            return Err(Error::Config(format!(
                "page size {page} is not a power of two ≥ 512"
            )));
        }
        let max_ra_pages = (config.max_readahead / page).max(1);
        let frames = config.cache_bytes / page;
        let needed = 2 * max_ra_pages + max_ra_pages;
        if frames < needed {
            return Err(Error::Config(format!(
                "cache budget {} is too small for a {} readahead window: it needs at least {}",
                crate::units::format_size(config.cache_bytes),
                crate::units::format_size(config.max_readahead),
                crate::units::format_size(needed * page)
            )));
        }
        if frames > u32::MAX as u64 / 2 {
            return Err(Error::Config("cache budget too large".into()));
        }
        // A budget the machine cannot hold would end in an aborted
        // allocation or the OOM killer, not in a clear error.
        if let Some(mem) = crate::sys::physical_memory() {
            if config.cache_bytes > mem {
                return Err(Error::Config(format!(
                    "cache budget {} is more than this machine's memory ({})",
                    crate::units::format_size(config.cache_bytes),
                    crate::units::format_size(mem)
                )));
            }
        }
        Ok((max_ra_pages, frames))
    }

    /// Bytes of the cache in use (pages held and reads in flight); never
    /// more than the budget.
    pub fn cached_bytes(&self) -> u64 {
        self.shared.cache.used_frames() as u64 * self.shared.config.page_size
    }

    /// Frames lent out or being copied from right now (pinned). Zero
    /// whenever no read is running and no [`Pages`] is alive: a frame
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

    /// Counters summed over every file.
    pub fn stats(&self) -> Stats {
        self.shared.cache.lock().totals
    }

    /// Opens `path` for reading with O_DIRECT (falling back to buffered
    /// reads where the file system refuses O_DIRECT, unless
    /// `require_direct`).
    pub fn open(&self, path: impl AsRef<Path>) -> Result<File> {
        let path = path.as_ref();
        let err = |op, e: io::Error| Error::io(op, path, None, e);
        let meta = std::fs::metadata(path).map_err(|e| err("open", e))?;
        if meta.is_dir() {
            return Err(Error::Unsupported {
                path: path.into(),
                why: "is a directory".into(),
            });
        }
        use std::os::unix::fs::FileTypeExt;
        let ft = meta.file_type();
        if !(ft.is_file() || ft.is_block_device()) {
            return Err(Error::Unsupported {
                path: path.into(),
                why: "not a regular file or block device (direct mode needs random access)".into(),
            });
        }
        let (fd, direct) = match sys::open_read(path, true) {
            Ok(fd) => (fd, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                if self.shared.config.require_direct {
                    return Err(Error::Unsupported {
                        path: path.into(),
                        why: "the file system does not support O_DIRECT".into(),
                    });
                }
                (
                    sys::open_read(path, false).map_err(|e| err("open", e))?,
                    false,
                )
            }
            Err(e) => return Err(err("open", e)),
        };
        if direct {
            if let Some((mem, off)) = sys::dio_alignment(fd.as_fd()) {
                let page = self.shared.config.page_size;
                if page % mem as u64 != 0 || page % off as u64 != 0 {
                    return Err(Error::Unsupported {
                        path: path.into(),
                        why: format!("O_DIRECT alignment {off} exceeds the page size {page}"),
                    });
                }
            }
        }
        // The file as it is now, from the descriptor that will be read.
        let stamp = Stamp::of(&fd).map_err(|e| err("stat", e))?;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.shared.cache.open_file(id, stamp.size);
        let ra = RaConfig::with_max_pages(self.shared.max_ra_pages);
        Ok(File {
            inner: Arc::new(FileInner {
                engine: self.shared.clone(),
                id,
                path: path.into(),
                fd: Arc::new(fd),
                direct,
                policy: Mutex::new(ra::new_policy(self.shared.config.policy, ra)),
                advice: Mutex::new(Vec::new()),
                stamp: Mutex::new(stamp),
            }),
        })
    }
}
