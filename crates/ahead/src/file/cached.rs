//! How a read through ahead's cache reaches its source, for the two kinds
//! of file that read that way (a Direct file over its device, an object
//! over its store): planning under the cache's lock (the policy consulted
//! through `ra::drive`), issuing the planned reads to the backend the
//! source chose at open, and walking a request's pages as they arrive.
//! The kernel's kind reads in `kernel/`; what only objects have (opening
//! them, their counters) is in `object.rs`.

use super::*;

/// Receives runs of pinned `(frame, valid bytes)` with the bytes done so
/// far; returns true if it keeps the pins.
pub(super) type Sink<'a> = dyn FnMut(&[(u32, usize)], u64) -> bool + 'a;

/// Copies what `frames` hold of the request at `offset` into `buf`, from
/// `done` bytes on.
///
/// # Safety
///
/// Every frame of `frames` is pinned by the caller for the whole call.
pub(super) unsafe fn copy_out(
    cache: &PageCache,
    frames: &[(u32, usize)],
    offset: u64,
    page: u64,
    done: u64,
    buf: &mut [u8],
) {
    let mut at = offset + done;
    let mut out = done as usize;
    for &(f, valid) in frames {
        let within = (at % page) as usize;
        if valid <= within || out >= buf.len() {
            break;
        }
        let n = (valid - within).min(buf.len() - out);
        // SAFETY: `frames` are pinned by the caller for this call (this
        // function's contract).
        let bytes = unsafe { cache.frame_bytes(f, valid) };
        buf[out..out + n].copy_from_slice(&bytes[within..within + n]);
        out += n;
        at += n as u64;
    }
}

/// Appends to `out` what pinned `(frame, valid bytes)` pages lend of the
/// bytes from `pos` (in the first of them) to `end`: `(frame, start within
/// it, length)`, a length of 0 for a page that has none of them.
pub(super) fn lend(
    frames: &[(u32, usize)],
    mut pos: u64,
    end: u64,
    page: u64,
    out: &mut Vec<(u32, usize, usize)>,
) {
    for &(f, valid) in frames {
        let within = (pos % page) as usize;
        let take = (valid.saturating_sub(within) as u64).min(end - pos) as usize;
        out.push((f, within, take));
        pos += take as u64;
    }
}

impl File {
    /// What reading the file costs, as its policy is told at a decision
    /// ([`crate::io::ReadSource::cost`]): asked each time, since an object
    /// store's requests in flight grow as the engine measures the path.
    ///
    /// A device's source knows none; its costs as learned from its reads
    /// are told where [`crate::EngineConfig::learned_costs`] asks.
    pub fn device_cost(&self) -> Option<crate::ra::DeviceCost> {
        let engine = &self.inner.engine;
        self.inner.source.cost(engine.config.page_size).or_else(|| {
            let device = self.inner.device.filter(|_| engine.config.learned_costs)?;
            engine.learned_cost(device)
        })
    }

    pub(super) fn planner<'a>(
        &'a self,
        g: &'a mut cache::Inner,
        file_pages: u64,
        request: Request,
    ) -> Planner<'a> {
        Planner {
            cache: &self.inner.engine.cache,
            inner: g,
            file: self.inner.id,
            file_pages,
            max_io_pages: self.inner.engine.max_io_pages,
            request: request.index..request.end(),
            plans: Vec::new(),
            device: self.device_cost(),
            ring: Planner::ring_for(
                file_pages,
                self.inner.engine.cache.frames(),
                self.inner.engine.ra_window(),
                self.inner.engine.max_ra_pages,
            ),
        }
    }

    /// Plans one request of pages `req` (at most one window): runs the
    /// readahead policy and claims frames. Returns the plans.
    pub(super) fn plan(&self, req: Request, offset: u64) -> Vec<Plan> {
        let shared = &self.inner.engine;
        let advice = self.advice_at(offset);
        let mut policy = self.inner.policy.lock().unwrap();
        let mut g = shared.cache.lock();
        let fp = g.file(self.inner.id);
        let feedback = std::mem::take(&mut fp.feedback);
        let file_pages = fp.size.div_ceil(self.page());
        for f in feedback {
            policy.feedback(f);
        }
        self.replay_hits(policy.as_mut(), &mut g);
        let max = shared.ra_window();
        if policy.max_pages() != max && self.inner.device.is_some() {
            policy.set_max_pages(max);
        }
        let mut planner = self.planner(&mut g, file_pages, req);
        match advice {
            Advice::Random => {
                // Exactly the request, in one read per run of missing pages.
                ra::PageTable::submit_demand(
                    &mut planner,
                    req.index,
                    req.count.min(file_pages.saturating_sub(req.index)),
                );
            }
            _ => ra::drive(policy.as_mut(), &mut planner, req),
        }
        match advice {
            Advice::Sequential => planner.prefetch(&Window::forward(req.end(), max, 0)),
            Advice::Reverse => {
                let start = req.index.saturating_sub(max);
                planner.prefetch(&Window::forward(start, req.index - start, 0));
            }
            _ => {}
        }
        planner.plans
    }

    /// Issues planned reads: readahead to the backend, demand reads inline
    /// or to the backend. Of several inline demand reads (a request larger
    /// than the largest single read), all but the last go to the backend
    /// first, so that they are in flight together while this thread reads
    /// the last: one after another, a 1 MB read of an object cost four
    /// round trips.
    pub(super) fn issue(&self, plans: Vec<Plan>, demand: Issue) {
        let shared = &self.inner.engine;
        let page = self.page();
        let mut inline = None;
        let last_demand = plans.iter().rposition(|p| !p.speculative);
        for (i, plan) in plans.into_iter().enumerate() {
            if demand == Issue::Inline && Some(i) == last_demand {
                inline = Some(plan);
                continue;
            }
            let op = self.op_for(&plan, page);
            let engine = shared.clone();
            let learn = self.inner.device.map(|d| (d, engine.submitted(d)));
            let speculative = plan.speculative;
            self.inner.backend.submit(
                op,
                Box::new(move |_op, result| {
                    if let Some((d, at)) = learn {
                        engine.completed(d, at, &result, speculative);
                    }
                    engine.cache.complete(&plan, result)
                }),
            );
        }
        if let Some(plan) = inline {
            let mut op = self.op_for(&plan, page);
            let learn = self.inner.device.map(|d| (d, shared.submitted(d)));
            let result = self.inner.backend.read_now(&mut op);
            if let Some((d, at)) = learn {
                shared.completed(d, at, &result, plan.speculative);
            }
            shared.cache.complete(&plan, result);
        }
    }

    pub(super) fn op_for(&self, plan: &Plan, page: u64) -> ReadOp {
        let shared = &self.inner.engine;
        let len = plan.frames.len() * page as usize;
        ReadOp {
            source: self.inner.source.clone(),
            offset: plan.first * page,
            len,
            buf: IoBuf::Frames(crate::io::FrameBuf::new(
                shared.cache.arena().clone(),
                plan.frames.clone(),
            )),
            flags: 0,
            known_miss: false,
        }
    }

    /// How much of `len` bytes at `offset` one piece serves: at most one
    /// readahead window, ending on a page boundary.
    /// Clipped so that `offset + len` stays a page short of `u64::MAX`: no
    /// page arithmetic overflows on offsets near it (they are past any
    /// file's end, where reads return 0).
    pub(super) fn piece_len(&self, offset: u64, len: usize) -> usize {
        let page = self.page();
        let max = self.inner.engine.max_ra_pages * page - offset % page;
        let room = (u64::MAX - page).saturating_sub(offset);
        (len as u64).min(max).min(room) as usize
    }

    /// Plans and issues the pages of bytes `[offset, offset + len)` (one
    /// piece, `len > 0`); returns the demand runs (for
    /// hit accounting).
    pub(super) fn start_piece(&self, offset: u64, len: u64, demand: Issue) -> Vec<(u64, u64)> {
        let page = self.page();
        let first = offset / page;
        let count = (offset + len).div_ceil(page) - first;
        let plans = self.plan(Request::new(first, count), offset);
        let runs = plans
            .iter()
            .filter(|p| !p.speculative)
            .map(|p| (p.first, p.frames.len() as u64))
            .collect();
        self.issue(plans, demand);
        runs
    }

    /// Reads page `index` alone, on demand, in this thread (a page whose
    /// last read failed: see `walk`). The demand run it planned.
    pub(super) fn retry_page(&self, index: u64) -> Vec<(u64, u64)> {
        let plans = {
            let mut g = self.inner.engine.cache.lock();
            let file_pages = g.file(self.inner.id).size.div_ceil(self.page());
            if index >= file_pages {
                return Vec::new();
            }
            let mut planner = self.planner(&mut g, file_pages, Request::new(index, 1));
            ra::PageTable::submit_demand(&mut planner, index, 1);
            planner.plans
        };
        let runs = plans
            .iter()
            .map(|p| (p.first, p.frames.len() as u64))
            .collect();
        self.issue(plans, Issue::Inline);
        runs
    }

    /// Pins the pages of bytes `[offset, offset + len)` in order, waiting for
    /// reads, planning again what was evicted, and hands each run of pinned
    /// frames to `sink` (which must not keep them past its return unless it
    /// takes over the pins, see `read_pages`). Returns the byte count
    /// (short at the end of the file).
    pub(super) fn walk(
        &self,
        offset: u64,
        len: u64,
        mut demand: Vec<(u64, u64)>,
        sink: &mut Sink<'_>,
    ) -> Result<u64> {
        let shared = &self.inner.engine;
        let page = self.page();
        if len == 0 {
            return Ok(0);
        }
        let end_page = (offset + len).div_ceil(page);
        let mut index = offset / page;
        let mut done = 0u64;
        let mut waited = false;
        let mut replans = 0u32;
        // A failed page is read once more, alone, before its error is
        // reported: the read that failed may have been a larger one that
        // failed on another page (the kernel retries a page the same way).
        let mut retried: Option<u64> = None;
        let mut g = shared.cache.lock();
        loop {
            let collected = cache::collect(
                &shared.cache,
                &mut g,
                self.inner.id,
                index..end_page,
                usize::MAX,
                &demand,
                &mut waited,
            );
            match collected {
                Collected::Pages(frames, eof) => {
                    drop(g);
                    // Bytes of these pages that fall inside the request.
                    let mut got = 0u64;
                    let mut short = eof;
                    for (k, &(_, valid)) in frames.iter().enumerate() {
                        let p = index + k as u64;
                        let page_start = p * page;
                        let from = offset.max(page_start) - page_start;
                        let to = (offset + len).min(page_start + valid as u64);
                        if to > page_start + from {
                            got += to - page_start - from;
                        }
                        if (valid as u64) < page {
                            short = true;
                        }
                    }
                    let keep_pins = sink(&frames, done);
                    if !keep_pins {
                        shared.cache.unpin_each(frames.iter().map(|&(f, _)| f));
                    }
                    done += got;
                    index += frames.len() as u64;
                    if short || index >= end_page || frames.is_empty() {
                        return Ok(done);
                    }
                    g = shared.cache.lock();
                }
                Collected::Wait => {
                    waited = true;
                    g = shared.cache.wait(g, Duration::from_millis(100));
                }
                Collected::Absent(at) => {
                    drop(g);
                    replans += 1;
                    if replans > 1 {
                        // Planned before, yet absent again: the budget is
                        // under pressure; give reads a moment to finish.
                        std::thread::sleep(FRAME_RETRY);
                    }
                    let count = (end_page - at).min(self.inner.engine.max_ra_pages);
                    demand.extend(self.start_piece(at * page, count * page, Issue::Inline));
                    g = shared.cache.lock();
                }
                Collected::Failed(at, _) if retried != Some(at) => {
                    drop(g);
                    retried = Some(at);
                    demand.extend(self.retry_page(at));
                    g = shared.cache.lock();
                }
                Collected::Failed(at, errno) => {
                    drop(g);
                    return Err(self.io_error(
                        "read",
                        at * page,
                        io::Error::from_raw_os_error(errno),
                    ));
                }
            }
        }
    }

    /// A read larger than one piece (the largest window): its pieces are
    /// issued ahead of the one waited for, up to a quarter of the cache,
    /// so that their requests are in flight together. Waiting for each
    /// before issuing the next paid one request's latency per piece (a 1
    /// MB read of an object took four round trips where one suffices).
    pub(super) fn read_large(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let limit = (self.inner.engine.cache.frames() as u64 * self.page() / 4) as usize;
        let mut started = std::collections::VecDeque::new();
        let (mut issued, mut done) = (0usize, 0usize);
        loop {
            // At least the next piece, then more while under the limit.
            while issued < buf.len() && (issued == done || issued - done < limit) {
                let at = offset + issued as u64;
                let len = self.piece_len(at, buf.len() - issued);
                if len == 0 {
                    break; // past any end of file
                }
                let runs = self.start_piece(at, len as u64, Issue::Backend);
                started.push_back((at, len, runs));
                issued += len;
            }
            let Some((at, len, runs)) = started.pop_front() else {
                break;
            };
            let n = self.read_piece(&mut buf[done..done + len], at, Issue::Backend, Some(runs))?;
            done += n;
            if n < len {
                break; // the end of the file
            }
        }
        self.served(done as u64);
        Ok(done)
    }

    pub(super) fn read_piece(
        &self,
        buf: &mut [u8],
        offset: u64,
        issue: Issue,
        started: Option<Vec<(u64, u64)>>,
    ) -> Result<usize> {
        let page = self.page();
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(0);
        }
        let demand = match started {
            Some(d) => d,
            None => self.start_piece(offset, len, issue),
        };
        let cache = &self.inner.engine.cache;
        let n = self.walk(offset, len, demand, &mut |frames, done| {
            // SAFETY: `walk` hands over frames it has pinned, and unpins
            // them after this returns (it keeps no pins: false).
            unsafe { copy_out(cache, frames, offset, page, done, buf) };
            false
        })?;
        Ok(n as usize)
    }
}
