//! `ahead bench remote`: reading objects in an S3-compatible store through
//! a network of known latency and bandwidth ([`crate::shaper`]), ahead
//! beside what a Rust user has today, in one run:
//!
//! * `ahead` — [`ahead::Engine::open_object`]: the cache and the `ahead`
//!   policy, ranged GETs on the engine's runtime;
//! * `object_store-bufreader` — object_store's `BufReader` (a 1 MiB
//!   buffer, cleared on a seek; what obstore's `open_reader` wraps);
//! * `naive` — one GET per read;
//! * `oracle` — what the profile allows ([`oracle`]).
//!
//! Every engine reads the same offsets of the same objects, for at most
//! `seconds` per pattern; bytes fetched are counted by the shaper (every
//! byte the server sent, whoever asked), so the engines are measured by
//! one meter. Every byte read is checked against the generated contents.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};

use crate::shaper::{NetProfile, Shaper};
use crate::{Error, Result};

mod args;
mod copy;
mod readers;
mod report;
#[cfg(feature = "embedded-server")]
mod serve;

pub use report::{plot, table};

pub use args::{main, RemoteArgs, ServerKind};
use readers::{read_ahead, read_bufreader, read_naive};
#[cfg(feature = "embedded-server")]
pub use serve::{main as serve, ServeArgs};

/// The benchmark's patterns, by their JSON names (`copy`: the large
/// object downloaded to a file, see the `copy` module).
pub const PATTERNS: [&str; 9] = [
    "seq",
    "seq-64k",
    "reverse",
    "stride",
    "random-4k",
    "random-64k",
    "interleaved-8",
    "many-objects",
    "copy",
];

/// The engines, in the order they run.
pub const ENGINES: [&str; 3] = ["ahead", "object_store-bufreader", "naive"];

/// What one run measures.
#[derive(Clone, Debug)]
pub struct RemoteConfig {
    /// The network between client and server.
    pub profile: NetProfile,
    /// The large object's size.
    pub object_size: u64,
    /// Objects of the many-objects pattern, their size, and its readers.
    pub many: (usize, u64, usize),
    /// Longest time per engine and pattern.
    pub seconds: f64,
    /// Repetitions (medians reported).
    pub reps: usize,
    /// Patterns to run (names from [`PATTERNS`]).
    pub patterns: Vec<String>,
    /// The engine's cache budget.
    pub cache_bytes: u64,
    /// The engine's largest readahead window.
    pub max_readahead: u64,
    /// The engine's largest single request.
    pub max_io: u64,
    /// An S3 endpoint already running and a bucket in it, instead of the
    /// embedded server (credentials from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY).
    pub endpoint: Option<(String, String)>,
    /// The endpoint's access key and secret, where they are not taken
    /// from the environment (the Ceph cluster a run brings up).
    pub credentials: Option<(String, String)>,
    /// The server, as the table names it.
    pub server: String,
}

impl RemoteConfig {
    /// The full run: a 1 GiB object, 256 objects of 16 MiB read by 16
    /// readers, 10 s per run, 3 repetitions.
    pub fn full(profile: NetProfile) -> RemoteConfig {
        RemoteConfig {
            profile,
            object_size: 1 << 30,
            many: (256, 16 << 20, 16),
            seconds: 10.0,
            reps: 3,
            patterns: PATTERNS.iter().map(|s| s.to_string()).collect(),
            cache_bytes: 256 << 20,
            // The library's windows and GETs for objects.
            max_readahead: ahead::EngineConfig::for_objects().max_readahead,
            max_io: ahead::EngineConfig::for_objects().max_io,
            endpoint: None,
            credentials: None,
            server: "embedded (s3s-fs)".into(),
        }
    }

    /// The short form `ahead bench --quick` runs.
    pub fn quick(profile: NetProfile) -> RemoteConfig {
        RemoteConfig {
            object_size: 256 << 20,
            many: (32, 4 << 20, 8),
            seconds: 2.0,
            reps: 1,
            ..RemoteConfig::full(profile)
        }
    }
}

impl RemoteConfig {
    /// The short form `ahead bench --quick` ends with: a 128 MiB object,
    /// four patterns, 1.5 s each.
    pub fn short(profile: NetProfile) -> RemoteConfig {
        RemoteConfig {
            object_size: 128 << 20,
            seconds: 1.5,
            patterns: ["seq", "reverse", "random-4k", "random-64k"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..RemoteConfig::quick(profile)
        }
    }
}

/// One engine on one pattern.
#[derive(Clone, Debug)]
pub struct RemoteRow {
    /// Engine name.
    pub engine: String,
    /// Pattern name.
    pub pattern: String,
    /// Bytes the reader got, per second (MB = 10^6 bytes).
    pub mb_s: f64,
    /// `mb_s` over the oracle's.
    pub oracle_ratio: f64,
    /// Bytes the server sent over bytes the reader asked for.
    pub fetched_ratio: f64,
    /// Per read, µs.
    pub p50_us: f64,
    /// Per read, µs.
    pub p99_us: f64,
    /// Peak resident memory of the process during the run.
    pub peak_rss_mib: f64,
    /// CPU seconds of the process during the run.
    pub cpu_s: f64,
}

impl RemoteRow {
    /// The row as the JSON report has it.
    pub fn json(&self) -> Value {
        json!({
            "engine": self.engine, "pattern": self.pattern, "mb_s": self.mb_s,
            "oracle_ratio": self.oracle_ratio, "fetched_ratio": self.fetched_ratio,
            "p50_us": self.p50_us, "p99_us": self.p99_us,
            "peak_rss_mib": self.peak_rss_mib, "cpu_s": self.cpu_s,
        })
    }
}

/// A pattern's reads: (object index, offset, length) for each reader, in
/// order; `depth` reads of one reader may be in flight at once.
struct Plan {
    readers: Vec<Vec<(usize, u64, u64)>>,
    depth: usize,
}

fn plan(pattern: &str, cfg: &RemoteConfig) -> Result<Plan> {
    let size = cfg.object_size;
    let one = |v: Vec<(usize, u64, u64)>| Plan {
        readers: vec![v],
        depth: 1,
    };
    let seq = |bs: u64| (0..size / bs).map(|i| (0, i * bs, bs)).collect::<Vec<_>>();
    let mut rng = fastrand::Rng::with_seed(23);
    Ok(match pattern {
        "seq" => one(seq(1 << 20)),
        "seq-64k" => one(seq(64 << 10)),
        "reverse" => one(seq(64 << 10).into_iter().rev().collect()),
        "stride" => one((0..size / (256 << 10))
            .map(|i| (0, i * (256 << 10), 64 << 10))
            .collect()),
        "random-4k" => one((0..4096)
            .map(|_| (0, rng.u64(0..size / 4096) * 4096, 4096))
            .collect()),
        "random-64k" => {
            let reads = (0..8192)
                .map(|_| (0, rng.u64(0..size / (64 << 10)) * (64 << 10), 64 << 10))
                .collect();
            Plan {
                readers: vec![reads],
                depth: 64,
            }
        }
        "interleaved-8" => {
            // One reader taking 64 KiB from each of 8 forward streams in
            // turn, the streams an eighth of the object apart.
            let part = size / 8;
            let per = part / (64 << 10);
            one((0..per)
                .flat_map(|i| (0..8).map(move |s| (0, s * part + i * (64 << 10), 64 << 10)))
                .collect())
        }
        "many-objects" => {
            let (n, osize, readers) = cfg.many;
            let mut rs = vec![Vec::new(); readers];
            for o in 0..n {
                for i in 0..osize / (1 << 20) {
                    rs[o % readers].push((1 + o, i * (1 << 20), 1 << 20));
                }
            }
            Plan {
                readers: rs,
                depth: 1,
            }
        }
        // (Not reads: see `copy`.)
        "copy" => Plan {
            readers: Vec::new(),
            depth: 1,
        },
        other => return Err(Error::msg(format!("unknown remote pattern '{other}'"))),
    })
}

/// What the profile allows a pattern: the total bandwidth and the request
/// rate; and for a reader with `depth` reads in flight that must wait for
/// each (random reads), Little's law: each read costs one first byte and
/// its transfer at its share of the bandwidth (one connection's, or the
/// total split `depth` ways).
pub fn oracle(pattern: &str, cfg: &RemoteConfig) -> f64 {
    let p = cfg.profile;
    let total = p.total as f64;
    let per_read = |bs: f64, depth: f64| {
        let share = (p.per_conn as f64).min(total / depth);
        let t = p.first_byte.as_secs_f64() + bs / share;
        (depth * bs / t).min(total).min(p.max_rps as f64 * bs)
    };
    let mb = 1e6;
    match pattern {
        "random-4k" => per_read(4096.0, 1.0) / mb,
        "random-64k" => per_read(65536.0, 64.0) / mb,
        _ => total / mb,
    }
}

/// The objects a run reads: a store behind the shaper and their paths.
struct Objects {
    /// A client of its own for each engine's run: a pooled connection
    /// belongs to the runtime that opened it, and an engine's runtime
    /// goes with the engine.
    connect: Connect,
    store: Arc<dyn ObjectStore>,
    paths: Vec<ObjectPath>,
    bytes_down: Arc<AtomicU64>,
}

/// The bytes of object `i` at `offset`: the large object is generated
/// bytes; object `i > 0` is shifted by `i`.
fn expect_ok(buf: &[u8], object: usize, offset: u64) -> Result<()> {
    match ahead::testdata::first_mismatch(buf, offset + object as u64) {
        None => Ok(()),
        Some(at) => Err(Error::msg(format!(
            "object {object}: wrong byte at {at} (a read at {offset})"
        ))),
    }
}

fn rss_peak_reset() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn rss_peak_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Runs one engine over a plan; (bytes read, seconds, latencies µs).
fn run_engine(
    engine: &str,
    objs: &Objects,
    plan: &Plan,
    cfg: &RemoteConfig,
    rt: &tokio::runtime::Runtime,
) -> Result<(u64, f64, Vec<f64>)> {
    let deadline = Duration::from_secs_f64(cfg.seconds);
    let fresh = Objects {
        connect: objs.connect.clone(),
        store: objs.connect.store()?,
        paths: objs.paths.clone(),
        bytes_down: objs.bytes_down.clone(),
    };
    let objs = &fresh;
    let used: std::collections::BTreeSet<usize> =
        plan.readers.iter().flatten().map(|r| r.0).collect();
    let lat = std::sync::Mutex::new(Vec::new());
    let bytes = AtomicU64::new(0);
    let failed: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
    let ahead_engine = if engine == "ahead" {
        let config = ahead::EngineConfig::default()
            .with_cache_bytes(cfg.cache_bytes)
            .with_max_readahead(cfg.max_readahead)
            .with_max_io(cfg.max_io);
        Some(ahead::Engine::new(config)?)
    } else {
        None
    };
    let files: Vec<Option<ahead::File>> = match &ahead_engine {
        Some(e) => objs
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| match used.contains(&i) {
                true => e
                    .open_object(objs.store.clone(), p.clone(), p.as_ref())
                    .map(Some),
                false => Ok(None),
            })
            .collect::<ahead::Result<_>>()?,
        None => Vec::new(),
    };
    // The objects' sizes for the BufReaders (a HEAD each), before the
    // clock starts, as ahead's opens are.
    let metas = if engine == "object_store-bufreader" {
        rt.block_on(async {
            let mut m = std::collections::HashMap::new();
            for &i in &used {
                let meta = objs.store.head(&objs.paths[i]).await;
                m.insert(i, meta.map_err(|e| Error::msg(e.to_string()))?);
            }
            Ok::<_, Error>(m)
        })?
    } else {
        Default::default()
    };
    let metas = Arc::new(metas);
    let started = Instant::now();
    std::thread::scope(|s| {
        for reads in &plan.readers {
            let (files, lat, bytes, failed, metas) = (&files, &lat, &bytes, &failed, &metas);
            s.spawn(move || {
                let mut mine = Vec::new();
                let r = match engine {
                    "ahead" => read_ahead(files, reads, plan.depth, started, deadline, &mut mine),
                    "naive" => {
                        read_naive(objs, reads, plan.depth, started, deadline, rt, &mut mine)
                    }
                    _ => read_bufreader(
                        objs, metas, reads, plan.depth, started, deadline, rt, &mut mine,
                    ),
                };
                match r {
                    Ok(n) => {
                        bytes.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                }
                lat.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e.context(engine));
    }
    let secs = started.elapsed().as_secs_f64();
    Ok((
        bytes.into_inner(),
        secs,
        lat.into_inner().unwrap_or_else(|p| p.into_inner()),
    ))
}

/// The report's percentile, 0 for no values (a pattern without latencies).
fn percentile(v: &mut [f64], q: f64) -> f64 {
    crate::report::percentile(v, q).unwrap_or(0.0)
}

/// The report's median, 0 for no values.
fn median(v: Vec<f64>) -> f64 {
    crate::report::median(v).unwrap_or(0.0)
}

/// How a run reaches the bucket: the endpoint (the shaper's), the bucket
/// and the credentials.
#[derive(Clone)]
struct Connect {
    endpoint: String,
    bucket: String,
    key: String,
    secret: String,
}

impl Connect {
    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        Ok(ahead_testkit::client::client_as(
            &self.endpoint,
            &self.bucket,
            &self.key,
            &self.secret,
        )?)
    }
}

/// Runs the benchmark against the embedded server (objects made under
/// `dir`) or the endpoint `cfg` names, behind the shaper, printing
/// progress on stderr; the rows.
pub fn run(cfg: &RemoteConfig, dir: &std::path::Path) -> Result<Vec<RemoteRow>> {
    // The embedded server, if that is where the objects are, lives as long
    // as the run.
    let (_embedded, upstream, mut direct) = connect(cfg, dir)?;
    let paths = put_objects(cfg, &direct)?;
    let shaper = Shaper::start(upstream, cfg.profile)?;
    direct.endpoint = shaper.endpoint();
    let objs = Objects {
        store: direct.store()?,
        connect: direct,
        paths,
        bytes_down: shaper.bytes_down(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for pattern in &cfg.patterns {
        let oracle = oracle(pattern, cfg);
        rows.extend(measure_pattern(pattern, oracle, cfg, &objs, &rt, dir)?);
        rows.push(RemoteRow {
            engine: "oracle".into(),
            pattern: pattern.clone(),
            mb_s: oracle,
            oracle_ratio: 1.0,
            fetched_ratio: 1.0,
            p50_us: 0.0,
            p99_us: 0.0,
            peak_rss_mib: 0.0,
            cpu_s: 0.0,
        });
    }
    Ok(rows)
}

/// The embedded server, kept running while it is held.
#[cfg(feature = "embedded-server")]
type Embedded = ahead_testkit::s3::Server;
/// Built without the embedded server: there is none to hold.
#[cfg(not(feature = "embedded-server"))]
type Embedded = std::convert::Infallible;

/// The embedded server, started with its objects under `dir`; its address
/// and how to reach it.
#[cfg(feature = "embedded-server")]
fn embedded(dir: &std::path::Path) -> Result<(Option<Embedded>, std::net::SocketAddr, Connect)> {
    let embedded = ahead_testkit::s3::Server::start(dir, &["bench"])?;
    let c = Connect {
        endpoint: embedded.endpoint(),
        bucket: "bench".into(),
        key: ahead_testkit::client::ACCESS_KEY.into(),
        secret: ahead_testkit::client::SECRET_KEY.into(),
    };
    eprintln!("embedded S3 server at {}", c.endpoint);
    let addr = embedded.addr();
    Ok((Some(embedded), addr, c))
}

/// Built without the embedded server: objects only at an `--endpoint`.
#[cfg(not(feature = "embedded-server"))]
fn embedded(_dir: &std::path::Path) -> Result<(Option<Embedded>, std::net::SocketAddr, Connect)> {
    Err(Error::msg(NO_SERVER))
}

/// What a build without the embedded server says where it would be needed.
pub const NO_SERVER: &str = "this ahead was built without the embedded S3 server \
     (cargo feature embedded-server): benchmark objects at a server of your own with --endpoint";

/// Where the objects are: the embedded server, started with its objects
/// under `dir` (returned, to keep it running), or the endpoint `cfg`
/// names; its address (for the shaper to forward to) and how to reach it.
fn connect(
    cfg: &RemoteConfig,
    dir: &std::path::Path,
) -> Result<(Option<Embedded>, std::net::SocketAddr, Connect)> {
    match &cfg.endpoint {
        None => embedded(dir),
        Some((url, bucket)) => {
            let var = |k: &str| {
                std::env::var(k)
                    .map_err(|_| Error::msg(format!("--endpoint needs {k} in the environment")))
            };
            let addr = endpoint_addr(url)?;
            let (key, secret) = match &cfg.credentials {
                Some(c) => c.clone(),
                None => (var("AWS_ACCESS_KEY_ID")?, var("AWS_SECRET_ACCESS_KEY")?),
            };
            let c = Connect {
                endpoint: url.clone(),
                bucket: bucket.clone(),
                key,
                secret,
            };
            eprintln!("S3 endpoint {url}, bucket {bucket}");
            Ok((None, addr, c))
        }
    }
}

/// The address of a plain-HTTP endpoint `http://HOST:PORT`, for the
/// shaper to forward to.
pub(crate) fn endpoint_addr(url: &str) -> Result<std::net::SocketAddr> {
    let hostport = url
        .strip_prefix("http://")
        .ok_or_else(|| Error::msg(format!("{url}: an endpoint is http://HOST:PORT")))?
        .trim_end_matches('/');
    std::net::ToSocketAddrs::to_socket_addrs(hostport)
        .map_err(|e| Error::msg(format!("{url}: {e}")))?
        .next()
        .ok_or_else(|| Error::msg(format!("{url}: no address")))
}

/// Puts the benchmark's objects (the big one, and the many small ones if
/// a pattern reads them) straight to the store: their paths.
fn put_objects(cfg: &RemoteConfig, direct: &Connect) -> Result<Vec<ObjectPath>> {
    eprintln!(
        "generating objects ({} and {} × {}) ...",
        ahead::units::format_size(cfg.object_size),
        cfg.many.0,
        ahead::units::format_size(cfg.many.1)
    );
    let put_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let writer = direct.store()?;
    let put = |key: &str, size: u64, shift: u64| -> Result<()> {
        let mut v = vec![0u8; size as usize];
        ahead::testdata::fill(&mut v, shift);
        let path = ObjectPath::from(key);
        put_rt
            .block_on(writer.put(&path, v.into()))
            .map_err(|e| Error::msg(format!("put {key}: {e}")))?;
        Ok(())
    };
    let mut paths = vec![ObjectPath::from("ahead-bench/big")];
    put("ahead-bench/big", cfg.object_size, 0)?;
    if cfg.patterns.iter().any(|p| p == "many-objects") {
        for i in 0..cfg.many.0 {
            let key = format!("ahead-bench/many/{i:04}");
            put(&key, cfg.many.1, 1 + i as u64)?;
            paths.push(ObjectPath::from(key));
        }
    }
    Ok(paths)
}

/// Every engine's repetitions of one pattern: one row each, the medians.
fn measure_pattern(
    pattern: &str,
    oracle: f64,
    cfg: &RemoteConfig,
    objs: &Objects,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
) -> Result<Vec<RemoteRow>> {
    let plan = plan(pattern, cfg)?;
    let mut rows = Vec::new();
    for engine in ENGINES {
        let mut reps = Vec::new();
        for rep in 0..cfg.reps {
            rss_peak_reset();
            let cpu0 = crate::workload::process_cpu_s().unwrap_or(0.0);
            let down0 = objs.bytes_down.load(Ordering::Relaxed);
            let (bytes, secs, mut lat) = if pattern == "copy" {
                let (bytes, secs) = copy::copy_engine(engine, objs, cfg, rt, dir)?;
                (bytes, secs, Vec::new())
            } else {
                run_engine(engine, objs, &plan, cfg, rt)?
            };
            let down = objs.bytes_down.load(Ordering::Relaxed) - down0;
            let mb_s = bytes as f64 / secs / 1e6;
            eprintln!(
                "  rep {}/{} {pattern:<14} {engine:<24} {mb_s:8.1} MB/s",
                rep + 1,
                cfg.reps
            );
            reps.push(RemoteRow {
                engine: engine.into(),
                pattern: pattern.to_owned(),
                mb_s,
                oracle_ratio: mb_s / oracle,
                fetched_ratio: down as f64 / bytes.max(1) as f64,
                p50_us: percentile(&mut lat, 0.5),
                p99_us: percentile(&mut lat, 0.99),
                peak_rss_mib: rss_peak_mib(),
                cpu_s: crate::workload::process_cpu_s().unwrap_or(0.0) - cpu0,
            });
        }
        let m = |f: fn(&RemoteRow) -> f64| median(reps.iter().map(f).collect());
        rows.push(RemoteRow {
            engine: engine.into(),
            pattern: pattern.to_owned(),
            mb_s: m(|r| r.mb_s),
            oracle_ratio: m(|r| r.oracle_ratio),
            fetched_ratio: m(|r| r.fetched_ratio),
            p50_us: m(|r| r.p50_us),
            p99_us: m(|r| r.p99_us),
            peak_rss_mib: m(|r| r.peak_rss_mib),
            cpu_s: m(|r| r.cpu_s),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_follows_from_the_profile() {
        let cfg = RemoteConfig::quick(NetProfile::S3);
        // One 4 KiB read at a time: 30 ms and 45 µs of transfer each.
        let r4 = oracle("random-4k", &cfg);
        assert!(
            (r4 - 4096.0 / (0.03 + 4096.0 / 9e7) / 1e6).abs() < 1e-9,
            "{r4}"
        );
        // 64 reads of 64 KiB in flight share 250 MB/s: 30 ms + 16.8 ms.
        let r64 = oracle("random-64k", &cfg);
        assert!((r64 - 89.67).abs() < 0.01, "{r64}");
        assert_eq!(oracle("seq", &cfg), 250.0);
    }

    #[test]
    fn profiles_parse_and_bad_ones_are_refused() {
        assert_eq!(NetProfile::parse("s3").unwrap(), NetProfile::S3);
        let p = NetProfile::parse("5,100,400").unwrap();
        assert_eq!(p.first_byte, Duration::from_millis(5));
        assert_eq!((p.per_conn, p.total), (100_000_000, 400_000_000));
        for bad in ["", "5,100", "x,1,1", "5,0,1", "-1,1,1", "5,1,1,1"] {
            assert!(NetProfile::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    #[cfg(feature = "embedded-server")]
    fn the_shaper_passes_every_byte_through() {
        let dir = tempfile::tempdir_in(ahead::testdata::scratch_root()).unwrap();
        let server = ahead_testkit::s3::Server::start(dir.path(), &["bkt"]).unwrap();
        let mut v = vec![0u8; 3 << 20];
        ahead::testdata::fill(&mut v, 7);
        server.put("bkt", "k", v).unwrap();
        let shaper = Shaper::start(server.addr(), NetProfile::LAN).unwrap();
        let store = ahead_testkit::s3::client(&shaper.endpoint(), "bkt").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt
            .block_on(store.get_range(&ObjectPath::from("k"), 1000..(2 << 20)))
            .unwrap();
        assert_eq!(got.len(), (2 << 20) - 1000);
        assert_eq!(ahead::testdata::first_mismatch(&got, 1007), None);
        assert!(shaper.bytes_down().load(Ordering::Relaxed) >= got.len() as u64);
    }
}
