//! `ahead bench copy`: `ahead copy` against `cp SRC DST && sync` and
//! nbdcopy on a half-cached file, a sparse file, and a copy killed with
//! SIGKILL and resumed. Every copy runs as its own process, timed from
//! outside; the page cache is set up the same way before each one and
//! looked at after it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::Table;
use crate::{Error, Result};
use ahead::residency;
use ahead::units::{format_size, parse_size};
use clap::Args;
use serde_json::{json, Value};

/// Arguments of `ahead bench copy`.
#[derive(Args, Debug)]
pub struct CopyBenchArgs {
    /// Size of the generated source (its first half is cached before each
    /// copy).
    #[arg(long, default_value = "2g", value_parser = parse_size)]
    size: u64,
    /// Size of the sparse file (three 64 MiB data extents).
    #[arg(long, default_value = "4g", value_parser = parse_size)]
    sparse_size: u64,
    /// Where to put the files (default: the system's temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Repetitions per engine (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Small files, one repetition: a smoke test, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Write every measured row as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Cap the half-cached copies' reads (root): cloud (200 MiB/s, 5000
    /// IOPS), small-cloud, fast (400 MiB/s, 20000 IOPS), BPS,IOPS, or none
    /// (the disk as it is, the default). Writes are not capped.
    #[arg(long, default_value = "none")]
    device: String,
}

fn cached(path: &Path) -> Option<u64> {
    let f = fs::File::open(path).ok()?;
    residency::of_range(&f, 0, u64::MAX)
        .ok()?
        .known()
        .map(|r| r.cached)
}

fn sync_all() {
    rustix::fs::sync();
}

fn sh(cmd: &mut Command) -> Result<Duration> {
    let started = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::from(e).context(format!("run {cmd:?}")))?;
    let took = started.elapsed();
    if !out.status.success() {
        return Err(Error::msg(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(took)
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn median(v: Vec<f64>) -> f64 {
    crate::report::median(v).unwrap_or(f64::NAN)
}

fn blake3(path: &Path) -> Result<String> {
    Ok(ahead::copy::checksum_file(path, &Default::default())?)
}

/// The engines of the half-cached comparison, as shell-free commands.
fn engine_cmd(engine: &str, exe: &Path, src: &Path, dst: &Path) -> Command {
    match engine {
        "cp+sync" => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("cp -- \"$1\" \"$2\" && sync")
                .arg("sh")
                .arg(src)
                .arg(dst);
            c
        }
        "nbdcopy" => {
            let mut c = Command::new("nbdcopy");
            c.arg("--flush").arg(src).arg(dst);
            c
        }
        _ => {
            let mut c = Command::new(exe);
            c.args(["copy", "--progress", "none"]).arg(src).arg(dst);
            c
        }
    }
}

/// Runs `ahead bench copy`.
pub fn run(args: CopyBenchArgs) -> Result<()> {
    let exe =
        std::env::current_exe().map_err(|e| Error::from(e).context("find the ahead binary"))?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    let (size, sparse_size, extent, reps) = if args.quick {
        (
            args.size.min(64 << 20),
            args.sparse_size.min(256 << 20),
            4 << 20,
            1,
        )
    } else {
        (args.size, args.sparse_size, 64 << 20, args.reps.max(1))
    };
    if sparse_size < 3 * extent {
        return Err(Error::msg(format!(
            "--sparse-size: at least {}",
            format_size(3 * extent)
        )));
    }
    // A new private directory (0700, unpredictable name, made with
    // O_EXCL by tempfile): nothing another user planted in `dir` is used,
    // and everything in it goes when the bench ends.
    let work = crate::workdir::private_dir(&dir, "ahead-bench-copy-")?;
    let src = work.path().join("src");
    let dst = work.path().join("dst");
    let sparse = work.path().join("sparse");
    let sparse_dst = work.path().join("sparse-dst");
    // The copies' journals, for the kill-and-resume scenario to watch.
    let state = work.path().join("state");
    fs::create_dir(&state)?;
    eprintln!(
        "generating a {} source in {} ...",
        format_size(size),
        dir.display()
    );
    ahead::testdata::write_file(&src, size)
        .map_err(|e| Error::from(e).context(format!("write {}", src.display())))?;
    let src_sum = blake3(&src)?;
    let started = Instant::now();
    let mut rows: Vec<Value> = Vec::new();

    // 1. Half-cached source: time, residency, checksum.
    let mut engines = vec!["ahead", "cp+sync"];
    if have("nbdcopy") {
        engines.push("nbdcopy");
    } else {
        eprintln!("nbdcopy not found (Debian: libnbd-bin): its row is skipped");
    }
    let pages = size.div_ceil(residency::page_size());
    let profile = crate::device::Profile::parse(&args.device)?;
    let copy = CopyJob {
        exe: &exe,
        src: &src,
        dst: &dst,
        size,
        reps,
    };
    rows.extend(half_cached(&copy, &engines, profile, &src_sum)?);

    // 2. Sparse source: three data extents in a large hole.
    rows.extend(sparse_copies(
        &exe,
        &sparse,
        &sparse_dst,
        sparse_size,
        extent,
        reps,
    )?);

    // 3. kill -9 in the middle, then --resume.
    // A small quick-mode copy could finish before it is killed: slow it.
    let limit = args.quick.then_some("16m");
    rows.push(kill_and_resume(
        &exe, &src, &dst, &state, &src_sum, size, limit,
    )?);
    let _ = fs::remove_file(&dst);

    print!("{}", table(&rows, &engines));
    println!(
        "source {} ({} pages), half-cached copies' reads capped: {}; sparse {} with three {} extents, {reps} repetition(s), medians; {:.0} s in all",
        format_size(size),
        pages,
        profile.map_or_else(
            || "no (the disk as it is)".to_string(),
            |p| format!("{} ({} MiB/s, {} IOPS)", p.name, p.bps >> 20, p.iops)
        ),
        format_size(sparse_size),
        format_size(extent),
        started.elapsed().as_secs_f64()
    );
    if let Some(j) = &args.json {
        fs::write(j, serde_json::to_string_pretty(&rows)? + "\n")
            .map_err(|e| Error::from(e).context(format!("write {}", j.display())))?;
    }
    Ok(())
}

/// What every scenario's copies share: the binary, the source and the
/// destination, the source's size, the repetitions.
struct CopyJob<'a> {
    exe: &'a Path,
    src: &'a Path,
    dst: &'a Path,
    size: u64,
    reps: usize,
}

/// The half-cached scenario: each engine copies a source whose first half
/// is cached, on the capped device if `profile` says so; time, residency
/// before and after, checksum. Its rows.
fn half_cached(
    copy: &CopyJob<'_>,
    engines: &[&str],
    profile: Option<crate::device::Profile>,
    src_sum: &str,
) -> Result<Vec<Value>> {
    let CopyJob {
        exe,
        src,
        dst,
        size,
        reps,
    } = *copy;
    let pages = size.div_ceil(residency::page_size());
    let mut rows = Vec::new();
    // Every copy below is a child of this process, in its cgroup.
    let throttle = match profile {
        Some(p) => Some(
            crate::device::throttle(p, &[src])
                .map_err(|e| Error::msg(format!("--device {}: {e}", p.name)))?,
        ),
        None => None,
    };
    for rep in 0..reps {
        let mut order = engines.to_vec();
        order.rotate_left(rep % engines.len());
        for engine in order {
            let _ = fs::remove_file(dst);
            sync_all();
            let f = fs::File::open(src)?;
            residency::evict(&f, 0, 0)?;
            residency::warm(&f, 0, size / 2)?;
            let before = cached(src);
            let took = sh(&mut engine_cmd(engine, exe, src, dst))?;
            let after = cached(src);
            let dst_after = cached(dst);
            let same = blake3(dst)? == src_sum;
            eprintln!(
                "  rep {}/{reps} half-cached {engine:<8} {:>7.2} s  src {} -> {} pages, dst {} pages, checksum {}",
                rep + 1,
                took.as_secs_f64(),
                opt(before),
                opt(after),
                opt(dst_after),
                if same { "equal" } else { "DIFFERENT" }
            );
            rows.push(json!({
                "scenario": "half-cached",
                "device": profile.map(|p| p.name),
                "engine": engine,
                "rep": rep,
                "bytes": size,
                "elapsed_s": took.as_secs_f64(),
                "mb_s": size as f64 / took.as_secs_f64() / 1e6,
                "src_pages": pages,
                "src_cached_pages_before": before,
                "src_cached_pages_after": after,
                "dst_cached_pages_after": dst_after,
                "checksum_equal": same,
            }));
        }
    }
    let _ = fs::remove_file(dst);
    drop(throttle);

    Ok(rows)
}

/// The sparse scenario: three data extents of `extent` bytes in a hole of
/// `sparse_size`; time, blocks allocated, checksum. Its rows.
fn sparse_copies(
    exe: &Path,
    sparse: &Path,
    sparse_dst: &Path,
    sparse_size: u64,
    extent: u64,
    reps: usize,
) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    {
        let f = fs::File::create(sparse)?;
        f.set_len(sparse_size)?;
        let mut buf = vec![0u8; extent as usize];
        for at in [0, sparse_size / 2, sparse_size - extent] {
            ahead::testdata::fill(&mut buf, at);
            rustix::io::pwrite(&f, &buf, at)?;
        }
        f.sync_all()?;
        residency::evict(&f, 0, 0)?;
    }
    let sparse_sum = blake3(sparse)?;
    let src_alloc = fs::metadata(sparse)?.blocks() * 512;
    for rep in 0..reps {
        for engine in ["ahead", "cp+sync"] {
            let _ = fs::remove_file(sparse_dst);
            sync_all();
            residency::evict(&fs::File::open(sparse)?, 0, 0)?;
            let took = sh(&mut engine_cmd(engine, exe, sparse, sparse_dst))?;
            let alloc = fs::metadata(sparse_dst)?.blocks() * 512;
            let same = blake3(sparse_dst)? == sparse_sum;
            eprintln!(
                "  rep {}/{reps} sparse {engine:<8} {:>7.2} s  allocated {} (source {}), checksum {}",
                rep + 1,
                took.as_secs_f64(),
                format_size(alloc),
                format_size(src_alloc),
                if same { "equal" } else { "DIFFERENT" }
            );
            rows.push(json!({
                "scenario": "sparse",
                "engine": engine,
                "rep": rep,
                "bytes": sparse_size,
                "elapsed_s": took.as_secs_f64(),
                "src_allocated": src_alloc,
                "dst_allocated": alloc,
                "checksum_equal": same,
            }));
        }
    }
    let _ = fs::remove_file(sparse_dst);
    let _ = fs::remove_file(sparse);

    Ok(rows)
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// Starts a copy of `src` to `dst` in 1 MiB chunks and kills it (SIGKILL)
/// once its journal shows a quarter of the `chunks` done: whether it was
/// killed, and the chunks its journal had then.
fn start_and_kill(
    exe: &Path,
    src: &Path,
    dst: &Path,
    state: &Path,
    chunks: u64,
    bwlimit: Option<&str>,
) -> Result<(bool, usize)> {
    // Its journal, in the private state directory the copies are given.
    let journal_lines = || {
        fs::read_dir(state.join("ahead/copy")).map_or(0, |rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| fs::read_to_string(e.path()).map_or(0, |t| t.lines().count()))
                .max()
                .unwrap_or(0)
        })
    };
    let mut first = Command::new(exe);
    first.env("XDG_STATE_HOME", state);
    first.args(["copy", "--progress", "none", "--chunk", "1m"]);
    if let Some(limit) = bwlimit {
        first.args(["--bwlimit", limit]);
    }
    let mut child = first
        .arg(src)
        .arg(dst)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut done_lines = 0;
    while child.try_wait()?.is_none() {
        done_lines = journal_lines().saturating_sub(1);
        if done_lines as u64 >= chunks / 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill()?; // SIGKILL
    let status = child.wait()?;
    let killed = !status.success();
    if !killed {
        return Err(Error::msg(
            "the copy finished before it could be killed; use a larger --size",
        ));
    }
    Ok((killed, done_lines))
}

/// Starts a copy of the cold source, SIGKILLs it once a quarter is done,
/// checks that no destination exists, resumes it, and checks the result.
fn kill_and_resume(
    exe: &Path,
    src: &Path,
    dst: &Path,
    state: &Path,
    sum: &str,
    size: u64,
    bwlimit: Option<&str>,
) -> Result<Value> {
    let _ = fs::remove_file(dst);
    residency::evict(&fs::File::open(src)?, 0, 0)?;
    let name = dst.file_name().expect("a file name").to_string_lossy();
    let parent = dst.parent().expect("a directory");
    // The copy's temporary file, `.NAME.ahead-TOKEN.part`.
    let tmp_exists = || {
        fs::read_dir(parent).is_ok_and(|rd| {
            rd.filter_map(|e| e.ok()).any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(&format!(".{name}.ahead-")) && n.ends_with(".part")
            })
        })
    };
    let chunk: u64 = 1 << 20;
    let chunks = size.div_ceil(chunk);
    let (killed, done_lines) = start_and_kill(exe, src, dst, state, chunks, bwlimit)?;
    let dst_after_kill = dst.exists();
    let tmp_after_kill = tmp_exists();

    let started = Instant::now();
    let mut child = Command::new(exe)
        .env("XDG_STATE_HOME", state)
        .args([
            "copy",
            "--progress",
            "none",
            "--chunk",
            "1m",
            "--resume",
            "--verify",
            "--json",
        ])
        .arg(src)
        .arg(dst)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut first_seen_size = None;
    while child.try_wait()?.is_none() {
        if first_seen_size.is_none() {
            if let Ok(m) = fs::metadata(dst) {
                first_seen_size = Some(m.len());
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The rename may come within a millisecond of the exit: then DST is
    // first seen now.
    if first_seen_size.is_none() {
        first_seen_size = fs::metadata(dst).ok().map(|m| m.len());
    }
    let out = child.wait_with_output()?;
    let took = started.elapsed();
    if !out.status.success() {
        return Err(Error::msg(format!(
            "resume failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let report: Value = serde_json::from_slice(&out.stdout)?;
    let same = blake3(dst)? == sum;
    let row = json!({
        "scenario": "kill-resume",
        "engine": "ahead",
        "bytes": size,
        "killed": killed,
        "chunks_done_at_kill": done_lines,
        "chunks": chunks,
        "dst_existed_after_kill": dst_after_kill,
        "tmp_existed_after_kill": tmp_after_kill,
        "dst_first_seen_size": first_seen_size,
        "resumed_bytes": report["resumed_bytes"],
        "resume_elapsed_s": took.as_secs_f64(),
        "checksum_equal": same,
        "resume_checksum": report["checksum"],
    });
    eprintln!("  kill -9 + resume: {row}");
    Ok(row)
}

fn table(rows: &[Value], engines: &[&str]) -> String {
    let pick = |scenario: &str, engine: &str| -> Vec<&Value> {
        rows.iter()
            .filter(|r| r["scenario"] == scenario && r["engine"] == engine)
            .collect()
    };
    let med = |rs: &[&Value], k: &str| median(rs.iter().filter_map(|r| r[k].as_f64()).collect());
    let mut out = String::new();
    let mut t = Table::new(&[
        "half-cached",
        "elapsed s",
        "MB/s",
        "÷ cp+sync",
        "÷ nbdcopy",
        "src cached before→after",
        "Δ src % (per rep)",
        "dst cached %",
        "checksums",
    ]);
    let base = |e: &str| med(&pick("half-cached", e), "elapsed_s");
    for &e in engines {
        let rs = pick("half-cached", e);
        if rs.is_empty() {
            continue;
        }
        let el = med(&rs, "elapsed_s");
        let pages = rs[0]["src_pages"].as_f64().unwrap_or(1.0);
        let before = med(&rs, "src_cached_pages_before");
        let after = med(&rs, "src_cached_pages_after");
        let dst = med(&rs, "dst_cached_pages_after");
        let ratio = |b: f64| {
            if b.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}", el / b)
            }
        };
        t.row(vec![
            e.to_string(),
            format!("{el:.2}"),
            format!("{:.0}", med(&rs, "mb_s")),
            ratio(base("cp+sync")),
            ratio(base("nbdcopy")),
            format!("{before:.0}→{after:.0}"),
            {
                // Per repetition, then the median and the worst: medians of
                // the two columns separately would mix repetitions.
                let d: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| {
                        let b = r["src_cached_pages_before"].as_f64()?;
                        let a = r["src_cached_pages_after"].as_f64()?;
                        Some(100.0 * (a - b) / pages)
                    })
                    .collect();
                let worst = d
                    .iter()
                    .copied()
                    .fold(0.0f64, |w, x| if x.abs() > w.abs() { x } else { w });
                format!("{:+.2} (worst {worst:+.2})", median(d))
            },
            format!("{:.2}", 100.0 * dst / pages),
            if rs.iter().all(|r| r["checksum_equal"] == true) {
                "equal".into()
            } else {
                "DIFFERENT".into()
            },
        ]);
    }
    out += &t.render();
    let mut t = Table::new(&[
        "sparse",
        "elapsed s",
        "dst allocated",
        "src allocated",
        "dst ÷ src",
        "checksums",
    ]);
    for e in ["ahead", "cp+sync"] {
        let rs = pick("sparse", e);
        if rs.is_empty() {
            continue;
        }
        let (a, s) = (med(&rs, "dst_allocated"), med(&rs, "src_allocated"));
        t.row(vec![
            e.to_string(),
            format!("{:.2}", med(&rs, "elapsed_s")),
            format_size(a as u64),
            format_size(s as u64),
            format!("{:.3}", a / s),
            if rs.iter().all(|r| r["checksum_equal"] == true) {
                "equal".into()
            } else {
                "DIFFERENT".into()
            },
        ]);
    }
    out += "\n";
    out += &t.render();
    if let Some(r) = rows.iter().find(|r| r["scenario"] == "kill-resume") {
        out += &format!(
            "\nkill -9 after {}/{} chunks: DST existed after the kill: {}; resumed {} bytes in {:.2} s; DST first seen at {} bytes; checksums {}\n",
            r["chunks_done_at_kill"],
            r["chunks"],
            r["dst_existed_after_kill"],
            r["resumed_bytes"],
            r["resume_elapsed_s"].as_f64().unwrap_or(f64::NAN),
            r["dst_first_seen_size"],
            if r["checksum_equal"] == true { "equal" } else { "DIFFERENT" }
        );
    }
    out
}
