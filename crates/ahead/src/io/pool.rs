//! The thread-pool backend: `preadv` on a bounded pool of threads.
//!
//! The fallback for kernels without io_uring. Each worker takes a read from a
//! shared queue, performs it with [`super::read_blocking`] (so its semantics
//! are the blocking path's), and runs the completion. At most `depth` reads
//! are queued or running; `submit` blocks beyond that.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::{Backend, Completion, ReadOp};

/// Most worker threads a pool starts: each blocked `preadv` holds one, and
/// beyond a few dozen the threads cost more than the queue depth they buy.
const MAX_THREADS: usize = 32;

struct Queue {
    jobs: VecDeque<(ReadOp, Completion)>,
    in_flight: usize,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    space: Condvar,
    depth: usize,
}

/// A pool of reader threads.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool keeping at most `depth` reads in flight, with
    /// `min(depth, 32)` threads.
    pub fn new(depth: usize) -> Pool {
        let depth = depth.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                in_flight: 0,
                shutdown: false,
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            depth,
        });
        let workers = (0..depth.min(MAX_THREADS))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("ahead-pool-{i}"))
                    .spawn(move || worker(&shared))
                    .expect("spawn pool thread")
            })
            .collect();
        Pool { shared, workers }
    }
}

fn worker(shared: &Shared) {
    loop {
        let (mut op, done) = {
            let mut q = shared.queue.lock().unwrap();
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    break job;
                }
                if q.shutdown {
                    return;
                }
                q = shared.work.wait(q).unwrap();
            }
        };
        let result = super::read_blocking(&mut op);
        super::run_completion(done, op, result);
        let mut q = shared.queue.lock().unwrap();
        q.in_flight -= 1;
        drop(q);
        shared.space.notify_one();
    }
}

impl Backend for Pool {
    fn name(&self) -> &'static str {
        "pool"
    }

    fn depth(&self) -> usize {
        self.shared.depth
    }

    fn submit(&self, op: ReadOp, done: Completion) {
        let mut q = self.shared.queue.lock().unwrap();
        while q.in_flight >= self.shared.depth {
            q = self.shared.space.wait(q).unwrap();
        }
        q.in_flight += 1;
        q.jobs.push_back((op, done));
        drop(q);
        self.shared.work.notify_one();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap().shutdown = true;
        self.shared.work.notify_all();
        let me = std::thread::current().id();
        for w in self.workers.drain(..) {
            // The last reference may die in a completion run by a worker:
            // that worker cannot join itself; it returns once it sees the
            // shutdown.
            if w.thread().id() != me {
                let _ = w.join();
            }
        }
    }
}
