//! CPU cycles of the whole process over a run, user and kernel, counted by
//! the CPU's own counter (`perf_event_open`, one counter per thread).
//!
//! A run's CPU time (getrusage) is what the process was charged; on a
//! virtual machine that includes time the host held the vCPU in the middle
//! of the process's work (faulting in memory the guest had returned to it),
//! and on this machine the kernel's side of `bench fast` was charged 0.13
//! to 0.76 s for the same cold read of 1 GiB from one day to the next
//! (docs/bench.md). A guest's counters stop while the host holds the vCPU,
//! so cycles count the work each side did, on any host.
//!
//! Every thread of the process at the start is counted, and threads they
//! start later too (the counter is inherited): those are added when they
//! exit, so an engine made before the run and dropped after it is counted
//! whole. Where the kernel gives no counter (no hardware events in the
//! virtual machine, `perf_event_paranoid` too strict) there is no figure.

use std::os::fd::OwnedFd;

use ahead::perf;

/// Counters of every thread of the process, started.
pub(super) struct Cycles(Vec<OwnedFd>);

impl Cycles {
    /// Starts counting every thread of the process; `None` if the kernel
    /// gives no counter for one of them.
    pub(super) fn start() -> Option<Cycles> {
        let tids = std::fs::read_dir("/proc/self/task")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok());
        Cycles::start_on(tids)
    }

    /// Starts counting the threads `tids` of this process, and the threads
    /// they start from now on.
    fn start_on(tids: impl Iterator<Item = libc::pid_t>) -> Option<Cycles> {
        let attr = perf::Attr {
            flags: perf::FLAG_INHERIT | perf::FLAG_EXCLUDE_HV,
            ..perf::Attr::new(perf::TYPE_HARDWARE, perf::COUNT_HW_CPU_CYCLES)
        };
        let mut fds = Vec::new();
        for tid in tids {
            match perf::open(&attr, tid) {
                Ok(fd) => fds.push(fd),
                // A thread that has exited since the listing has nothing
                // to count; any other refusal leaves no figure.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(_) => return None,
            }
        }
        (!fds.is_empty()).then_some(Cycles(fds))
    }

    /// The cycles counted so far, every thread together.
    pub(super) fn read(&self) -> Option<u64> {
        let mut sum = 0u64;
        for fd in &self.0 {
            let mut v = [0u8; 8];
            match rustix::io::read(fd, &mut v) {
                Ok(8) => sum += u64::from_ne_bytes(v),
                _ => return None,
            }
        }
        Some(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::Cycles;

    /// This thread alone (the test harness runs other tests on other
    /// threads of the process, which `Cycles::start` would count too).
    fn this_thread() -> Option<Cycles> {
        // SAFETY: gettid has no preconditions.
        Cycles::start_on(std::iter::once(unsafe { libc::gettid() }))
    }

    /// Work on another thread, started after the counter, is counted once
    /// that thread has ended: a spin of 50 ms there counts more than the
    /// idle wait of the same length here.
    #[test]
    fn a_thread_started_during_the_count_is_counted() {
        let Some(idle) = this_thread() else {
            eprintln!("SKIP: no CPU cycle counter here (perf_event_open refused)");
            return;
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        let idle = idle.read().unwrap();
        let busy = this_thread().unwrap();
        std::thread::spawn(|| {
            let t = std::time::Instant::now();
            let mut x = 0u64;
            while t.elapsed() < std::time::Duration::from_millis(50) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .join()
        .unwrap();
        let busy = busy.read().unwrap();
        assert!(
            busy > 4 * idle.max(1_000_000),
            "spinning 50 ms: {busy} cycles; sleeping 50 ms: {idle}"
        );
    }
}
