//! Memory that O_DIRECT reads can fill: an owned aligned buffer, and the
//! arena of page frames that the cache is made of.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A heap buffer whose start and length are multiples of its alignment, as
/// O_DIRECT requires.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of the bytes, like &Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (rounded up to `align`) aligned to
    /// `align`, a power of two.
    ///
    /// # Panics
    /// If `align` is not a power of two, or the size overflows.
    pub fn new(len: usize, align: usize) -> AlignedBuf {
        let size = len.max(1).next_multiple_of(align);
        let layout = Layout::from_size_align(size, align).expect("valid buffer layout");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }

    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: a buffer holds at least one alignment unit.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `len()` initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The size of a transparent huge page on x86-64 and of the common arm64
/// configuration; where it differs, the advice covers whole huge pages of
/// the other size or none, and is harmless either way.
const HUGE_PAGE: usize = 2 << 20;

/// Whether the cache's memory comes in transparent huge pages
/// (`EngineConfig::huge_pages`). The memory is anonymous, so the kernel
/// zeroes each page at its first use; in 4 KiB pages the faults, memory
/// charges and page tables of a 256 MiB cache cost about 0.12 s of system
/// time, most of what a cold 1 GiB Direct read costs beyond the kernel's
/// own buffered read, and in 2 MiB pages about 0.02 s. But a machine may
/// make huge pages dear: a virtual machine that hands free memory back to
/// its host (free page reporting, in free 2 MiB blocks, as on the machines
/// this was measured on) gives huge pages from memory the host must supply
/// again, and touching 256 MiB of them cost 0.47–0.58 s after a pause
/// (docs/bench.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HugePages {
    /// 4 KiB pages only.
    Off,
    /// Huge pages wherever the kernel gives them on request.
    On,
    /// Measured as the cache fills (the default): at its first read the
    /// engine touches one huge page and 2 MiB of small ones, keeps huge
    /// pages only if the huge one was clearly the cheaper, and times each
    /// later huge page as it is first needed, giving them up at the first
    /// that costs more than the small ones did (`Arena::reach`). Where
    /// they are dear, that costs one or two dear huge pages (2–5 ms here).
    #[default]
    Auto,
}

impl HugePages {
    /// The name `FromStr` takes.
    pub fn name(self) -> &'static str {
        match self {
            HugePages::Off => "off",
            HugePages::On => "on",
            HugePages::Auto => "auto",
        }
    }
}

impl std::str::FromStr for HugePages {
    type Err = String;
    fn from_str(s: &str) -> Result<HugePages, String> {
        match s {
            "off" => Ok(HugePages::Off),
            "on" => Ok(HugePages::On),
            "auto" => Ok(HugePages::Auto),
            _ => Err(format!("huge pages: off, on or auto, not {s:?}")),
        }
    }
}

/// What an arena's memory is made of, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugeChoice {
    /// Whether the arena asks for huge pages now.
    pub huge: bool,
    /// [`HugePages::Auto`]'s probe: nanoseconds to first touch one huge
    /// page, and the same 2 MiB in 4 KiB pages.
    pub probe_ns: Option<(u64, u64)>,
    /// Where [`HugePages::Auto`] gave huge pages up (a byte offset in the
    /// arena): the first huge page past the probe that cost more to touch
    /// than the probe's small pages had.
    pub gave_up_at: Option<u64>,
}

/// [`HugePages::Auto`]'s watch over the arena's first touches: the probe
/// at the first frame handed out, then each huge page timed as it is
/// first needed, until one is dear.
struct Watch {
    /// Bytes from the base touched so far (whole huge pages): every frame
    /// handed out lies below it ([`Arena::reach`]). 0 until the probe.
    frontier: AtomicUsize,
    /// Still asking for huge pages.
    huge: AtomicBool,
    /// The probe's times in nanoseconds (one huge page, 512 small ones),
    /// and where huge pages were given up; under the lock.
    record: Mutex<Record>,
}

/// The probe's times in nanoseconds, and where huge pages were given up.
type Record = (Option<(u64, u64)>, Option<u64>);

/// Whether the kernel gives transparent huge pages to a mapping that asks
/// (`enabled` is `always` or `madvise`).
fn thp_on_request() -> bool {
    matches!(
        crate::features::huge_pages().enabled.as_deref(),
        Some("always" | "madvise")
    )
}

/// Writes a zero to each 4 KiB of `len` bytes at `p`, so that the kernel
/// supplies them now; returns how long it took.
///
/// # Safety
/// `p..p + len` is memory of the arena's mapping that nothing else uses
/// yet (all zeros, as the kernel gave it).
unsafe fn first_touch(p: *mut u8, len: usize) -> std::time::Duration {
    let t = std::time::Instant::now();
    for off in (0..len).step_by(4096) {
        // SAFETY: inside the range the caller vouches for; writing the
        // zero that is already there.
        unsafe { std::ptr::write_volatile(p.add(off), 0) };
    }
    t.elapsed()
}

/// Advice on `len` bytes at `p`; refused advice changes nothing.
///
/// # Safety
/// `p..p + len` lies within one of this module's mappings.
unsafe fn advise(p: *mut u8, len: usize, advice: rustix::mm::Advice) {
    // SAFETY: as the caller vouches.
    let _ = unsafe { rustix::mm::madvise(p.cast(), len, advice) };
}

/// A fixed set of page-sized, page-aligned frames in one allocation: the
/// memory of the cache. The allocation is an anonymous private mapping
/// reserved without backing (MAP_NORESERVE): the kernel supplies a zeroed
/// page at a frame's first touch, so an engine costs resident memory only
/// for the frames it has used, and starts without writing its budget (a
/// zeroed heap allocation of 256 MiB wrote every page: 258 MiB resident
/// before the first read).
///
/// The arena does not know who may touch which frame; the cache's page
/// state machine does (a frame is written only by the one read that owns it
/// while no reader can see it, and read only while it is pinned and up to
/// date). Hence the raw accessors are `unsafe`, and only the crate makes an
/// arena or reaches its frames: outside it, an arena is what a
/// [`Backend`](super::Backend) is offered to register
/// ([`Backend::attach`](super::Backend::attach)), and its size.
pub struct Arena {
    /// The first frame (the mapping, rounded up to the frame size).
    base: NonNull<u8>,
    /// The mapping as made, for munmap.
    map: NonNull<u8>,
    map_len: usize,
    frame_size: usize,
    frames: usize,
    /// Whether huge pages were asked for at the start.
    huge: bool,
    /// Bytes from the base in whole huge pages.
    whole: usize,
    watch: Option<Watch>,
}

/// The smallest arena [`HugePages::Auto`] probes: 16 MiB, so that the
/// probe's 4 MiB is at most a quarter of it.
pub const PROBE_MIN: usize = 16 << 20;

// SAFETY: the arena is a plain allocation; who writes which frame when is
// governed by the cache's state machine (see the type's docs).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// An arena of `frames` frames of `frame_size` bytes (a power of two).
    /// Reserves address space only; fails (ENOMEM) when even that cannot
    /// be had, or when the size overflows.
    #[cfg(test)]
    pub(crate) fn new(frames: usize, frame_size: usize) -> std::io::Result<Arc<Arena>> {
        Arena::with_huge_pages(frames, frame_size, HugePages::Off)
    }

    /// As [`Arena::new`], its memory in transparent huge pages as `mode`
    /// says ([`HugePages`]). Only an arena of at least one huge page asks
    /// for them, and only one of at least [`PROBE_MIN`] bytes is probed
    /// (a smaller one: 4 KiB pages).
    pub(crate) fn with_huge_pages(
        frames: usize,
        frame_size: usize,
        mode: HugePages,
    ) -> std::io::Result<Arc<Arena>> {
        let bytes = frames.saturating_mul(frame_size);
        let huge = match mode {
            HugePages::Off => false,
            HugePages::On => bytes >= HUGE_PAGE,
            HugePages::Auto => bytes >= PROBE_MIN && frame_size <= HUGE_PAGE && thp_on_request(),
        };
        let too_big = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        if !frame_size.is_power_of_two() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let size = frames.max(1).checked_mul(frame_size).ok_or_else(too_big)?;
        // mmap aligns to the system page; a larger frame, or the huge page
        // an arena of at least one is backed by, needs room to round up to.
        let align = if huge {
            frame_size.max(HUGE_PAGE)
        } else {
            frame_size
        };
        let slack = if align > rustix::param::page_size() {
            align
        } else {
            0
        };
        let map_len = size.checked_add(slack).ok_or_else(too_big)?;
        // SAFETY: a new anonymous mapping at an address the kernel picks;
        // nothing else refers to it, and `Drop` unmaps exactly it.
        let raw = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::NORESERVE,
            )?
        };
        let map = NonNull::new(raw.cast::<u8>()).ok_or_else(too_big)?;
        let offset = map.as_ptr().align_offset(align);
        // SAFETY: `offset` < `align` <= `slack` when slack is needed (0
        // otherwise), so the rounded base and `size` bytes after it stay
        // inside the mapping.
        let base = unsafe { map.add(offset) };
        let whole = size - size % HUGE_PAGE;
        if huge {
            // Transparent huge pages where the system allows them on
            // request (`enabled` = madvise, the common default): the
            // arena's first touch then costs a fault, a charge and a page
            // table entry per 2 MiB rather than per 4 KiB. Advice only:
            // refused (no THP in the kernel), the arena works as before.
            // SAFETY: `whole` bytes from the base lie within the mapping.
            unsafe { advise(base.as_ptr(), whole, rustix::mm::Advice::LinuxHugepage) };
        }
        let watch = (huge && mode == HugePages::Auto).then(|| Watch {
            frontier: AtomicUsize::new(0),
            huge: AtomicBool::new(true),
            record: Mutex::new((None, None)),
        });
        Ok(Arc::new(Arena {
            base,
            map,
            map_len,
            frame_size,
            frames,
            huge,
            whole,
            watch,
        }))
    }

    /// What the arena's memory is made of ([`HugePages`]).
    pub fn huge_pages(&self) -> HugeChoice {
        let Some(w) = &self.watch else {
            return HugeChoice {
                huge: self.huge,
                probe_ns: None,
                gave_up_at: None,
            };
        };
        let (probe_ns, gave_up_at) = *w.record.lock().unwrap_or_else(|p| p.into_inner());
        HugeChoice {
            huge: w.huge.load(Ordering::Relaxed),
            probe_ns,
            gave_up_at,
        }
    }

    /// Called for each frame the cache hands out, before anything is read
    /// into it. Under [`HugePages::Auto`], while huge pages are still
    /// asked for: the first call probes (the arena's first 2 MiB touched
    /// as one huge page, the next 2 MiB as 512 small ones; huge pages are
    /// kept only if the huge one cost at most 3/4 of the small ones), and
    /// each later one touches the huge pages up to this frame's end, each
    /// timed: one that costs more than the probe's small pages makes the
    /// rest of the arena small pages. Otherwise a single atomic load.
    pub(crate) fn reach(&self, frame: u32) {
        let Some(w) = &self.watch else { return };
        if !w.huge.load(Ordering::Relaxed) {
            return;
        }
        let end = (frame as usize + 1) * self.frame_size;
        if end <= w.frontier.load(Ordering::Acquire) {
            return;
        }
        let mut record = w.record.lock().unwrap_or_else(|p| p.into_inner());
        let p = self.base.as_ptr();
        let small_ns = match record.0 {
            Some((_, small)) => small,
            None => {
                // SAFETY: the first two huge pages of the arena (it is at
                // least PROBE_MIN), reached before any frame is handed
                // out: nobody uses them yet.
                let (big, small) = unsafe {
                    let big = first_touch(p, HUGE_PAGE);
                    let second = p.add(HUGE_PAGE);
                    advise(second, HUGE_PAGE, rustix::mm::Advice::LinuxNoHugepage);
                    (big, first_touch(second, HUGE_PAGE))
                };
                let (big, small) = (big.as_nanos() as u64, small.as_nanos() as u64);
                record.0 = Some((big, small));
                w.frontier.store(2 * HUGE_PAGE, Ordering::Release);
                // A huge page is one fault where the small pages are 512:
                // clearly cheaper when the kernel gave one and the host
                // held it (0.15–0.44 ms against 0.7–1.1 ms here), level
                // when it gave small pages after all, and dearer when the
                // host must supply it again (2–5 ms).
                if big * 4 > small * 3 {
                    self.give_up(w, &mut record, 2 * HUGE_PAGE);
                    return;
                }
                small
            }
        };
        loop {
            let at = w.frontier.load(Ordering::Relaxed);
            if at >= end || at + HUGE_PAGE > self.whole {
                return;
            }
            // SAFETY: every frame handed out lies below the frontier (each
            // is reached before it is handed out, and the frontier only
            // grows), so the huge page at it holds frames nobody has used:
            // all zeros, which `first_touch` writes again.
            let took = unsafe { first_touch(p.add(at), HUGE_PAGE) };
            let next = at + HUGE_PAGE;
            w.frontier.store(next, Ordering::Release);
            if took.as_nanos() as u64 > small_ns {
                self.give_up(w, &mut record, next);
                return;
            }
        }
    }

    /// Small pages from byte `from` on.
    fn give_up(&self, w: &Watch, record: &mut Record, from: usize) {
        w.huge.store(false, Ordering::Relaxed);
        record.1 = Some(from as u64);
        if from < self.whole {
            // SAFETY: the rest of the whole huge pages of the mapping.
            unsafe {
                advise(
                    self.base.as_ptr().add(from),
                    self.whole - from,
                    rustix::mm::Advice::LinuxNoHugepage,
                )
            };
        }
    }

    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Size of one frame in bytes.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Pointer to the start of frame `frame`.
    ///
    /// # Panics
    /// If `frame` is out of range.
    pub(crate) fn frame_ptr(&self, frame: u32) -> *mut u8 {
        assert!((frame as usize) < self.frames, "frame {frame} out of range");
        // SAFETY: frame < frames, so the offset stays inside the allocation.
        unsafe { self.base.as_ptr().add(frame as usize * self.frame_size) }
    }

    /// The first `len` bytes of frame `frame`.
    ///
    /// # Safety
    /// No one may write the frame while the returned slice lives (the cache
    /// guarantees this by pinning an up-to-date page).
    pub(crate) unsafe fn frame(&self, frame: u32, len: usize) -> &[u8] {
        let len = len.min(self.frame_size);
        // SAFETY: inside the allocation (frame_ptr checks the range); the
        // caller guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(frame), len) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`; the arena is
        // dropped only once no frame is lent out (lent pages hold the Arc).
        unsafe {
            let _ = rustix::mm::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}
