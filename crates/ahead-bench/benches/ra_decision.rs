//! Cost of one readahead decision, per policy.
//!
//! Target: well under a microsecond per decision (issue "Readahead core and
//! simulator"); the policies allocate nothing per call.

use ahead::ra::{new_policy, CacheView, PolicyKind, RaConfig, Request, Trigger};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

/// A view with pages below `cached_below` present.
struct View {
    cached_below: u64,
}

impl CacheView for View {
    fn file_pages(&self) -> u64 {
        1 << 30
    }
    fn is_present(&self, index: u64) -> bool {
        index < self.cached_below
    }
}

fn decisions(c: &mut Criterion) {
    for kind in PolicyKind::ALL {
        c.bench_function(&format!("{kind}/sequential-marker-hit"), |b| {
            let mut p = new_policy(kind, RaConfig::with_max_pages(256));
            let mut at = 0u64;
            b.iter(|| {
                let view = View { cached_below: at };
                let req = Request::new(at, 16);
                p.begin(req);
                let w = p.decide(
                    req,
                    if at == 0 {
                        Trigger::Miss
                    } else {
                        Trigger::MarkerHit
                    },
                    &view,
                );
                p.finish(req);
                at = w.map(|w| w.start).unwrap_or(at + 16);
                if at > 1 << 28 {
                    at = 0;
                }
                black_box(w)
            });
        });
        c.bench_function(&format!("{kind}/random-miss"), |b| {
            let mut p = new_policy(kind, RaConfig::with_max_pages(256));
            let mut x = 0x9e3779b97f4a7c15u64;
            let view = View { cached_below: 0 };
            b.iter(|| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let req = Request::new(x % (1 << 29) + 1, 16);
                p.begin(req);
                let w = p.decide(req, Trigger::Miss, &view);
                p.finish(req);
                black_box(w)
            });
        });
    }
}

criterion_group!(benches, decisions);
criterion_main!(benches);
