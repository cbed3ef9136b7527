//! The backend for sources whose reads are requests (objects in a store):
//! each source starts its own reads where it can
//! ([`ReadSource::start`](super::ReadSource::start): an object on the
//! engine's runtime, so that a read in flight holds no thread), and a
//! bounded pool of threads reads whatever cannot be started that way.

use super::{Backend, Completion, Pool, ReadOp};

/// Requests started by their sources, a pool for the rest.
pub struct Requests {
    pool: Pool,
}

impl Requests {
    /// A backend whose pool runs at most `depth` blocking reads at once.
    pub fn new(depth: usize) -> Requests {
        Requests {
            pool: Pool::new(depth),
        }
    }
}

impl Backend for Requests {
    fn name(&self) -> &'static str {
        "requests"
    }

    fn depth(&self) -> usize {
        self.pool.depth()
    }

    fn submit(&self, op: ReadOp, done: Completion) {
        let source = op.source.clone();
        if let Err((op, done)) = source.start(op, done) {
            self.pool.submit(op, done);
        }
    }
}
