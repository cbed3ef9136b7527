//! Memory that O_DIRECT reads can fill: an owned aligned buffer, and the
//! arena of page frames that the cache is made of.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

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
}

// SAFETY: the arena is a plain allocation; who writes which frame when is
// governed by the cache's state machine (see the type's docs).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// An arena of `frames` frames of `frame_size` bytes (a power of two).
    /// Reserves address space only; fails (ENOMEM) when even that cannot
    /// be had, or when the size overflows.
    pub(crate) fn new(frames: usize, frame_size: usize) -> std::io::Result<Arc<Arena>> {
        Arena::with_huge_pages(frames, frame_size, false)
    }

    /// As [`Arena::new`]; with `huge`, an arena of at least one huge page
    /// asks the kernel for transparent huge pages (see
    /// `EngineConfig::huge_pages` for when that pays).
    pub(crate) fn with_huge_pages(
        frames: usize,
        frame_size: usize,
        huge: bool,
    ) -> std::io::Result<Arc<Arena>> {
        let huge = huge && frames.saturating_mul(frame_size) >= HUGE_PAGE;
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
        if huge {
            // Transparent huge pages where the system allows them on
            // request (`enabled` = madvise, the common default): the
            // arena's first touch then costs a fault, a charge and a page
            // table entry per 2 MiB rather than per 4 KiB. Advice only:
            // refused (no THP in the kernel), the arena works as before.
            // SAFETY: advice on the range of the mapping made above.
            let _ = unsafe {
                rustix::mm::madvise(
                    base.as_ptr().cast(),
                    size - size % HUGE_PAGE,
                    rustix::mm::Advice::LinuxHugepage,
                )
            };
        }
        Ok(Arc::new(Arena {
            base,
            map,
            map_len,
            frame_size,
            frames,
        }))
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
