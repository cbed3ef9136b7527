//! The dense-region rule: a random miss in a region of a file that fits
//! the cache, with enough of the region already cached, reads the rest of
//! the region with it; lookahead markers on those windows say whether the
//! rule pays.

use super::*;

/// Dense random reads: a random miss in an aligned region of this many
/// pages (at most the maximum window) of which one page in
/// [`DENSE_SHARE_START`] is already cached reads the region's absent pages with
/// the request, in one window. This is the kernel's "the more overall read
/// density, the more possible gain" (Wu's context readahead, which
/// `ondemand` gets from the cached pages before a miss) made a rule of its
/// own: an index lookup in sqlite3 visits B-tree and table pages of a file
/// that fits the cache several times each, and a region that already holds
/// a quarter of its pages is being read all over.
pub(crate) const DENSE_REGION: u64 = 128;

/// See [`DENSE_REGION`]: a region is dense once 1 page in this many is
/// cached, at first (1 in 4). Each dense window carries a lookahead marker
/// on one of the pages it brings in; two marker hits (net) double the
/// divisor, up to [`DENSE_SHARE_MAX`] (1 in 16: regions read earlier), and
/// two markers aging out unread ([`DENSE_MARKERS`] later windows) halve it,
/// down to 1, where the rule is off. Sqlite3's index range scans, whose
/// regions end up half read, learn 1 in 16; its point lookups, which visit
/// one page in five, turn the rule off before it costs.
pub(crate) const DENSE_SHARE_START: u64 = 2;

/// See [`DENSE_SHARE_START`].
pub(crate) const DENSE_SHARE_MAX: u64 = 16;

/// Dense windows whose markers are remembered.
pub(crate) const DENSE_MARKERS: usize = 128;

/// ...and only in a file that takes at most 1/this of the cache: reading
/// the rest of regions of a file larger than the cache would evict what
/// the reader came back for (aio-random reads over a file larger than
/// memory stay exactly as they are).
pub(crate) const DENSE_CACHE_SHARE: u64 = 2;

/// The dense-region rule's state ([`DENSE_REGION`]): the share of a region
/// that must be cached before the rest is read, learnt from whether the
/// pages such windows bring in get read.
#[derive(Clone, Debug)]
pub(super) struct Dense {
    /// A region's cached pages × `share` ≥ its size makes it dense.
    pub(super) share: u64,
    /// Evidence since the share last moved: + a marker hit, − a marker
    /// that aged out unread.
    pub(super) score: i32,
    /// Marker pages of the latest dense windows (0 = empty).
    pub(super) markers: [u64; DENSE_MARKERS],
    pub(super) next: usize,
}

impl Dense {
    pub(super) fn new() -> Dense {
        Dense {
            share: DENSE_SHARE_START,
            score: 0,
            markers: [0; DENSE_MARKERS],
            next: 0,
        }
    }

    /// A dense window went out with its marker on `page` (+1 so that page
    /// 0 is not the empty slot).
    pub(super) fn issued(&mut self, page: u64) {
        if self.markers[self.next] != 0 {
            // The oldest marker aged out unread: that window's pages are
            // likely wasted.
            self.vote(-1);
        }
        self.markers[self.next] = page + 1;
        self.next = (self.next + 1) % DENSE_MARKERS;
    }

    /// A marker hit: if it was a dense window's, count it and say so.
    pub(super) fn hit(&mut self, page: u64) -> bool {
        match self.markers.iter().position(|&m| m == page + 1) {
            Some(i) => {
                self.markers[i] = 0;
                self.vote(1);
                true
            }
            None => false,
        }
    }

    pub(super) fn vote(&mut self, v: i32) {
        self.score += v;
        if self.score >= 2 {
            self.share = (self.share * 2).min(DENSE_SHARE_MAX);
            self.score = 0;
        } else if self.score <= -8 {
            self.share = (self.share / 2).max(1);
            self.score = 0;
        }
    }
}

impl StreamTable {
    /// Whether the dense-region rule may act on this file: it fits the
    /// cache twice over ([`DENSE_CACHE_SHARE`]) and the rule has not turned
    /// itself off. In such a file it takes the place of the kernel's
    /// context readahead: both read what the cache's density says the
    /// reader is after (with both, 0.23–0.28 of the readahead on the large
    /// sqlite3 index range trace was wasted, against 0.16 with one).
    pub(super) fn dense_applies(&self, view: &dyn CacheView) -> bool {
        self.dense_fits(view) && self.dense.share > 1
    }

    /// Whether the file is one the dense-region rule is for (it fits the
    /// cache twice over). The kernel's context readahead comes first even
    /// there ([`StreamTable::fallback`]).
    pub(super) fn dense_fits(&self, view: &dyn CacheView) -> bool {
        view.capacity_pages()
            .is_some_and(|c| view.file_pages() <= c / DENSE_CACHE_SHARE)
    }

    /// A random miss: exactly the request, unless it falls in a dense
    /// region of a file the cache can hold, whose absent pages are then
    /// read with it in one window ([`DENSE_REGION`]).
    pub(super) fn dense_or_as_is(&mut self, req: Request, view: &dyn CacheView) -> Window {
        let as_is = Window::forward(req.index, req.count, 0);
        if !self.dense_applies(view) {
            return as_is;
        }
        let file = view.file_pages();
        let region = DENSE_REGION.min(self.max.max(MIN_WINDOW));
        let start = req.index / region * region;
        let end = (start + region).min(file).max(req.end());
        let size = end - start;
        let present = (start..end).filter(|&p| view.is_present(p)).count() as u64;
        if present * self.dense.share < size {
            return as_is;
        }
        // The marker goes on an absent page past the request, nearest the
        // middle: whether the reader comes to it says whether such windows
        // pay.
        let absent = |p: &u64| !view.is_present(*p) && (*p < req.index || *p >= req.end());
        let marker = (start + size / 2..end)
            .find(absent)
            .or_else(|| (start..start + size / 2).rev().find(absent));
        match marker {
            Some(m) => {
                self.dense.issued(m);
                Window::forward(start, size, end - m)
            }
            None => as_is,
        }
    }
}
