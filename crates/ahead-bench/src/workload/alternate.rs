//! Cached reads timed in alternation: every engine of a case is opened
//! and warmed first, then the requests are read in slices, each slice by
//! every engine in turn (the order rotated from slice to slice), and each
//! engine's time is the sum of its slices.
//!
//! A cached read is a few microseconds of the CPU's and the memory's
//! time, and this machine's host moves both by 5–20% from one tenth of a
//! second to the next. One run of each engine after the other (0.1 s a
//! side in `--quick`) put Buffered mode's cached 16 KiB reads at 0.62×,
//! 0.84× and 1.26× the kernel in runs of one build (docs/bench.md), where
//! an in-process alternation of 30 slices gave 0.965–0.98× twice: what
//! moved was the host between the runs, not the engines. Slices read by
//! each engine within milliseconds of each other share the host's mood.

use std::os::fd::OwnedFd;
use std::path::Path;

use super::{
    ahead_counters, ahead_reads, kernel_reads, parts_for, percentiles, prepare, AheadEngine, Clock,
    Engine, Measurement, Workload,
};

/// One engine's open file and what its slices added up to.
struct Side {
    reader: Reader,
    bytes: u64,
    seconds: f64,
    cpu_s: Option<f64>,
    lat: Vec<f64>,
}

enum Reader {
    Kernel(OwnedFd),
    Ahead {
        // Kept alive for the file's sake, and for its counters.
        engine: AheadEngine,
        file: ahead::File,
        zero_copy: bool,
    },
}

/// Runs `w` (one reader at depth 1, cached: `w.warm`) through every engine
/// of `engines` in `slices` alternated slices; one measurement per engine,
/// in the order given. `None` for a workload this does not fit (several
/// readers, depth, a device-limit engine): the caller runs it as usual.
pub fn run_alternated(
    path: &Path,
    engines: &[&Engine],
    w: &Workload,
    slices: usize,
) -> crate::Result<Option<Vec<Measurement>>> {
    let fits = w.warm
        && w.depth <= 1
        && !matches!(w.pattern, super::Pattern::Interleaved { .. })
        && engines
            .iter()
            .all(|e| matches!(e, Engine::Kernel | Engine::Ahead { .. }));
    if !fits || slices < 2 {
        return Ok(None);
    }
    let size = prepare(path, w)?;
    let (parts, _) = parts_for(w, size);
    let offs = parts.into_iter().next().unwrap_or_default();
    let mut sides = Vec::with_capacity(engines.len());
    for e in engines {
        let reader = match e {
            Engine::Ahead {
                config,
                zero_copy,
                mode,
            } => {
                let engine = AheadEngine::new(config.clone()).map_err(|e| e.to_string())?;
                let file = engine
                    .open_with(path, &ahead::OpenOptions::new().mode(*mode))
                    .map_err(|e| e.to_string())?;
                // Warm ahead's own cache (Direct) as the single run does.
                ahead_reads(&file, false, w.bs, &offs, None)?;
                Reader::Ahead {
                    engine,
                    file,
                    zero_copy: *zero_copy,
                }
            }
            _ => {
                let fd = ahead::testdata::open_read(path, false)
                    .map_err(|e| crate::Error::msg(format!("open {}: {e}", path.display())))?;
                kernel_reads(&fd, false, w.bs, &offs, None)?;
                Reader::Kernel(fd)
            }
        };
        sides.push(Side {
            reader,
            bytes: 0,
            seconds: 0.0,
            cpu_s: Some(0.0),
            lat: Vec::new(),
        });
    }
    let per = offs.len().div_ceil(slices).max(1);
    for (i, chunk) in offs.chunks(per).enumerate() {
        let n = sides.len();
        for k in 0..n {
            let side = &mut sides[(k + i) % n];
            let lat = w.latency.then_some(&mut side.lat);
            let clock = Clock::start();
            let got = match &side.reader {
                Reader::Kernel(fd) => kernel_reads(fd, false, w.bs, chunk, lat)?,
                Reader::Ahead {
                    file, zero_copy, ..
                } => ahead_reads(file, *zero_copy, w.bs, chunk, lat)?,
            };
            let (s, cpu) = clock.finish();
            side.bytes += got;
            side.seconds += s;
            side.cpu_s = side.cpu_s.zip(cpu).map(|(a, b)| a + b);
        }
    }
    Ok(Some(
        sides
            .into_iter()
            .map(|mut s| {
                let (p50_us, p99_us) = percentiles(&mut s.lat);
                let mut m = Measurement {
                    bytes: s.bytes,
                    seconds: s.seconds,
                    cpu_s: s.cpu_s,
                    p50_us,
                    p99_us,
                    ..Measurement::default()
                };
                if let Reader::Ahead { engine, file, .. } = &s.reader {
                    ahead_counters(&mut m, engine, file);
                }
                m
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Pattern;

    /// Every engine reads every request once, in slices: the same bytes
    /// for each, one latency per request; a cold workload is left to the
    /// single run.
    #[test]
    fn each_engine_reads_the_whole_workload_in_its_slices() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let path = dir.path().join("f");
        ahead::testdata::write_file(&path, 4 << 20).unwrap();
        let w = Workload {
            cold: false,
            warm: true,
            latency: true,
            bytes: 2 << 20,
            ..Workload::new(Pattern::Random, 16 << 10)
        };
        let engines = [
            Engine::Kernel,
            Engine::Ahead {
                config: ahead::EngineConfig::default().with_cache_bytes(32 << 20),
                zero_copy: false,
                mode: ahead::Mode::Buffered,
            },
            Engine::Ahead {
                config: ahead::EngineConfig::default().with_cache_bytes(32 << 20),
                zero_copy: true,
                mode: ahead::Mode::Direct,
            },
        ];
        let order: Vec<&Engine> = engines.iter().collect();
        let ms = run_alternated(&path, &order, &w, 5)
            .unwrap()
            .expect("a cached case");
        assert_eq!(ms.len(), 3);
        for m in &ms {
            assert_eq!(m.bytes, 2 << 20, "{m:?}");
            assert!(m.seconds > 0.0 && m.p50_us.is_some(), "{m:?}");
        }
        assert!(ms[0].stats.is_none() && ms[1].stats.is_some());
        let cold = Workload { warm: false, ..w };
        assert!(run_alternated(&path, &order, &cold, 5).unwrap().is_none());
    }
}
