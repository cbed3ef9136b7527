//! Tests of the simulator engine.

use super::*;
use crate::device::{Pipe, PipeParams};
use ahead::ra::PolicyKind;

fn engine(policy: impl Into<SimPolicy>, memory_pages: u64, file_pages: u64) -> Simulator {
    Simulator::new(
        EngineConfig {
            page_size: 4096,
            memory_pages,
            policy: policy.into(),
            ra: RaConfig::with_max_pages(32),
            max_io_pages: 64,
            bucket: 0.0,
            large_folios: false,
        },
        &[file_pages],
        Box::new(Pipe::new(PipeParams::SSD)),
    )
}

fn seq(file_pages: u64, record: u64) -> ReaderSpec {
    ReaderSpec {
        file: 0,
        start: 0.0,
        interval: 0.0,
        depth: 1,
        ops: Box::new((0..file_pages * 4096 / record).map(move |i| (i * record, record).into())),
        page_faults: false,
    }
}

#[test]
fn sequential_read_is_all_readahead_and_no_waste() {
    for policy in PolicyKind::ALL {
        let mut e = engine(policy, 1 << 20, 10_000);
        let s = e.run_phase(vec![seq(10_000, 4096)]);
        assert_eq!(s.pages_requested, 10_000);
        assert_eq!(
            s.device_bytes,
            10_000 * 4096,
            "{policy}: every page read once"
        );
        assert!(s.device_ios < 400, "{policy}: {} I/Os", s.device_ios);
        assert_eq!(s.evicted_before_use + s.unused_at_end, 0, "{policy}");
    }
}

#[test]
fn budget_is_respected_and_reread_misses_when_file_exceeds_it() {
    let mut e = engine(PolicyKind::OnDemand, 1000, 10_000);
    e.run_phase(vec![seq(10_000, 65536)]);
    assert!(e.cached_pages() <= 1000);
    let s = e.run_phase(vec![seq(10_000, 65536)]);
    // LRU over a file ten times the cache: the re-read finds nothing of
    // the first read and reads the whole file again.
    assert_eq!(s.device_bytes, 10_000 * 4096);
}

#[test]
fn cached_file_is_served_without_io() {
    let mut e = engine(PolicyKind::Ahead, 1 << 20, 1000);
    e.prefill(0, 0, 1000);
    let s = e.run_phase(vec![seq(1000, 4096)]);
    assert_eq!(s.device_ios, 0);
    assert_eq!(s.pages_hit, 1000);
}

#[test]
fn deterministic() {
    let run = || {
        let mut e = engine(PolicyKind::Ahead, 500, 10_000);
        e.run_phase(vec![seq(10_000, 8192), seq(10_000, 4096)])
    };
    assert_eq!(run(), run());
}

fn backward(file_pages: u64, record: u64) -> ReaderSpec {
    let n = file_pages * 4096 / record;
    ReaderSpec {
        file: 0,
        start: 0.0,
        interval: 0.0,
        depth: 1,
        ops: Box::new((0..n).rev().map(move |i| (i * record, record).into())),
        page_faults: false,
    }
}

/// `ahead run` in the simulator: a forward reader gets the kernel's
/// readahead and nothing more (the same reads as `ondemand`); a backward
/// one gets the preload's hints once the shim has let eight jumps by, and
/// waits for the device far less often than under `ondemand`.
#[test]
fn run_is_the_kernels_readahead_with_the_preloads_hints_on_top() {
    let sim = |policy: SimPolicy, reader: fn(u64, u64) -> ReaderSpec| {
        let mut e = engine(policy, 1 << 20, 10_000);
        e.run_phase(vec![reader(10_000, 8192)])
    };
    let (kernel, run) = (SimPolicy::Engine(PolicyKind::OnDemand), SimPolicy::Run);
    assert_eq!(sim(kernel, seq), sim(run, seq));
    let (k, r) = (sim(kernel, backward), sim(run, backward));
    assert_eq!(k.pages_hit, 0, "ondemand reads each backward request alone");
    // The shim's eight jumps and the ninth, which loads the core, miss.
    assert!((9_000..=10_000 - 18).contains(&r.pages_hit), "{r:?}");
    assert!(r.device_ios < k.device_ios / 10, "{r:?}");
    assert!(
        r.seconds < k.seconds / 2.0,
        "{} against {}",
        r.seconds,
        k.seconds
    );
}

fn faults(pages: Vec<u64>) -> ReaderSpec {
    ReaderSpec {
        file: 0,
        start: 0.0,
        interval: 0.0,
        depth: 1,
        ops: Box::new(pages.into_iter().map(|p| (p * 4096, 4096).into())),
        page_faults: true,
    }
}

/// Page faults are served as the kernel's `filemap_fault` serves them: a
/// miss reads the whole window around the page (numpy's every-57th-row
/// slice of a mapped array read all of its 268 MB file, 202-313 I/Os,
/// under the cgroup's counters), a marker hit reads on, and a file that
/// misses more than `MMAP_LOTSAMISS` times net reads only the pages
/// faulted.
#[test]
fn page_faults_read_around_and_stop_after_many_misses() {
    let kernel = SimPolicy::Engine(PolicyKind::OnDemand);
    // Every 8th page of 10,000, forward, with windows of 32 pages: each
    // fault lands inside the window read around the one before, and the
    // markers carry the reading on, so the whole file is read in windows.
    let mut e = engine(kernel, 1 << 20, 10_000);
    let s = e.run_phase(vec![faults((0..1250).map(|i| i * 8).collect())]);
    assert!(s.device_bytes >= 9_900 * 4096, "{s:?}");
    assert!(s.device_ios < 500, "{s:?}");
    assert!(s.pages_hit >= 800, "{s:?}");
    // The same offsets as reads: ondemand reads each alone.
    let mut e = engine(kernel, 1 << 20, 10_000);
    let reads = ReaderSpec {
        page_faults: false,
        ..faults((0..1250).map(|i| i * 8).collect())
    };
    let r = e.run_phase(vec![reads]);
    assert!(r.device_bytes <= 1_300 * 4096, "{r:?}");
    // 300 faults far apart: the first 100 read around (32 pages each),
    // the rest read one page each.
    let mut e = engine(kernel, 1 << 22, 1 << 20);
    let s = e.run_phase(vec![faults((0..300).map(|i| i * 3_000).collect())]);
    assert_eq!(s.pages_hit, 0, "{s:?}");
    assert_eq!(s.device_bytes, (100 * 32 + 200) * 4096, "{s:?}");
}

/// The helper sends a read's hints when it next wakes, at the next whole
/// millisecond ([`preload::HELPER_NAP`]): a backward reader that reads as
/// fast as the device lets it reaches pages the helper has not yet hinted
/// and waits for more of them than with hints sent as each read is
/// served; one whose reads come 2 ms apart finds every window hinted
/// before it gets there either way.
#[test]
fn hints_go_out_when_the_helper_wakes() {
    let sim = |interval: f64, nap: f64| {
        let mut e = engine(SimPolicy::Run, 1 << 20, 4_000);
        e.core.helper_nap = nap;
        let reader = ReaderSpec {
            interval,
            ..backward(4_000, 8192)
        };
        e.run_phase(vec![reader])
    };
    let (napping, at_once) = (sim(0.0, preload::HELPER_NAP), sim(0.0, 0.0));
    assert!(
        napping.pages_hit + 20 < at_once.pages_hit,
        "{} hits napping, {} with hints at once",
        napping.pages_hit,
        at_once.pages_hit
    );
    assert!(napping.seconds > at_once.seconds);
    assert_eq!(
        sim(2e-3, preload::HELPER_NAP).pages_hit,
        sim(2e-3, 0.0).pages_hit
    );
}
