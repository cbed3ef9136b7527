//! Pages lent without a copy.

use std::sync::Arc;

use super::Shared;

/// Cached pages lent by [`File::read_pages`](super::File::read_pages): no copy was made. The pages
/// stay pinned in the cache until this is dropped.
pub struct Pages {
    pub(super) engine: Arc<Shared>,
    /// (frame, start within the frame, length).
    pub(super) pages: Vec<(u32, usize, usize)>,
    pub(super) len: usize,
}

impl Pages {
    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte was read (end of file).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, as one slice per page.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        self.pages
            .iter()
            .filter(|p| p.2 > 0)
            .map(|&(f, start, len)| {
                // SAFETY: a `Pages` holds a pin on each of its frames until
                // it is dropped, and the slice lives no longer than `self`.
                let bytes = unsafe { self.engine.cache.frame_bytes(f, start + len) };
                &bytes[start..start + len]
            })
    }

    /// Copies the bytes into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for c in self.chunks() {
            v.extend_from_slice(c);
        }
        v
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        self.engine.cache.unpin_each(self.pages.iter().map(|p| p.0));
    }
}
