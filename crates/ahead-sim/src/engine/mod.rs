//! The discrete-event engine: readers, a page cache with a budget, a device.
//!
//! Virtual time in seconds; events are ordered by time, then by the order in
//! which they were scheduled, so a run is deterministic.
//!
//! * **Readers** issue requests (byte ranges of one file, or of several
//!   for a traced thread) one after another, up to `depth` at once, no
//!   faster than one per `interval`, and each after the program's time
//!   following the one before ([`Op::think`], from a trace). A request is
//!   served through [`ahead::ra::drive`] — the very function the file engine
//!   uses — with this engine's cache as the page table; the reader then waits
//!   for the pages still in flight.
//! * **The cache** holds pages of all files under one budget in pages.
//!   Cached pages sit on one LRU list (a touch moves a page to the head);
//!   pages being read are pinned off the list. Inserting past the budget
//!   evicts from the tail; an evicted page leaves a shadow saying whether it
//!   was readahead that nobody used (evicted before use), which is reported
//!   to the file's policy.
//! * **The device** serves I/Os from a queue, `concurrency()` at a time, in
//!   the order its elevator picks. Adjacent pages of one window or demand
//!   read go out as one I/O of at most `max_io_pages`.

use crate::device::{DevIo, Device};
use ahead::ra::{
    self, CacheView, DeviceCost, Feedback, Lookup, PageTable, Policy, RaConfig, Request, Shadow,
    Window,
};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

mod folios;
mod policy;
mod preload;
mod serve;
mod spec;
mod table;

pub use policy::SimPolicy;
use preload::Preload;
use serve::issue;
pub use spec::{Op, PhaseStats, ReaderSpec};
use table::FileTable;

const NIL: u32 = u32::MAX;

/// CPU time per request served (system call and page lookups), seconds.
/// Measured order of magnitude of a cached 4 KiB pread on this class of
/// machine; it only matters for cached workloads, where it bounds the rate.
pub const REQUEST_CPU: f64 = 2e-6;
/// Memory copy rate for data handed to the reader, bytes per second.
pub const COPY_RATE: f64 = 4e9;

/// Engine parameters.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Page size in bytes.
    pub page_size: u64,
    /// Cache budget in pages.
    pub memory_pages: u64,
    /// What reads ahead, one instance per file.
    pub policy: SimPolicy,
    /// Policy parameters.
    pub ra: RaConfig,
    /// Largest device I/O in pages.
    pub max_io_pages: u64,
    /// Width of a timeline bucket in seconds; 0 keeps no timeline.
    pub bucket: f64,
    /// The kernel reads ahead in large folios, as ext4 does on this
    /// machine's 6.18 (engine/folios.rs); the policies' [`RaConfig::large_folios`]
    /// should say the same.
    pub large_folios: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Absent,
    Reading,
    Cached,
}

#[derive(Clone, Copy, Debug)]
struct Page {
    state: State,
    marked: bool,
    /// The order of the marked folio the page is part of (0: the page
    /// alone).
    mark_order: u8,
    readahead_unused: bool,
    shadow_unused: bool,
    phase: u16,
    io: u32,
    prev: u32,
    next: u32,
}

const EMPTY_PAGE: Page = Page {
    state: State::Absent,
    marked: false,
    mark_order: 0,
    readahead_unused: false,
    shadow_unused: false,
    phase: 0,
    io: NIL,
    prev: NIL,
    next: NIL,
};

struct Io {
    first: u64,
    count: u64,
    readahead: bool,
    /// The request that caused this I/O: waiting on readahead issued by an
    /// earlier request is a late prefetch; waiting on one's own is not.
    request: u64,
    waiters: Vec<u32>,
}

#[derive(Default)]
struct PendingRequest {
    reader: usize,
    waiting: u32,
    bytes: u64,
    /// Its file, and when it was asked.
    file: usize,
    issued: f64,
    /// The program's time after it ([`Op::think`]).
    think: f64,
}

struct Reader {
    spec: ReaderSpec,
    in_flight: usize,
    last_issue: f64,
    done: bool,
    scheduled: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Issue(usize),
    IoDone(u32),
    RequestDone(u32),
    /// `ahead run`'s helper hints `count` pages of `file` from `page`.
    Hint {
        file: usize,
        page: u64,
        count: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Event {
    time: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        o.time
            .total_cmp(&self.time)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

/// Everything but the policies (so a policy and the cache can be borrowed
/// at once).
struct Core {
    cfg: EngineConfig,
    now: f64,
    pages: Vec<Page>,
    lru_head: u32,
    lru_tail: u32,
    cached: u64,
    reading: u64,
    file_base: Vec<u64>,
    /// `(first page, file)` of each file that owns its pages (not one that
    /// shares another's), in page order.
    owners: Vec<(u64, usize)>,
    file_pages: Vec<u64>,
    device: Box<dyn Device>,
    /// Queued I/Os by (offset, id): C-LOOK walks it from the head; FIFO
    /// devices take the smallest id from `fifo`.
    queue: BTreeMap<(u64, u32), DevIo>,
    fifo: VecDeque<u32>,
    busy: usize,
    ios: Vec<Io>,
    free_ios: Vec<u32>,
    events: BinaryHeap<Event>,
    seq: u64,
    feedback: Vec<(usize, Feedback)>,
    phase: u16,
    phase_start: f64,
    stats: PhaseStats,
    /// Requests issued so far (numbers the current one).
    request_seq: u64,
    /// What the device charges.
    device_cost: DeviceCost,
    /// Each file's net count of page faults that missed (the kernel's
    /// `mmap_miss`, [`serve::fault`]).
    mmap_miss: Vec<u32>,
    /// How long `ahead run`'s helper naps between looks at its queue
    /// ([`preload::HELPER_NAP`]).
    helper_nap: f64,
    /// The marked folio the request now served hit: its first page and
    /// order ([`ra::CacheView::marked_folio`]).
    mark_hit: Option<(u64, u8)>,
    /// Each file's folio order of its last window (the kernel's
    /// `ra->order`, [`folios`]).
    ra_order: Vec<u32>,
}

/// The simulator: readers, a cache with a budget and a device, in virtual
/// time, driving one readahead policy per file.
pub struct Simulator {
    core: Core,
    policies: Vec<Box<dyn Policy>>,
    /// `SimPolicy::Run`: each file's preload.
    preload: Vec<Option<Preload>>,
}

impl Simulator {
    /// An engine over files of the given sizes in pages, laid out one after
    /// another on the device.
    pub fn new(cfg: EngineConfig, file_pages: &[u64], device: Box<dyn Device>) -> Simulator {
        let alone: Vec<usize> = (0..file_pages.len()).collect();
        Simulator::with_shared_files(cfg, file_pages, &alone, device)
    }

    /// As [`Simulator::new`], where file `i` is the same file as file
    /// `same_as[i]` (an earlier one, or `i` itself): two opens of one file,
    /// each with its own readahead state, as the kernel keeps one per open
    /// file, over one set of cached pages (and one place on the device).
    /// Each is sized to the larger of the two.
    pub fn with_shared_files(
        cfg: EngineConfig,
        file_pages: &[u64],
        same_as: &[usize],
        device: Box<dyn Device>,
    ) -> Simulator {
        let owner = |i: usize| same_as.get(i).copied().filter(|&o| o < i).unwrap_or(i);
        let mut size = file_pages.to_vec();
        for i in (0..file_pages.len()).rev() {
            let o = owner(i);
            size[o] = size[o].max(size[i]);
        }
        let mut base = Vec::with_capacity(file_pages.len());
        let mut total = 0;
        for i in 0..file_pages.len() {
            let o = owner(i);
            if o == i {
                base.push(total);
                total += size[i];
            } else {
                base.push(base[o]);
                size[i] = size[o];
            }
        }
        let file_pages = &size[..];
        let policies = file_pages
            .iter()
            .map(|_| ra::new_policy(cfg.policy.kind(), cfg.ra))
            .collect();
        let preload = preloads(&cfg, file_pages);
        let device_cost = device.cost(cfg.page_size);
        Simulator {
            core: Core {
                now: 0.0,
                pages: vec![EMPTY_PAGE; total as usize],
                lru_head: NIL,
                lru_tail: NIL,
                cached: 0,
                reading: 0,
                owners: (0..base.len())
                    .filter(|&i| owner(i) == i)
                    .map(|i| (base[i], i))
                    .collect(),
                file_base: base,
                file_pages: file_pages.to_vec(),
                device,
                queue: BTreeMap::new(),
                fifo: VecDeque::new(),
                busy: 0,
                ios: Vec::new(),
                free_ios: Vec::new(),
                events: BinaryHeap::new(),
                seq: 0,
                feedback: Vec::new(),
                phase: 0,
                phase_start: 0.0,
                stats: PhaseStats::default(),
                request_seq: 0,
                device_cost,
                mmap_miss: vec![0; file_pages.len()],
                mark_hit: None,
                ra_order: vec![0; file_pages.len()],
                helper_nap: preload::HELPER_NAP,
                cfg,
            },
            policies,
            preload,
        }
    }

    /// Marks pages `[from, to)` of `file` as cached (used, not readahead), as
    /// a preceding workload would have left them.
    pub fn prefill(&mut self, file: usize, from: u64, to: u64) {
        let base = self.core.file_base[file];
        for p in from..to.min(self.core.file_pages[file]) {
            let g = base + p;
            if self.core.pages[g as usize].state == State::Absent {
                self.core.make_room(1);
                self.core.pages[g as usize].state = State::Cached;
                self.core.lru_push_head(g as u32);
                self.core.cached += 1;
            }
        }
    }

    /// Pages cached now.
    pub fn cached_pages(&self) -> u64 {
        self.core.cached
    }

    /// Runs readers until all have finished; returns the phase's counters.
    /// Each file's policy starts fresh, as for a newly opened file.
    pub fn run_phase(&mut self, readers: Vec<ReaderSpec>) -> PhaseStats {
        let c = &mut self.core;
        c.phase = c.phase.wrapping_add(1);
        c.phase_start = c.now;
        c.stats = PhaseStats::default();
        for p in self.policies.iter_mut() {
            *p = ra::new_policy(c.cfg.policy.kind(), c.cfg.ra);
        }
        self.preload = preloads(&c.cfg, &c.file_pages);
        c.mmap_miss.iter_mut().for_each(|m| *m = 0);
        c.ra_order.iter_mut().for_each(|o| *o = 0);
        let mut readers: Vec<Reader> = readers
            .into_iter()
            .map(|spec| Reader {
                spec,
                in_flight: 0,
                last_issue: f64::NEG_INFINITY,
                done: false,
                scheduled: false,
            })
            .collect();
        let start = c.now;
        for (i, r) in readers.iter_mut().enumerate() {
            r.scheduled = true;
            c.schedule(start + r.spec.start, Ev::Issue(i));
        }
        let mut requests: Vec<PendingRequest> = Vec::new();
        let mut free_requests: Vec<u32> = Vec::new();
        let mut last_done = start;
        let mut live = readers.len();
        while let Some(e) = c.events.pop() {
            c.now = e.time;
            match e.ev {
                Ev::Issue(r) => {
                    readers[r].scheduled = false;
                    while readers[r].in_flight < readers[r].spec.depth.max(1) && !readers[r].done {
                        let Some(op) = readers[r].spec.ops.next() else {
                            readers[r].done = true;
                            if readers[r].in_flight == 0 {
                                live -= 1;
                            }
                            break;
                        };
                        readers[r].last_issue = c.now;
                        readers[r].in_flight += 1;
                        let file = op.file.unwrap_or(readers[r].spec.file);
                        let id = free_requests.pop().unwrap_or_else(|| {
                            requests.push(PendingRequest::default());
                            (requests.len() - 1) as u32
                        });
                        let policy = &mut *self.policies[file];
                        let hints = self.preload[file].as_mut();
                        let faults = op.fault.unwrap_or(readers[r].spec.page_faults);
                        let (waiting, bytes) =
                            issue(c, policy, hints, (file, faults), (op.offset, op.len), id);
                        requests[id as usize] = PendingRequest {
                            reader: r,
                            waiting,
                            bytes,
                            file,
                            issued: c.now,
                            think: op.think,
                        };
                        if let Some(p) = self.preload[file].as_mut() {
                            serve::advise(c, &mut self.policies[file], p, file);
                        }
                        if waiting == 0 {
                            c.schedule(c.now + cpu_time(bytes), Ev::RequestDone(id));
                        }
                        c.deliver_feedback(&mut self.policies);
                        if readers[r].spec.interval > 0.0 {
                            break;
                        }
                    }
                }
                Ev::IoDone(io) => {
                    c.busy -= 1;
                    let waiters = c.complete_io(io);
                    for w in waiters {
                        let req = &mut requests[w as usize];
                        req.waiting -= 1;
                        if req.waiting == 0 {
                            let bytes = req.bytes;
                            c.schedule(c.now + cpu_time(bytes), Ev::RequestDone(w));
                        }
                    }
                    c.start_ios();
                }
                Ev::Hint { file, page, count } => serve::hint(c, file, page, count),
                Ev::RequestDone(id) => {
                    let req = &requests[id as usize];
                    let (r, think) = (req.reader, req.think);
                    if let Some(p) = self.preload[req.file].as_mut() {
                        p.timed(((c.now - req.issued) * 1e9) as u64, req.bytes);
                    }
                    c.stats.requests += 1;
                    c.bucket_add(req.bytes, 0, 0);
                    free_requests.push(id);
                    last_done = c.now;
                    readers[r].in_flight -= 1;
                    if readers[r].done {
                        if readers[r].in_flight == 0 {
                            live -= 1;
                        }
                    } else if !readers[r].scheduled {
                        readers[r].scheduled = true;
                        let at =
                            (readers[r].last_issue + readers[r].spec.interval).max(c.now + think);
                        c.schedule(at, Ev::Issue(r));
                    }
                }
            }
            if live == 0 && c.busy == 0 && c.queue.is_empty() {
                break;
            }
        }
        c.end_phase(last_done - start)
    }
}

/// Each file's preload where the policy is `SimPolicy::Run`.
fn preloads(cfg: &EngineConfig, file_pages: &[u64]) -> Vec<Option<Preload>> {
    file_pages
        .iter()
        .map(|&pages| {
            (cfg.policy == SimPolicy::Run).then(|| {
                let window = cfg.ra.max_pages * cfg.page_size;
                let trial = !cfg.ra.random_advice;
                Preload::new(pages * cfg.page_size, cfg.page_size, window, trial)
            })
        })
        .collect()
}

pub(crate) fn cpu_time(bytes: u64) -> f64 {
    REQUEST_CPU + bytes as f64 / COPY_RATE
}

impl Core {
    /// The phase's counters, taken: its time, and the readahead of this
    /// phase that nobody used.
    fn end_phase(&mut self, seconds: f64) -> PhaseStats {
        self.stats.seconds = seconds;
        let phase = self.phase;
        self.stats.unused_at_end = self
            .pages
            .iter()
            .filter(|p| p.readahead_unused && p.phase == phase && p.state != State::Absent)
            .count() as u64;
        std::mem::take(&mut self.stats)
    }

    /// Whether I/O `io` is readahead issued by an earlier request.
    fn is_prefetch(&self, io: u32) -> bool {
        let io = &self.ios[io as usize];
        io.readahead && io.request < self.request_seq
    }

    fn schedule(&mut self, time: f64, ev: Ev) {
        self.seq += 1;
        self.events.push(Event {
            time,
            seq: self.seq,
            ev,
        });
    }

    fn bucket_add(&mut self, delivered: u64, dev_bytes: u64, dev_ios: u64) {
        if self.cfg.bucket <= 0.0 {
            return;
        }
        let b = ((self.now - self.phase_start) / self.cfg.bucket).max(0.0) as usize;
        if self.stats.timeline.len() <= b {
            self.stats.timeline.resize(b + 1, (0, 0, 0));
        }
        let e = &mut self.stats.timeline[b];
        e.0 += delivered;
        e.1 += dev_bytes;
        e.2 += dev_ios;
    }

    fn deliver_feedback(&mut self, policies: &mut [Box<dyn Policy>]) {
        for (file, fb) in self.feedback.drain(..) {
            policies[file].feedback(fb);
        }
    }

    fn lru_unlink(&mut self, g: u32) {
        let Page { prev, next, .. } = self.pages[g as usize];
        if prev != NIL {
            self.pages[prev as usize].next = next;
        } else {
            self.lru_head = next;
        }
        if next != NIL {
            self.pages[next as usize].prev = prev;
        } else {
            self.lru_tail = prev;
        }
        self.pages[g as usize].prev = NIL;
        self.pages[g as usize].next = NIL;
    }

    fn lru_push_head(&mut self, g: u32) {
        self.pages[g as usize].prev = NIL;
        self.pages[g as usize].next = self.lru_head;
        if self.lru_head != NIL {
            self.pages[self.lru_head as usize].prev = g;
        }
        self.lru_head = g;
        if self.lru_tail == NIL {
            self.lru_tail = g;
        }
    }

    fn lru_touch(&mut self, g: u32) {
        if self.lru_head != g {
            self.lru_unlink(g);
            self.lru_push_head(g);
        }
    }

    /// Evicts from the LRU tail until `n` more pages fit the budget (or
    /// nothing evictable is left: pages in flight are pinned).
    fn make_room(&mut self, n: u64) {
        while self.cached + self.reading + n > self.cfg.memory_pages && self.lru_tail != NIL {
            let g = self.lru_tail;
            self.lru_unlink(g);
            let page = &mut self.pages[g as usize];
            page.state = State::Absent;
            page.marked = false;
            page.shadow_unused = page.readahead_unused;
            if page.readahead_unused {
                page.readahead_unused = false;
                self.stats.evicted_before_use += 1;
                // The file whose pages these are (of files that share
                // them, the first: its policy hears of the waste).
                let at = self.owners.partition_point(|&(b, _)| b <= g as u64) - 1;
                let file = self.owners[at].1;
                let index = g as u64 - self.file_base[file];
                self.feedback
                    .push((file, Feedback::EvictedUnused { index }));
            }
            self.cached -= 1;
        }
    }

    fn read(&mut self, file: usize, first: u64, count: u64, readahead: bool) {
        let base = self.file_base[file];
        let mut at = first;
        let end = first + count;
        while at < end {
            let n = (end - at).min(self.cfg.max_io_pages.max(1));
            self.make_room(n);
            let id = match self.free_ios.pop() {
                Some(id) => {
                    self.ios[id as usize] = Io {
                        first: base + at,
                        count: n,
                        readahead,
                        request: self.request_seq,
                        waiters: Vec::new(),
                    };
                    id
                }
                None => {
                    self.ios.push(Io {
                        first: base + at,
                        count: n,
                        readahead,
                        request: self.request_seq,
                        waiters: Vec::new(),
                    });
                    (self.ios.len() - 1) as u32
                }
            };
            for g in base + at..base + at + n {
                let page = &mut self.pages[g as usize];
                debug_assert_eq!(page.state, State::Absent);
                page.state = State::Reading;
                page.io = id;
                page.marked = false;
                page.readahead_unused = readahead;
                page.shadow_unused = false;
                page.phase = self.phase;
            }
            self.reading += n;
            if readahead {
                self.stats.readahead_pages += n;
            }
            let ps = self.cfg.page_size;
            let io = DevIo {
                offset: (base + at) * ps,
                len: n * ps,
            };
            self.queue.insert((io.offset, id), io);
            if self.device.elevator_head().is_none() {
                self.fifo.push_back(id);
            }
            at += n;
        }
        self.start_ios();
    }

    fn start_ios(&mut self) {
        while self.busy < self.device.concurrency() && !self.queue.is_empty() {
            let key = match self.device.elevator_head() {
                Some(head) => self
                    .queue
                    .range((head, 0)..)
                    .next()
                    .or_else(|| self.queue.iter().next())
                    .map(|(k, _)| *k),
                None => loop {
                    let id = self.fifo.pop_front().expect("queued I/O in FIFO");
                    let io = &self.ios[id as usize];
                    let offset = io.first * self.cfg.page_size;
                    if self.queue.contains_key(&(offset, id)) {
                        break Some((offset, id));
                    }
                },
            };
            let Some(key) = key else { break };
            let io = self.queue.remove(&key).expect("picked from the queue");
            let id = key.1;
            let done = self.device.start(self.now, io);
            self.busy += 1;
            self.stats.device_bytes += io.len;
            self.stats.device_ios += 1;
            self.bucket_add(0, io.len, 1);
            self.schedule(done, Ev::IoDone(id));
        }
    }

    fn complete_io(&mut self, id: u32) -> Vec<u32> {
        let io = &mut self.ios[id as usize];
        let (first, count) = (io.first, io.count);
        let waiters = std::mem::take(&mut io.waiters);
        for g in first..first + count {
            self.pages[g as usize].state = State::Cached;
            self.pages[g as usize].io = NIL;
            self.lru_push_head(g as u32);
        }
        self.reading -= count;
        self.cached += count;
        self.free_ios.push(id);
        waiters
    }
}

#[cfg(test)]
mod tests;
