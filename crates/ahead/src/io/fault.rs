//! A backend that wraps another and injects faults, so that tests can see
//! what the engine does with errors, short reads and slow or reordered
//! completions on a real file, with the real backend underneath.
//!
//! Each [`Rule`] names a byte range, what to inject there, on which path
//! (reads handed to the backend — readahead and asynchronous reads — or
//! reads made in the caller's thread — demand reads), with what probability
//! (drawn from a seeded generator, so a failing run can be replayed) and how
//! many times at most. A read that overlaps a rule's range is affected as a
//! whole, as one device request would be. The read itself still happens on
//! the inner backend; its result is what gets replaced, so the memory and
//! file descriptor it carries are handled exactly as in a real completion.
//!
//! The backends themselves retry `EINTR`/`EAGAIN` and continue short reads
//! (see [`super`]); what they hand the engine, and what this injects, is
//! what survives that: an error, or fewer bytes than asked (which the
//! contract says means the end of the file came first).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Backend, Completion, ReadOp};

/// What a rule does to a read it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Fail with this OS error (`libc::EIO`, `libc::ENOSPC`, ...).
    Error(i32),
    /// Return only the bytes before the rule's range (at least one byte
    /// fewer than asked): the file seems to end there.
    Short,
    /// Complete after this long (completions overtake each other).
    Delay(Duration),
}

/// Which reads a rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPath {
    /// Reads handed to the backend: readahead, `read_many`, async reads.
    Backend,
    /// Reads made in the caller's thread: demand reads.
    Inline,
    /// Both.
    Both,
}

/// One fault to inject.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Bytes of the file a read must overlap to be affected.
    pub range: Range<u64>,
    /// What happens to it.
    pub kind: FaultKind,
    /// Which reads.
    pub path: FaultPath,
    /// Chance that an overlapping read is affected (1.0: every one).
    pub probability: f64,
    /// How many reads it may affect (`None`: no limit).
    pub times: Option<u64>,
}

impl Rule {
    /// Every read overlapping `range`, on both paths, fails with `errno`.
    pub fn error(range: Range<u64>, errno: i32) -> Rule {
        Rule {
            range,
            kind: FaultKind::Error(errno),
            path: FaultPath::Both,
            probability: 1.0,
            times: None,
        }
    }

    /// The same rule for reads on `path` only.
    pub fn on(mut self, path: FaultPath) -> Rule {
        self.path = path;
        self
    }
}

/// The fault-injecting backend.
pub struct Fault {
    inner: Arc<dyn Backend>,
    rules: Mutex<Vec<Rule>>,
    rng: Mutex<u64>,
    injected: AtomicU64,
}

impl Fault {
    /// Wraps `inner`; `seed` drives the probabilities.
    pub fn new(inner: Arc<dyn Backend>, seed: u64) -> Arc<Fault> {
        Arc::new(Fault {
            inner,
            rules: Mutex::new(Vec::new()),
            rng: Mutex::new(seed | 1),
            injected: AtomicU64::new(0),
        })
    }

    /// Adds a rule.
    pub fn add(&self, rule: Rule) {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rule);
    }

    /// Removes every rule: reads behave as the inner backend's again.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// How many reads were affected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// The fault for a read of `len` bytes at `offset` on `path`, if any;
    /// counts it against its rule.
    fn pick(&self, offset: u64, len: usize, path: FaultPath) -> Option<(FaultKind, u64)> {
        let end = offset.saturating_add(len as u64);
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        for r in rules.iter_mut() {
            let on_path = r.path == FaultPath::Both || r.path == path;
            let overlaps = r.range.start < end && offset < r.range.end;
            if !on_path || !overlaps || r.times == Some(0) {
                continue;
            }
            if r.probability < 1.0 && self.draw() >= r.probability {
                continue;
            }
            if let Some(t) = r.times.as_mut() {
                *t -= 1;
            }
            self.injected.fetch_add(1, Ordering::Relaxed);
            // Bytes before the rule's range, for a short read.
            let before = r.range.start.saturating_sub(offset);
            return Some((r.kind, before));
        }
        None
    }

    /// A number in [0, 1) (xorshift64*).
    fn draw(&self) -> f64 {
        let mut s = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        let x = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `result` as the fault makes it.
fn apply(kind: FaultKind, before: u64, result: std::io::Result<usize>) -> std::io::Result<usize> {
    match kind {
        FaultKind::Error(errno) => Err(std::io::Error::from_raw_os_error(errno)),
        FaultKind::Short => result.map(|n| n.min(before as usize)),
        FaultKind::Delay(d) => {
            std::thread::sleep(d);
            result
        }
    }
}

impl Backend for Fault {
    fn name(&self) -> &'static str {
        "fault"
    }

    fn depth(&self) -> usize {
        self.inner.depth()
    }

    fn submit(&self, op: ReadOp, done: Completion) {
        match self.pick(op.offset, op.len, FaultPath::Backend) {
            None => self.inner.submit(op, done),
            Some((kind, before)) => self.inner.submit(
                op,
                Box::new(move |op, result| done(op, apply(kind, before, result))),
            ),
        }
    }

    fn attach(&self, arena: &std::sync::Arc<crate::io::Arena>) -> bool {
        self.inner.attach(arena)
    }

    fn fixed_reads(&self) -> u64 {
        self.inner.fixed_reads()
    }

    fn read_now(&self, op: &mut ReadOp) -> std::io::Result<usize> {
        let fault = self.pick(op.offset, op.len, FaultPath::Inline);
        let result = self.inner.read_now(op);
        match fault {
            None => result,
            Some((kind, before)) => apply(kind, before, result),
        }
    }
}

/// A fault in a copy's destination writes, for the crate's own tests
/// (`CopyOptions`'s test-only field): nothing outside them can set one, so
/// no environment variable or caller can corrupt a program's copies.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(crate) enum WriteFault {
    /// Flip the byte at this destination offset as it is written.
    Corrupt(u64),
    /// Fail the write that covers this offset with this OS error.
    Fail(u64, i32),
}
