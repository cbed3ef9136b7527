//! `ahead doctor`: which kernel features ahead found, on which file system
//! and device, and what it does about each.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use ahead::features::{self, Found};
use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};

/// Arguments of `ahead doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// A file, or a directory, on the file system to look at (default: the
    /// current directory); or an object's URL (s3://, http(s)://): its
    /// endpoint's latency and one connection's throughput, measured.
    path: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn found(f: &Found) -> Value {
    json!({"available": f.available, "why": f.why})
}

/// `ahead doctor URL`: the endpoint, measured through the object.
fn remote(url: &str, as_json: bool) -> Result<()> {
    let p = ahead::remote::probe(url).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    if as_json {
        outln!(
            "{}",
            json!({
                "url": url, "size": p.size, "etag": p.etag,
                "head_ms": ms(p.head), "first_byte_ms": ms(p.first_byte),
                "one_connection_mb_s": p.bytes_per_sec / 1e6, "probe_bytes": p.probe_bytes,
            })
        );
        return Ok(());
    }
    outln!(
        "object      {url}: {} bytes, ETag {}",
        p.size,
        p.etag.as_deref().unwrap_or("none")
    );
    outln!("HEAD        {:.1} ms", ms(p.head));
    outln!(
        "first byte  {:.1} ms (4 KiB GETs, median of 3)",
        ms(p.first_byte)
    );
    outln!(
        "throughput  {:.1} MB/s on one connection ({} in one GET, first byte excluded)",
        p.bytes_per_sec / 1e6,
        ahead::units::format_size(p.probe_bytes)
    );
    let bdp = p.bytes_per_sec * p.first_byte.as_secs_f64();
    let mib = 1048576.0;
    let one = mib / (p.first_byte.as_secs_f64() + mib / p.bytes_per_sec.max(1.0)) / 1e6;
    outln!(
        "so          1 MiB reads one at a time get {one:.1} MB/s; a connection stays busy with \
         about {} in flight",
        ahead::units::format_size(bdp as u64)
    );
    Ok(())
}

/// What `ahead doctor` found about a local path.
struct Probes {
    path: PathBuf,
    kernel: String,
    uring: Found,
    ops: Vec<(&'static str, bool)>,
    nowait: &'static Found,
    nowait_here: Found,
    dontcache: Found,
    direct: Found,
    align: Option<(u32, u32)>,
    cachestat: Found,
    fs: String,
    device: Option<features::Device>,
    limits: Vec<String>,
    huge: features::HugePageSetting,
    /// The readahead window the engine chose reading the file, or why it
    /// was not tried.
    window: std::result::Result<(u64, ahead::ReadaheadTuning), String>,
}

/// The least file `ahead doctor` reads to choose a window: a few samples
/// of the tuner at each size ([`ahead::ra::tune::WindowTuner`]).
const WINDOW_PROBE_MIN: u64 = 64 << 20;
/// The most it reads: enough for the tuner to reach 16 MiB windows and
/// settle at the defaults (about 700 MiB: each doubling is measured
/// between two samples of the window before it).
const WINDOW_PROBE_MAX: u64 = 1 << 30;

/// Reads up to [`WINDOW_PROBE_MAX`] of `file` forward through an engine
/// with the defaults and the window tuned (Direct mode) and returns the
/// bytes read and what the tuner chose.
fn window_probe(
    path: &std::path::Path,
    size: u64,
) -> std::result::Result<(u64, ahead::ReadaheadTuning), String> {
    if size < WINDOW_PROBE_MIN {
        return Err(format!(
            "not tried: give a file of at least {} (this one is {}); the engine chooses its window by reading one",
            ahead::units::format_size(WINDOW_PROBE_MIN),
            ahead::units::format_size(size)
        ));
    }
    let config = ahead::EngineConfig::default().with_readahead_tuning(true);
    let engine = ahead::Engine::new(config).map_err(|e| e.to_string())?;
    let file = engine.open(path).map_err(|e| e.to_string())?;
    let want = size.min(WINDOW_PROBE_MAX);
    let mut buf = vec![0u8; 128 << 10];
    let mut at = 0;
    while at < want {
        match file.read_at(&mut buf, at).map_err(|e| e.to_string())? {
            0 => break,
            n => at += n as u64,
        }
    }
    let tuning = engine
        .readahead_tuning()
        .ok_or("not tuned: the cache holds no larger window")?;
    Ok((at, tuning))
}

/// Runs `ahead doctor`.
pub fn run(args: DoctorArgs) -> Result<()> {
    if let Some(url) = args
        .path
        .as_ref()
        .and_then(|p| p.to_str())
        .filter(|s| ahead::remote::is_url(s))
    {
        return remote(url, args.json);
    }
    let p = probe(args.path.unwrap_or_else(|| PathBuf::from(".")))?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&json_of(&p))?);
    } else {
        out!("{}", text_of(&p));
    }
    Ok(())
}

/// Every probe, on `path`'s file system.
fn probe(path: PathBuf) -> Result<Probes> {
    let meta = std::fs::metadata(&path).with_context(|| format!("{}", path.display()))?;
    // Probes that need a regular file use PATH if it is one, else an
    // unnamed temporary file in PATH (O_TMPFILE: nothing is left behind).
    let (file, probe_note) = if meta.is_file() {
        (
            Some(std::fs::File::open(&path).with_context(|| format!("{}", path.display()))?),
            None,
        )
    } else {
        match tempfile::tempfile_in(&path) {
            Ok(mut f) => {
                use std::io::Write as _;
                let _ = f.write_all(&[0u8; 8192]);
                (Some(f), None)
            }
            Err(e) => (None, Some(format!("no probe file could be made here: {e}"))),
        }
    };
    let dir = std::fs::File::open(if meta.is_file() {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
    } else {
        &path
    })?;
    let not_probed = || Found {
        available: false,
        why: probe_note.clone().unwrap_or_default(),
    };
    let (uring, ops) = features::io_uring();
    let (direct, align) = file
        .as_ref()
        .map_or_else(|| (not_probed(), None), features::direct_io);
    let window = if meta.is_file() {
        window_probe(&path, meta.len())
    } else {
        Err(format!(
            "not tried: name a file of at least {} on this file system to see the window the engine chooses reading it",
            ahead::units::format_size(WINDOW_PROBE_MIN)
        ))
    };
    Ok(Probes {
        kernel: features::kernel_release().unwrap_or_else(|| "unknown".into()),
        uring,
        ops,
        nowait: features::nowait(),
        nowait_here: file.as_ref().map_or_else(not_probed, features::nowait_on),
        dontcache: file.as_ref().map_or_else(not_probed, features::dontcache),
        direct,
        align,
        cachestat: file.as_ref().map_or_else(not_probed, features::cachestat),
        fs: features::filesystem(dir.as_fd()),
        device: features::device_of(meta.dev()),
        limits: features::cgroup_io_limits(),
        huge: features::huge_pages(),
        window,
        path,
    })
}

/// `ahead doctor --json`'s object.
fn json_of(p: &Probes) -> Value {
    json!({
        "path": p.path.display().to_string(),
        "kernel": p.kernel,
        "io_uring": {
            "available": p.uring.available,
            "why": p.uring.why,
            "ops": p.ops.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
        },
        "rwf_nowait": found(p.nowait),
        "rwf_nowait_here": found(&p.nowait_here),
        "rwf_dontcache": found(&p.dontcache),
        "o_direct": {
            "available": p.direct.available,
            "why": p.direct.why,
            "memory_alignment": p.align.map(|a| a.0),
            "offset_alignment": p.align.map(|a| a.1),
        },
        "cachestat": found(&p.cachestat),
        "filesystem": p.fs,
        "device": p.device.as_ref().map(|d| json!({
            "name": d.name,
            "read_ahead_kb": d.read_ahead_kb,
            "max_sectors_kb": d.max_sectors_kb,
            "scheduler": d.scheduler,
            "rotational": d.rotational,
        })),
        "cgroup_io_limits": p.limits,
        "transparent_huge_pages": p.huge.enabled,
        "free_page_reporting_order": p.huge.reporting_order,
        "readahead_window": match &p.window {
            Ok((read, t)) => json!({
                "window": t.window, "start": t.start, "ceiling": t.ceiling,
                "settled": t.settled, "bytes_read": read,
                "steps": t.steps.iter().map(|s| json!({"window": s.window, "mb_s": s.bytes_per_sec / 1e6, "against_mb_s": s.against / 1e6, "late_per_window": s.late, "kept": s.kept})).collect::<Vec<_>>(),
            }),
            Err(why) => json!({"why": why}),
        },
    })
}

/// `ahead doctor`'s text: each finding, and what ahead does about it.
fn text_of(p: &Probes) -> String {
    let yes = |f: &Found| if f.available { "yes" } else { "no" };
    let mut out = String::new();
    let mut line = |what: &str, value: String, action: &str| {
        out += &format!("{what:<16} {value}\n{:<16} → {action}\n", "");
    };
    line("kernel", p.kernel.clone(), "features are probed at run time; nothing is assumed from the version except RWF_NOWAIT (below 5.11: off)");
    let supported: Vec<&str> = p.ops.iter().filter(|o| o.1).map(|o| o.0).collect();
    line(
        "io_uring",
        format!(
            "{} ({}); ops: {}",
            yes(&p.uring),
            p.uring.why,
            supported.join(", ")
        ),
        if p.uring.available {
            "Direct mode's reads and Buffered misses go to an io_uring backend (--backend uring|pool|auto)"
        } else {
            "the thread-pool backend (preadv) is used instead"
        },
    );
    line(
        "RWF_NOWAIT",
        format!(
            "{} ({}); here: {} ({})",
            yes(p.nowait),
            p.nowait.why,
            yes(&p.nowait_here),
            p.nowait_here.why
        ),
        if p.nowait_here.available {
            "Buffered mode serves cached reads inline without blocking"
        } else {
            "Buffered mode sends every read to a blocking read (no fast path)"
        },
    );
    line(
        "RWF_DONTCACHE",
        format!("{} ({})", yes(&p.dontcache), p.dontcache.why),
        if p.dontcache.available {
            "Uncached mode and copy read with it: pages they bring in leave with them"
        } else {
            "Uncached mode and copy use mincore before and DONTNEED after, of only the pages they brought in"
        },
    );
    line(
        "O_DIRECT",
        match p.align {
            Some((m, o)) => format!(
                "{} ({}); alignment: memory {m}, offset {o}",
                yes(&p.direct),
                p.direct.why
            ),
            None => format!("{} ({})", yes(&p.direct), p.direct.why),
        },
        if p.direct.available {
            "Direct mode reads past the kernel's cache into ahead's own"
        } else {
            "Direct mode falls back to buffered descriptors (with a warning); Buffered and Uncached work"
        },
    );
    line(
        "cachestat",
        format!("{} ({})", yes(&p.cachestat), p.cachestat.why),
        if p.cachestat.available {
            "stat/evict/warm and copy count cached pages with it"
        } else {
            "mincore is used instead (and refused where it would lie: files you neither own nor may write)"
        },
    );
    line("file system", p.fs.clone(), "");
    match &p.device {
        Some(d) => line(
            "device",
            format!(
                "{}: read_ahead_kb {}, max_sectors_kb {}, scheduler {}, rotational {}",
                d.name,
                d.read_ahead_kb.map_or("?".into(), |v| v.to_string()),
                d.max_sectors_kb.map_or("?".into(), |v| v.to_string()),
                d.scheduler.clone().unwrap_or_else(|| "?".into()),
                d.rotational.map_or("?".into(), |v| v.to_string()),
            ),
            "copy sizes its chunks from max_sectors_kb; the kernel's own readahead (read_ahead_kb) serves Buffered forward streams",
        ),
        None => line("device", "none (not a block device's file system)".into(), "no device queue to tune"),
    }
    line(
        "cgroup I/O limit",
        if p.limits.is_empty() {
            "none".into()
        } else {
            p.limits.join("; ")
        },
        if p.limits.is_empty() {
            "nothing limits this process's I/O"
        } else {
            "every figure measured here is capped by these limits"
        },
    );
    let h = &p.huge;
    let on_request = matches!(h.enabled.as_deref(), Some("always" | "madvise"));
    line(
        "huge pages",
        format!(
            "transparent huge pages {}; free page reporting {}",
            h.enabled.as_deref().unwrap_or("absent"),
            h.reporting_order.map_or("off".into(), |o| format!(
                "on (free blocks of {} handed back to the host)",
                ahead::units::format_size(4096u64 << o)
            )),
        ),
        match (on_request, h.reporting_order) {
            (false, _) => "the cache stays in 4 KiB pages",
            (true, None) => "the cache's huge pages are decided at its first read (--huge-pages auto); they are likely to be kept",
            (true, Some(_)) => "the cache's huge pages are decided at its first read (--huge-pages auto); here a huge page is often memory the host must supply again, and auto then keeps small pages",
        },
    );
    (out + &readahead_lines(p)).replace("\n                 → \n", "\n")
}

/// `ahead doctor`'s lines on the readahead window the device wants.
fn readahead_lines(p: &Probes) -> String {
    let (value, action) = match &p.window {
        Ok((read, t)) => (
            format!(
                "read {} of the file forward: window {}",
                ahead::units::format_size(*read),
                crate::read::tuning_text(t)
            ),
            "with --tune-readahead Direct mode's windows grow so in each process; or set the window with --max-readahead (the default, 4 MiB, costs the least CPU)",
        ),
        Err(why) => (
            why.clone(),
            "Direct mode's windows are 4 MiB (--max-readahead), grown where readers wait with --tune-readahead",
        ),
    };
    format!("{:<16} {value}\n{:<16} → {action}\n", "readahead", "")
}
