//! `ahead run` and `ahead trace` with real programs: what the program sees
//! is unchanged (bytes, return values, positions, errors, exit status,
//! signals), backward reads are hinted, the uncached mode leaves the cache
//! as it was, and a trace replays in the simulator.

mod common;

use common::{ahead, gen, s, scratch, stderr};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ahead_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ahead"));
    c.args(args);
    c
}

fn out(c: &mut Command) -> Output {
    c.output().expect("run")
}

/// The first of `names` found in PATH.
fn program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

/// The first of `names` found in PATH; where there is none, the test says
/// it is skipped for want of `what`.
fn need(names: &[&str], what: &str) -> Option<PathBuf> {
    let found = program(names);
    if found.is_none() {
        eprintln!("SKIP: no {what}");
    }
    found
}

fn stats_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `ahead run --stats STATS -- CMD…`, which must succeed; its output and
/// the statistics' lines.
fn run_with_stats(stats: &Path, cmd: &[&str]) -> (std::process::Output, Vec<serde_json::Value>) {
    let mut args = vec!["run", "--stats", s(stats), "--"];
    args.extend_from_slice(cmd);
    let o = out(&mut ahead_cmd(&args));
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = stats_lines(stats);
    (o, lines)
}

fn stats_of<'a>(lines: &'a [serde_json::Value], file: &Path) -> &'a serde_json::Value {
    // The preload names files as /proc/self/fd shows them: canonical.
    let file = std::fs::canonicalize(file).unwrap();
    lines
        .iter()
        .find(|l| l["file"] == s(&file))
        .unwrap_or_else(|| panic!("no stats for {}: {lines:?}", file.display()))
}

#[test]
fn exit_status_and_signals_pass_through() {
    for mode in ["--readahead", "--uncached", "--off"] {
        let o = out(&mut ahead_cmd(&["run", mode, "--", "sh", "-c", "exit 7"]));
        assert_eq!(o.status.code(), Some(7), "{mode}: {}", stderr(&o));
        let o = out(&mut ahead_cmd(&[
            "run",
            mode,
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ]));
        assert_eq!(o.status.signal(), Some(15), "{mode}: {:?}", o.status);
    }
    let o = ahead(&["run", "--", "/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/program"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_static_program_is_named_and_still_runs() {
    // Debian's ldconfig is static-pie: no loader, so no preload.
    let Some(ldconfig) = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
    else {
        eprintln!("SKIP: no ldconfig to stand for a static program");
        return;
    };
    let o = out(&mut ahead_cmd(&["run", "--", s(ldconfig), "-p"]));
    let err = stderr(&o);
    if !err.contains("statically linked") {
        eprintln!("SKIP: {} is dynamically linked here", ldconfig.display());
        return;
    }
    assert!(o.status.success(), "{err}");
    assert!(!o.stdout.is_empty());
}

/// The probe's report of every read-family call, run plainly and under
/// each mode: all must be identical.
#[test]
fn a_program_sees_the_same_bytes_positions_and_errors_in_every_mode() {
    let Some(python) = need(&["python3"], "python3 to drive the read family") else {
        return;
    };
    let dir = scratch();
    let file = gen(dir.path(), "data", 5_000_000);
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/probe.py");
    let run = |prefix: &[&str]| {
        let mut c = if prefix.is_empty() {
            Command::new(&python)
        } else {
            let mut c = ahead_cmd(prefix);
            c.arg(&python);
            c
        };
        let o = out(c.arg(&probe).arg(&file).arg(dir.path()));
        assert!(o.status.success(), "{prefix:?}: {}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let plain = run(&[]);
    assert!(plain.contains("pread @ -1 -> EINVAL"), "{plain}");
    assert!(plain.contains("copy_file_range pos -> 300000"), "{plain}");
    for mode in [
        &["run", "--off", "--"][..],
        &["run", "--readahead", "--"],
        &["run", "--uncached", "--"],
        &["run", "--uncached", "--no-dontcache", "--"],
        &["trace", "-o", s(&dir.path().join("t.trace")), "--"],
    ] {
        let got = run(mode);
        for (a, b) in plain.lines().zip(got.lines()) {
            assert_eq!(a, b, "{mode:?}");
        }
        assert_eq!(plain.lines().count(), got.lines().count(), "{mode:?}");
    }
}

/// A text file of numbered lines, `size` bytes.
fn lines_file(dir: &Path, size: usize) -> PathBuf {
    let mut text = String::with_capacity(size + 100);
    let mut i = 0u64;
    while text.len() < size {
        text.push_str(&format!("line {i} of a file read backwards by tac\n"));
        i += 1;
    }
    let p = dir.join("lines.txt");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn tac_gets_backward_hints_and_cat_none() {
    let Some(tac) = need(&["tac"], "tac") else {
        return;
    };
    let dir = scratch();
    let file = lines_file(dir.path(), 16 << 20);
    let plain = out(Command::new(&tac).arg(&file));
    assert!(plain.status.success());
    // Cold again, as a file tac is run on would be: the hints are for
    // pages the kernel does not have.
    let f = std::fs::File::open(&file).unwrap();
    f.sync_all().unwrap();
    ahead::residency::evict(&f, 0, 0).unwrap();
    let stats = dir.path().join("stats.json");
    let (o, lines) = run_with_stats(&stats, &[s(&tac), s(&file)]);
    assert!(
        o.stdout == plain.stdout,
        "tac's output differs under ahead run"
    );
    let st = stats_of(&lines, &file);
    assert!(st["hints"].as_u64().unwrap() > 0, "{st}");
    // tac reads every page it was hinted (at most the last window's worth
    // below the start of the file is not).
    let accuracy = st["accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.9, "{st}");
    // Every byte was read (tac reads one block twice, so a little more).
    assert!(
        st["bytes"].as_u64().unwrap() >= std::fs::metadata(&file).unwrap().len(),
        "{st}"
    );

    // A forward stream is the kernel's: no hint.
    let (_, lines) = run_with_stats(&stats, &["cat", s(&file)]);
    let st = stats_of(&lines, &file);
    assert_eq!(st["hints"], 0, "{st}");
}

fn open(p: &Path) -> std::fs::File {
    std::fs::File::open(p).unwrap()
}

fn map(p: &Path) -> Vec<bool> {
    let len = std::fs::metadata(p).unwrap().len();
    ahead::residency::page_map(open(p), 0, len)
        .unwrap()
        .expect("residency visible")
}

fn share(m: &[bool], range: std::ops::Range<usize>) -> f64 {
    let n = range.len().max(1);
    m[range].iter().filter(|&&c| c).count() as f64 / n as f64
}

fn dontcache_works(dir: &Path) -> bool {
    let f = open(&gen(dir, "probe-dontcache", 4096));
    ahead::features::dontcache(std::os::fd::AsFd::as_fd(&f)).available
}

/// `ahead run --uncached -- cat FILE`, half of FILE cached before: the
/// cached half stays, the other half does not come in. The kernel's
/// proactive reclaim may take a page of the cached half mid-run (pages
/// untouched for ~3 s go), so each variant has three attempts.
#[test]
fn uncached_cat_leaves_the_cache_as_it_found_it() {
    let dir = scratch();
    let file = gen(dir.path(), "half", 64 << 20);
    let variants: Vec<(&[&str], f64)> = if dontcache_works(dir.path()) {
        vec![
            (&["--uncached"], 0.005),
            (&["--uncached", "--no-dontcache"], 0.005),
        ]
    } else {
        eprintln!("SKIP the RWF_DONTCACHE variant: not supported here");
        vec![(&["--uncached", "--no-dontcache"], 0.005)]
    };
    let pages = (64 << 20) / ahead::residency::page_size() as usize;
    for (flags, most_new) in variants {
        let mut last = String::new();
        let mut ok = false;
        for _ in 0..3 {
            ahead::residency::evict(open(&file), 0, 0).unwrap();
            // Cache the first half with a plain read.
            let f = open(&file);
            let mut buf = vec![0u8; 1 << 20];
            for i in 0..32u64 {
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, i << 20).unwrap();
            }
            // The kernel's readahead past the first half may still be in
            // flight: wait until residency stops changing.
            let mut before = map(&file);
            for _ in 0..50 {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let now = map(&file);
                if now == before {
                    break;
                }
                before = now;
            }
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "cat", s(&file)]);
            let o = out(&mut ahead_cmd(&args));
            assert!(o.status.success(), "{}", stderr(&o));
            assert_eq!(o.stdout.len(), 64 << 20);
            assert_eq!(
                ahead::testdata::first_mismatch(&o.stdout, 0),
                None,
                "cat's bytes differ"
            );
            let after = map(&file);
            let was: Vec<usize> = (0..pages).filter(|&i| before[i]).collect();
            let kept = was.iter().filter(|&&i| after[i]).count() as f64 / was.len().max(1) as f64;
            let fresh: Vec<usize> = (0..pages).filter(|&i| !before[i]).collect();
            let came =
                fresh.iter().filter(|&&i| after[i]).count() as f64 / fresh.len().max(1) as f64;
            last = format!(
                "{flags:?}: cached before {} pages, {:.2}% of them kept; {:.2}% of the rest came in (first half {:.1}% cached after)",
                was.len(),
                kept * 100.0,
                came * 100.0,
                share(&after, 0..pages / 2) * 100.0
            );
            if kept >= 0.995 && came <= most_new {
                ok = true;
                break;
            }
        }
        assert!(ok, "{last}");
        eprintln!("{last}");
    }
}

/// `ahead run --uncached -- cp SRC DST`: cp's copy_file_range becomes
/// uncached reads and writes; DST ends with its bytes and (almost) none of
/// its pages cached, and SRC as it was (cold).
#[test]
fn uncached_cp_leaves_no_pages_behind() {
    let Some(cp) = need(&["cp"], "cp") else {
        return;
    };
    let dir = scratch();
    let src = gen(dir.path(), "src", 48 << 20);
    let mut variants: Vec<&[&str]> = vec![&["--uncached", "--no-dontcache"]];
    if dontcache_works(dir.path()) {
        variants.push(&["--uncached"]);
    } else {
        eprintln!("SKIP the RWF_DONTCACHE variant: not supported here");
    }
    for flags in variants {
        let dst = dir.path().join("dst");
        let _ = std::fs::remove_file(&dst);
        ahead::residency::evict(open(&src), 0, 0).unwrap();
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", s(&cp), s(&src), s(&dst)]);
        let o = out(&mut ahead_cmd(&args));
        assert!(o.status.success(), "{}", stderr(&o));
        // RWF_DONTCACHE drops a written page when its writeback completes,
        // which may be after cp exits: wait for it (syncing adds no page
        // to the cache, and leaves a clean page cached where it was). With
        // other tests writing beside it, 2% of DST was still under
        // writeback when looked at.
        open(&dst).sync_all().unwrap();
        let d = map(&dst);
        let cached = share(&d, 0..d.len());
        let src_cached = share(&map(&src), 0..d.len());
        let bytes = std::fs::read(&dst).unwrap();
        assert_eq!(bytes.len(), 48 << 20);
        assert_eq!(
            ahead::testdata::first_mismatch(&bytes, 0),
            None,
            "{flags:?}"
        );
        assert!(
            cached <= 0.01,
            "{flags:?}: {:.2}% of DST cached",
            cached * 100.0
        );
        assert!(
            src_cached <= 0.01,
            "{flags:?}: {:.2}% of SRC cached",
            src_cached * 100.0
        );
    }
}

/// `ahead trace` records each read; the simulator replays the file.
#[test]
fn a_trace_records_reads_and_replays() {
    let Some(tac) = need(&["tac"], "tac") else {
        return;
    };
    let dir = scratch();
    let file = lines_file(dir.path(), 2 << 20);
    let trace = dir.path().join("tac.trace");
    let o = out(&mut ahead_cmd(&[
        "trace",
        "-o",
        s(&trace),
        "--",
        s(&tac),
        s(&file),
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(
        text.contains(&format!(" {}", s(&file))),
        "no '# file' line for the input"
    );
    let reads: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let bytes: u64 = reads
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(bytes >= 2 << 20, "{bytes} bytes traced");
    assert!(reads
        .iter()
        .all(|l| l.contains(" file=") && l.contains(" tid=") && l.contains(" t=")));
    let o = ahead(&[
        "sim",
        "replay",
        s(&trace),
        "--trace-file",
        "lines.txt",
        "--device",
        "ssd",
        "--json",
    ]);
    let rows = common::ok_json(&o);
    let rows = rows.as_array().unwrap();
    let ahead_row = rows.iter().find(|r| r["policy"] == "ahead").unwrap();
    let ondemand = rows.iter().find(|r| r["policy"] == "ondemand").unwrap();
    // The file's device's readahead, where sysfs names the device, is in
    // the trace, and the replay gives it to the kernel's policy.
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(&file).unwrap().dev();
    let ra_line = text.lines().find(|l| l.starts_with("# readahead "));
    match ahead::features::device_of(dev).and_then(|d| d.read_ahead_kb) {
        Some(kb) => {
            let line = ra_line.expect("no '# readahead' line for a file on a block device");
            assert!(line.ends_with(&format!(" {}", kb << 10)), "{line}");
            assert_eq!(ondemand["max_readahead_kib"], kb, "{rows:?}");
        }
        None => {
            eprintln!("SKIP: the scratch directory's device has no read_ahead_kb in sysfs");
            assert_eq!(ra_line, None);
            assert_eq!(ondemand["max_readahead_kib"], 128, "{rows:?}");
        }
    }
    // tac's backward walk: ahead far ahead of the kernel's policy.
    let tput = |r: &serde_json::Value| r["throughput_mb_s"].as_f64().unwrap();
    assert!(tput(ahead_row) > 3.0 * tput(ondemand), "{rows:?}");
    let o = ahead(&["sim", "replay", s(&trace), "--trace-file", "nope"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no file 'nope'"), "{}", stderr(&o));
}

/// `python -c script` under `ahead trace -o trace`: the trace's text, or
/// None (the test skips, saying why) where the kernel would not let the
/// process sample its page faults.
fn traced_faults(python: &Path, script: &str, trace: &Path) -> Option<String> {
    let o = out(&mut ahead_cmd(&[
        "trace",
        "-o",
        s(trace),
        "--",
        s(python),
        "-c",
        script,
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(trace).unwrap();
    if let Some(why) = text
        .lines()
        .find(|l| l.starts_with("# page faults in mapped files not recorded"))
    {
        eprintln!("SKIP: {why}");
        return None;
    }
    Some(text)
}

/// The trace's ids of `file` (it names files by their canonical path), in
/// the order of their `# file` lines.
fn file_ids<'a>(text: &'a str, file: &Path) -> Vec<&'a str> {
    let canon = std::fs::canonicalize(file).unwrap();
    text.lines()
        .filter(|l| l.starts_with("# file ") && l.ends_with(s(&canon)))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect()
}

/// A program that reads a file through a mapping: `ahead trace` records
/// its page faults as one-page reads marked `map=1` (where the kernel lets
/// a process sample its own faults), and the simulator serves them as the
/// kernel does, reading around each miss.
#[test]
fn a_trace_records_the_page_faults_of_a_mapped_file() {
    let Some(python) = need(&["python3"], "python3 to map a file") else {
        return;
    };
    let dir = scratch();
    let file = gen(dir.path(), "mapped", 4 << 20);
    let trace = dir.path().join("map.trace");
    // Every 64th page, forward.
    let script = format!(
        "import mmap\nf = open({:?}, 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\nprint(sum(m[i] for i in range(0, len(m), 256 << 10)))",
        s(&file)
    );
    let Some(text) = traced_faults(&python, &script, &trace) else {
        return;
    };
    let ids = file_ids(&text, &file);
    let id = ids
        .first()
        .unwrap_or_else(|| panic!("no '# file' line for the mapped file: {text}"));
    let faults: Vec<u64> = text
        .lines()
        .filter(|l| l.ends_with(" map=1") && l.contains(&format!(" file={id} ")))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    // The pages touched are 256 KiB apart; how many of them fault depends
    // on the folios the cache holds (a fault maps a whole large folio), but
    // every fault is at a page touched, in the order touched.
    assert!(faults.first() == Some(&0), "{faults:?}");
    assert!(
        faults.iter().all(|f| f % (256 << 10) == 0 && *f < 4 << 20),
        "{faults:?}"
    );
    assert!(faults.windows(2).all(|w| w[0] < w[1]), "{faults:?}");
    let o = ahead(&[
        "sim",
        "replay",
        s(&trace),
        "--trace-file",
        "mapped",
        "--device",
        "ssd",
        "--policy",
        "ondemand",
        "--max-readahead",
        "1m",
        "--json",
    ]);
    let rows = common::ok_json(&o);
    // Read-around: a miss reads the window around it (1 MiB here), where a
    // read of the page would read the page.
    let amp = rows[0]["read_amplification"].as_f64().unwrap();
    assert!(amp >= 4.0, "{rows}");
}

/// A traced program that forks: the child, which inherits the parent's
/// sample ring and runs a helper of its own (it reads a file), takes none
/// of the parent's faults.
#[test]
fn a_forked_child_takes_none_of_its_parents_faults() {
    let Some(python) = need(&["python3"], "python3 to map a file") else {
        return;
    };
    let dir = scratch();
    let file = gen(dir.path(), "mapped", 4 << 20);
    let trace = dir.path().join("fork.trace");
    // The parent touches the first 2 MiB before the fork, then, while the
    // child reads the file, writes a page of the last 2 MiB every 5 ms
    // through a private mapping (a fault for each page, whatever folios
    // the cache holds).
    let script = format!(
        "import mmap, os, time\nf = open({:?}, 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n\
         w = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)\n\
         s = sum(m[i] for i in range(0, 2 << 20, 64 << 10))\npid = os.fork()\n\
         if pid == 0:\n    g = os.open({:?}, os.O_RDONLY)\n    end = time.time() + 0.4\n    \
         while time.time() < end:\n        os.pread(g, 4096, (int(time.time() * 1e6) % 1024) * 4096)\n        \
         time.sleep(0.001)\n    raise SystemExit(0)\n\
         time.sleep(0.05)\nfor i in range(2 << 20, 4 << 20, 64 << 10):\n    w[i] = 1\n    time.sleep(0.005)\n\
         os.waitpid(pid, 0)\nprint(s)",
        s(&file),
        s(&file)
    );
    let Some(text) = traced_faults(&python, &script, &trace) else {
        return;
    };
    let ids = file_ids(&text, &file);
    let lines = |id: &str, faults: bool| -> Vec<u64> {
        text.lines()
            .filter(|l| l.contains(&format!(" file={id} ")) && l.ends_with(" map=1") == faults)
            .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
            .collect()
    };
    // Two processes had the file: the parent mapped it, the child read it.
    assert_eq!(ids.len(), 2, "{ids:?}");
    let (parent, child): (Vec<&str>, Vec<&str>) =
        ids.iter().partition(|id| !lines(id, true).is_empty());
    assert_eq!((parent.len(), child.len()), (1, 1), "{ids:?}");
    assert!(
        lines(child[0], false).len() >= 10,
        "the child's reads: {text}"
    );
    // The parent's faults while the child lived are there: its 32 writes
    // to the last 2 MiB, 64 KiB apart (the child took none of them).
    let faults = lines(parent[0], true);
    let late = faults.iter().filter(|&&f| f >= 2 << 20).count();
    assert!(
        late >= 30,
        "parent: {late} faults in its last 2 MiB: {faults:?}"
    );
}

/// A program that maps a file instead of reading it: the stats say so
/// (`maps`), since nothing read through the mapping is seen.
#[test]
fn a_mapped_file_is_reported_in_the_stats() {
    let Some(python) = need(&["python3"], "python3 to map a file") else {
        return;
    };
    let dir = scratch();
    let file = gen(dir.path(), "mapped", 1 << 20);
    let stats = dir.path().join("stats.json");
    let script = format!(
        "import mmap\nf = open({:?}, 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\nprint(len(m[:4096]))",
        s(&file)
    );
    let (o, lines) = run_with_stats(&stats, &[s(&python), "-c", &script]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "4096");
    let st = stats_of(&lines, &file);
    assert!(st["maps"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["requests"], 0, "{st}");
}

/// A backward scan of rows of three pages, each row read forward (as
/// sqlite3 reads a leaf and its overflow pages, rows `order by id desc`):
/// the short forward runs are sent to the helper, which sees its backward
/// windows used and hints them. When every read that continued the last
/// was passed over, such a scan sent no hint at all.
#[test]
fn a_backward_scan_of_rows_read_forward_is_hinted() {
    let rows = 2048u64;
    let Some((python, dir, file)) = python_and_file("rows.bin", rows * 3 * 4096) else {
        return;
    };
    let script = format!(
        "import os, zlib\n\
         fd = os.open({file:?}, os.O_RDONLY)\n\
         c = 0\n\
         for r in range({rows} - 1, -1, -1):\n\
         \x20   for p in range(3):\n\
         \x20       c = zlib.crc32(os.pread(fd, 4096, (r * 3 + p) * 4096), c)\n\
         print(c)\n",
        file = s(&file)
    );
    let st = python_cold_under_stats(&python, dir.path(), &file, &script);
    assert!(st["hints"].as_u64().unwrap() > 0, "{st}");
    assert!(st["accuracy"].as_f64().unwrap() >= 0.5, "{st}");
}

/// What the Python readers below need: python3 (`None`, said, where it
/// is missing), a scratch directory, and a generated file `name` of
/// `size` bytes in it.
fn python_and_file(name: &str, size: u64) -> Option<(PathBuf, tempfile::TempDir, PathBuf)> {
    let python = need(&["python3"], "python3")?;
    let dir = scratch();
    let file = gen(dir.path(), name, size);
    Some((python, dir, file))
}

/// python3 (`None`, said, where it is missing), a scratch directory, and a
/// file of `size` bytes of lines in it, written out (so that it can be
/// evicted).
fn python_and_lines(size: usize) -> Option<(PathBuf, tempfile::TempDir, PathBuf)> {
    let python = need(&["python3"], "python3")?;
    let dir = scratch();
    let file = lines_file(dir.path(), size);
    std::fs::File::open(&file).unwrap().sync_all().unwrap();
    Some((python, dir, file))
}

/// The start of the probes below: `core()` says whether the core is
/// mapped into the process; `fd` and `size` are the file's.
const CORE_PROBE: &str = r#"
import os, sys, random
def core():
    with open("/proc/self/maps") as m:
        return int(any("libahead_preload" in l for l in m))
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
"#;

/// Runs the Python `script` plainly, then under `ahead run --stats` with
/// `file` evicted first: the same output, and `file`'s line of the stats.
fn python_cold_under_stats(
    python: &Path,
    dir: &Path,
    file: &Path,
    script: &str,
) -> serde_json::Value {
    let plain = out(Command::new(python).args(["-c", script]));
    assert!(plain.status.success(), "{}", stderr(&plain));
    let f = std::fs::File::open(file).unwrap();
    f.sync_all().unwrap();
    ahead::residency::evict(&f, 0, 0).unwrap();
    let stats = dir.join("stats.json");
    let (o, lines) = run_with_stats(&stats, &[s(python), "-c", script]);
    assert_eq!(o.stdout, plain.stdout, "the program's output differs");
    stats_of(&lines, file).clone()
}

/// `ahead trace` records a program's `posix_fadvise` of a file (`# advice
/// ID WORD`, after the file's `# file` line), in a forked child that ends
/// in `_exit` too, as fio's jobs advise and end; a replay reads a file
/// advised random as the kernel does (sim_cli's
/// `a_trace_gives_the_programs_advice`).
#[test]
fn a_trace_records_the_programs_advice() {
    let Some((python, dir, file)) = python_and_file("advised.bin", 1 << 20) else {
        return;
    };
    let script = format!(
        "import os\n\
         pid = os.fork()\n\
         if pid == 0:\n\
         \x20   fd = os.open({file:?}, os.O_RDONLY)\n\
         \x20   os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)\n\
         \x20   os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_WILLNEED)\n\
         \x20   for i in range(16):\n\
         \x20       os.pread(fd, 4096, i * 65536)\n\
         \x20   os._exit(0)\n\
         os.waitpid(pid, 0)\n",
        file = s(&file)
    );
    let trace = dir.path().join("advice.trace");
    let o = out(&mut ahead_cmd(&[
        "trace",
        "-o",
        s(&trace),
        "--",
        s(&python),
        "-c",
        &script,
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&trace).unwrap();
    let canon = std::fs::canonicalize(&file).unwrap();
    let id = text
        .lines()
        .filter_map(|l| l.strip_prefix("# file "))
        .find(|l| l.ends_with(s(&canon)))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no '# file' line for the file: {text}"));
    let advice: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# advice "))
        .filter(|l| l.starts_with(&format!("{id} ")))
        .collect();
    assert_eq!(
        advice,
        [format!("{id} random"), format!("{id} willneed")],
        "{text}"
    );
    let reads = text
        .lines()
        .filter(|l| l.contains(&format!("file={id} ")))
        .count();
    assert_eq!(reads, 16, "{text}");
}

/// A process that ends with `_exit`, skipping its exit handlers, still
/// writes its statistics: fio's job processes and `multiprocessing`'s
/// children end so, and their lines were missing. Here a forked child reads
/// a file backward and calls `os._exit`; its line and its process line are
/// there, with its reads and its hints.
#[test]
fn a_child_that_ends_with_exit_underscore_writes_its_statistics() {
    let pages = 4096u64;
    let Some((python, dir, file)) = python_and_file("exit.bin", pages * 4096) else {
        return;
    };
    let script = format!(
        "import os, zlib\n\
         fd = os.open({file:?}, os.O_RDONLY)\n\
         pid = os.fork()\n\
         if pid == 0:\n\
         \x20   c = 0\n\
         \x20   for i in reversed(range({pages})):\n\
         \x20       c = zlib.crc32(os.pread(fd, 4096, i * 4096), c)\n\
         \x20   os.write(1, b'%d\\n' % c)\n\
         \x20   os._exit(0)\n\
         os.waitpid(pid, 0)\n\
         print(pid)\n",
        file = s(&file)
    );
    let f = std::fs::File::open(&file).unwrap();
    ahead::residency::evict(&f, 0, 0).unwrap();
    let stats = dir.path().join("stats.json");
    let (o, lines) = run_with_stats(&stats, &[s(&python), "-c", &script]);
    let text = String::from_utf8_lossy(&o.stdout);
    let child: u64 = text.lines().last().unwrap().trim().parse().unwrap();
    let canon = std::fs::canonicalize(&file).unwrap();
    let line = lines
        .iter()
        .find(|l| l["pid"] == child && l["file"] == s(&canon))
        .unwrap_or_else(|| panic!("no line for the child {child}'s file: {lines:?}"));
    assert!(line["requests"].as_u64().unwrap() > pages / 2, "{line}");
    assert!(line["hints"].as_u64().unwrap() > 0, "{line}");
    assert!(
        lines
            .iter()
            .any(|l| l["pid"] == child && l["process"] == true),
        "no process line for the child {child}: {lines:?}"
    );
}

/// A forward sweep whose reads step back over a few pages (sqlite3's
/// `WITHOUT ROWID` leaves, each followed by its rows' overflow pages just
/// before it, and an interior page far away now and then) is the kernel's
/// to read ahead: after its first reads, the preload sends the helper
/// none of it, where it sent every read before (seed 67 of the
/// generator). The program's bytes are the same.
#[test]
fn a_forward_sweep_stepping_back_is_left_to_the_kernel() {
    let leaves = 3000u64;
    let Some((python, dir, file)) = python_and_file("sweep.bin", (leaves * 4 + 200) * 4096) else {
        return;
    };
    let script = format!(
        "import os, zlib\n\
         fd = os.open({file:?}, os.O_RDONLY)\n\
         c = 0\n\
         for i in range({leaves}):\n\
         \x20   leaf = 3 + 4 * i\n\
         \x20   for p in (leaf, leaf - 3, leaf - 2, leaf - 1):\n\
         \x20       c = zlib.crc32(os.pread(fd, 4096, p * 4096), c)\n\
         \x20   if i % 18 == 17:\n\
         \x20       c = zlib.crc32(os.pread(fd, 4096, ({leaves} * 4 + i % 200) * 4096), c)\n\
         print(c)\n",
        file = s(&file)
    );
    let st = python_cold_under_stats(&python, dir.path(), &file, &script);
    let reads = leaves * 4 + leaves / 18;
    let sent = st["requests"].as_u64().unwrap();
    // Each far read, the one after it, and the first reads of the sweep.
    assert!(sent * 10 < reads, "{sent} of {reads} reads sent: {st}");
}

/// A hint sent in the middle of a forward sweep is counted as the sweep
/// reads it. sqlite3 scanning a `WITHOUT ROWID` table (the reads in
/// tests/data/sweep_with_jumps.txt, generator seed 85, case 7): where the
/// sweep broke off for a subtree, the helper hinted a forward window, and
/// the sweep that followed read it whole, none of those reads sent:
/// `--stats` counted 10 of its 32 pages read, and the policy took the
/// window for wasted. Reads within the hinted span are now sent. The
/// reader sleeps between reads, so that what is counted does not hang on
/// the helper keeping up with it.
#[test]
fn a_hint_read_by_a_sweep_is_counted_read() {
    let text = include_str!("data/sweep_with_jumps.txt");
    let mut page = 0i64;
    let pages: Vec<i64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .map(|d| {
            page += d.parse::<i64>().unwrap();
            page
        })
        .collect();
    let Some((python, dir, file)) = python_and_file("scan.bin", 6000 * 4096) else {
        return;
    };
    let list = dir.path().join("pages.txt");
    std::fs::write(&list, format!("{pages:?}")).unwrap();
    let script = format!(
        "import os, time, zlib\n\
         fd = os.open({file:?}, os.O_RDONLY)\n\
         c = 0\n\
         for p in eval(open({list:?}).read()):\n\
         \x20   c = zlib.crc32(os.pread(fd, 4096, p * 4096), c)\n\
         \x20   time.sleep(0.0005)\n\
         print(c)\n",
        file = s(&file),
        list = s(&list)
    );
    let st = python_cold_under_stats(&python, dir.path(), &file, &script);
    assert!(st["hinted_pages"].as_u64().unwrap() > 0, "{st}");
    assert!(st["accuracy"].as_f64().unwrap() >= 0.9, "{st}");
}

/// Random reads that give the helper nothing to hint for are muted: after
/// 512 of them, the preload sends it one run of 64 reads in 512 (seed 68
/// of the generator: a join's 211,855 random reads cost the helper 0.5 s
/// of CPU for 32 pages hinted, none read). The program's bytes are the same.
#[test]
fn random_reads_that_hint_nothing_are_mostly_not_sent() {
    let pages = 16384u64;
    let Some((python, dir, file)) = python_and_file("random.bin", pages * 4096) else {
        return;
    };
    let reads = 6000u64;
    let script = format!(
        "import os, random, zlib\n\
         fd = os.open({file:?}, os.O_RDONLY)\n\
         r = random.Random(5)\n\
         c = 0\n\
         for _ in range({reads}):\n\
         \x20   c = zlib.crc32(os.pread(fd, 4096, r.randrange({pages}) * 4096), c)\n\
         print(c)\n",
        file = s(&file)
    );
    let st = python_cold_under_stats(&python, dir.path(), &file, &script);
    let sent = st["requests"].as_u64().unwrap();
    // The first 512 or so, then 64 of every 512.
    assert!(sent * 2 < reads, "{sent} of {reads} reads sent: {st}");
}

/// A read at the file position is placed without asking the kernel where
/// that is each time: the core follows the position through reads and
/// `lseek` (here of a descriptor `dup2`'d onto another, which the shim
/// cannot follow) and asks only at every 64th read. The positions it
/// follows are right: a backward scan through `lseek` and `read` is
/// hinted, and its hints are read (with the `lseek`s unseen, its reads
/// would look forward and be passed over). The program's bytes are the
/// same.
#[test]
fn reads_at_the_file_position_are_placed_without_asking_the_kernel_each_time() {
    let blocks = 512u64;
    let small = 20_000u64;
    let Some((python, dir, file)) = python_and_file("position.bin", blocks * 65536) else {
        return;
    };
    let script = format!(
        "import os, zlib\n\
         fd = os.open({file:?}, os.O_RDONLY)\n\
         os.dup2(fd, 9)\n\
         os.close(fd)\n\
         c = 0\n\
         for b in range({blocks} - 1, {blocks} // 2, -1):\n\
         \x20   os.lseek(9, b * 65536, os.SEEK_SET)\n\
         \x20   c = zlib.crc32(os.read(9, 65536), c)\n\
         os.lseek(9, 0, os.SEEK_SET)\n\
         for _ in range({small}):\n\
         \x20   c = zlib.crc32(os.read(9, 577), c)\n\
         print(c)\n",
        file = s(&file)
    );
    let st = python_cold_under_stats(&python, dir.path(), &file, &script);
    assert!(
        st["hints"].as_u64().unwrap() > 0,
        "the backward scan was not hinted: {st}"
    );
    assert!(st["accuracy"].as_f64().unwrap() >= 0.5, "{st}");
    let lines = stats_lines(&dir.path().join("stats.json"));
    let asked: u64 = lines
        .iter()
        .filter(|l| l["process"] == true)
        .map(|l| l["positions_asked"].as_u64().expect("positions_asked"))
        .sum();
    let reads = blocks / 2 + small;
    assert!(
        asked * 32 < reads,
        "{asked} positions asked of the kernel for {reads} reads: {lines:?}"
    );
}

/// A file of lines under the kernel's first window (64 KiB) and one well
/// over it (8 MiB): the small one in `dir`, the big one in `dir/big`.
fn small_and_big_files(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir(dir.join("big")).unwrap();
    (
        lines_file(dir, 64 << 10),
        lines_file(&dir.join("big"), 8 << 20),
    )
}

/// Files readahead cannot help send the helper nothing beyond their first
/// read (with --stats): a small file, a wholly cached one read backward,
/// and a forward stream; the process's line counts the reads passed over
/// and the helper's CPU time.
#[test]
fn small_cached_and_forward_reads_cost_no_events() {
    let Some(tac) = need(&["tac"], "tac") else {
        return;
    };
    let dir = scratch();
    let (small, big) = small_and_big_files(dir.path());
    let stats = dir.path().join("stats.json");
    // Cached: read once whole.
    let plain = out(Command::new(&tac).arg(&big));
    assert!(plain.status.success());
    for file in [&small, &big] {
        let (o, lines) = run_with_stats(&stats, &[s(&tac), s(file)]);
        if file == &big {
            assert!(
                o.stdout == plain.stdout,
                "tac's output differs under ahead run"
            );
        }
        let st = stats_of(&lines, file);
        assert_eq!(st["requests"], 1, "only the first read is sent: {st}");
        assert_eq!(st["hints"], 0, "{st}");
        let process = lines.iter().find(|l| l["process"] == true).unwrap();
        assert!(process["reads_passed"].as_u64().unwrap() > 0, "{process}");
        assert!(process["helper_cpu_s"].as_f64().is_some(), "{process}");
    }
    // A forward stream of a cold file: its reads after the first are the
    // kernel's.
    let f = std::fs::File::open(&big).unwrap();
    f.sync_all().unwrap();
    ahead::residency::evict(&f, 0, 0).unwrap();
    let (_, lines) = run_with_stats(&stats, &["cat", s(&big)]);
    assert_eq!(stats_of(&lines, &big)["requests"], 1, "{lines:?}");
}

/// The libraries mapped into `sh` after it ran `prefix` (its own maps, as
/// a child `cat` prints them), under `ahead run ARGS`.
fn shell_libraries(args: &[&str], prefix: &str, stdin: &[u8]) -> Vec<String> {
    use std::io::Write;
    let script = format!("{prefix} cat /proc/$$/maps; true");
    let mut all = args.to_vec();
    all.extend_from_slice(&["--", "sh", "-c", &script]);
    let mut child = ahead_cmd(&all)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut libs: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("libahead_"))
        .map(|p| p.rsplit('/').next().unwrap().to_owned())
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

/// Every process loads only the small shim until it reads a regular file
/// (reading a pipe is not enough); then the core, in readahead mode where
/// the file is cold and large enough for the kernel's first window not to
/// read it whole (`sh`'s `read` takes a byte at a time from a descriptor
/// the shim cannot follow: the ninth loads it). `--off` loads nothing,
/// unless statistics are asked for.
#[test]
fn the_core_is_loaded_at_the_first_read_of_a_regular_file() {
    let dir = scratch();
    let file = lines_file(dir.path(), 1 << 20);
    let f = std::fs::File::open(&file).unwrap();
    f.sync_all().unwrap();
    ahead::residency::evict(&f, 0, 0).unwrap();
    let shim = vec!["libahead_shim.so".to_owned()];
    let both = vec![
        "libahead_preload.so".to_owned(),
        "libahead_shim.so".to_owned(),
    ];
    assert_eq!(shell_libraries(&["run"], "", b""), shim);
    assert_eq!(shell_libraries(&["run"], "read x;", b"a pipe\n"), shim);
    let read_file = format!("read x < '{}';", file.display());
    assert_eq!(shell_libraries(&["run"], &read_file, b""), both);
    assert_eq!(
        shell_libraries(&["run", "--uncached"], &read_file, b""),
        both
    );
    assert!(shell_libraries(&["run", "--off"], &read_file, b"").is_empty());
    let stats = dir.path().join("stats.json");
    let with_stats = ["run", "--off", "--stats", s(&stats)];
    assert_eq!(shell_libraries(&with_stats, "", b""), both);
}

/// A core that cannot be loaded (its bytes spoiled in place, the size
/// kept, so that `ahead run` takes it) leaves programs running as they
/// would without ahead: the same output and status, only the shim mapped.
#[test]
fn a_core_that_cannot_load_leaves_programs_as_they_are() {
    use std::os::unix::fs::PermissionsExt;
    let Some(tac) = need(&["tac"], "tac") else {
        return;
    };
    let dir = scratch();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--"];
        all.extend_from_slice(args);
        out(ahead_cmd(&all).env("XDG_STATE_HOME", &state))
    };
    assert!(run(&["true"]).status.success());
    let libs = std::fs::read_dir(state.join("ahead/preload"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let core = libs.join("libahead_preload.so");
    let len = std::fs::metadata(&core).unwrap().len() as usize;
    std::fs::set_permissions(&core, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(&core, vec![0u8; len]).unwrap();
    std::fs::set_permissions(&core, std::fs::Permissions::from_mode(0o500)).unwrap();
    let file = lines_file(dir.path(), 1 << 20);
    let plain = out(Command::new(&tac).arg(&file));
    let under = run(&[s(&tac), s(&file)]);
    assert!(under.status.success(), "{}", stderr(&under));
    assert!(under.stdout == plain.stdout, "tac's output differs");
    let script = format!("read x < '{}'; cat /proc/$$/maps; true", file.display());
    let maps = run(&["sh", "-c", &script]);
    assert!(maps.status.success(), "{}", stderr(&maps));
    let maps = String::from_utf8_lossy(&maps.stdout);
    assert!(maps.contains("libahead_shim.so"), "{maps}");
    assert!(!maps.contains("libahead_preload.so"), "{maps}");
}

/// Python's output for `script` run under `ahead run` with `file` as its
/// argument (the run must succeed).
fn python_under_run(python: &Path, script: &str, file: &Path) -> String {
    let o = out(&mut ahead_cmd(&[
        "run",
        "--",
        s(python),
        "-c",
        script,
        s(file),
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Reads readahead cannot help load nothing: a cold file read forward
/// (its first MiB), then eight times backward from its end, leaves a
/// process with the shim alone and no helper thread. A ninth read loads
/// the core, whose policy then sees the eighth and the ninth (the helper
/// starts).
#[test]
fn forward_reads_and_a_few_jumps_load_nothing() {
    let Some((python, _dir, file)) = python_and_lines(4 << 20) else {
        return;
    };
    let f = std::fs::File::open(&file).unwrap();
    let probe = r#"
import os, sys
def state():
    # The helper names itself once it runs: count threads, not names.
    threads = len(os.listdir("/proc/self/task")) - 1
    with open("/proc/self/maps") as m:
        core = any("libahead_preload" in l for l in m)
    print(threads, int(core))
state()
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
for _ in range(16):
    os.read(fd, 65536)
state()
for i in range(1, 9):
    os.pread(fd, 4096, size - 8192 * i)
state()
os.pread(fd, 4096, size - 8192 * 9)
state()
"#;
    // Cold, so that the file is neither small nor wholly cached.
    ahead::residency::evict(&f, 0, 0).unwrap();
    let text = python_under_run(&python, probe, &file);
    if text.starts_with("0 1") {
        eprintln!("SKIP: this python's start-up already loads the core");
        return;
    }
    assert_eq!(text, "0 0\n0 0\n0 0\n1 1\n");
}

/// A file the kernel has no need of ahead's readahead for does not load
/// the core, however its reads jump: a small one, or one cached where it
/// is probed (its first page, its last and 14 between). Its reads are
/// looked at again every 64: one that finds its page gone loads the core
/// then. A cold file loads it at the ninth jump, as before.
#[test]
fn small_and_cached_files_never_load_the_core() {
    let Some(python) = need(&["python3"], "python3") else {
        return;
    };
    let dir = scratch();
    let (small, big) = small_and_big_files(dir.path());
    for f in [&big, &small] {
        std::fs::File::open(f).unwrap().sync_all().unwrap();
    }
    let probe = CORE_PROBE.to_owned()
        + r#"r = random.Random(7)
def jumps(n):
    for _ in range(n):
        os.pread(fd, 4096, r.randrange(0, size // 4096) * 4096)
jumps(200)
first = core()
# Every page gone: the next look (within 64 reads) finds it.
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
jumps(70)
print(first, core())
"#;
    let run = |file: &Path| python_under_run(&python, &probe, file);
    let cold = |file: &Path| {
        ahead::residency::evict(std::fs::File::open(file).unwrap(), 0, 0).unwrap();
    };
    cold(&big);
    assert_eq!(
        run(&big),
        "1 1\n",
        "a cold file read at random loads the core"
    );
    let whole = |file: &Path| {
        let _ = std::fs::read(file).unwrap();
        let f = std::fs::File::open(file).unwrap();
        let size = f.metadata().unwrap().len();
        ahead::residency::all_cached(&f, 0, size, size)
    };
    if whole(&big) != Some(true) {
        eprintln!("SKIP: no cachestat(2) here, or the file would not stay cached");
        return;
    }
    assert_eq!(
        run(&big),
        "0 1\n",
        "cached: no core until a look finds a page gone"
    );
    cold(&small);
    assert_eq!(run(&small), "0 0\n", "small: never the core");
}

/// A program that jumps at random through a cold file holds the core off
/// (it would hint nothing, and costs a process about 0.7 ms) for up to 64
/// reads, and has it by the 65th; one whose jumps continue each other (a
/// stride forward, two streams interleaved) has it at the ninth, as before.
#[test]
fn reads_at_random_hold_the_core_off_and_ordered_ones_do_not() {
    let Some((python, _dir, file)) = python_and_lines(32 << 20) else {
        return;
    };
    let probe = |reads: &str| {
        format!(
            r#"{CORE_PROBE}r = random.Random(7)
seen = []
for i, at in enumerate({reads}):
    os.pread(fd, 4096, at)
    seen.append(str(core()))
print("".join(seen))
"#
        )
    };
    let cold = || ahead::residency::evict(std::fs::File::open(&file).unwrap(), 0, 0).unwrap();
    // When the core was loaded: at the read after the first `0`s.
    let loaded_at = |text: String| text.trim().find('1').map(|i| i + 1);
    for (reads, at, what) in [
        (
            "[r.randrange(0, size // 4096) * 4096 for _ in range(80)]",
            65,
            "at random",
        ),
        ("[i * (64 << 10) + 8192 for i in range(20)]", 9, "a stride"),
        (
            "[(i // 2) * 12288 + 8192 + (i % 2) * (size // 2) for i in range(20)]",
            9,
            "two streams interleaved",
        ),
    ] {
        cold();
        let text = python_under_run(&python, &probe(reads), &file);
        assert_eq!(loaded_at(text), Some(at), "{what}");
    }
}

/// A reader stepping backward through cached pages (`tail` of a log read
/// before, whose head the kernel has since reclaimed) loads no core,
/// though the file is not cached whole; stepping on into the evicted
/// part, it loads the core within 64 reads. A cold file read backward
/// loads it at the ninth read, as before.
#[test]
fn a_backward_reader_over_cached_pages_loads_no_core() {
    let Some((python, _dir, file)) = python_and_lines(8 << 20) else {
        return;
    };
    let probe = CORE_PROBE.to_owned()
        + r#"at = size // 8192 * 8192
def back(n):
    global at
    for _ in range(n):
        at -= 8192
        os.pread(fd, 8192, at)
back(40)
first = core()
at = (size // 2) // 8192 * 8192 + 8192
back(80)
print(first, core())
"#;
    let run = || python_under_run(&python, &probe, &file);
    let f = std::fs::File::open(&file).unwrap();
    let size = f.metadata().unwrap().len();
    ahead::residency::evict(&f, 0, 0).unwrap();
    assert_eq!(run(), "1 1\n", "a cold file read backward loads the core");
    // Its second half cached, its first evicted.
    let _ = std::fs::read(&file).unwrap();
    ahead::residency::evict(&f, 0, size / 2).unwrap();
    if ahead::residency::all_cached(&f, size / 2, size / 2, size) != Some(true) {
        eprintln!("SKIP: no cachestat(2) here, or the half would not stay cached");
        return;
    }
    assert_eq!(
        run(),
        "0 1\n",
        "cached behind: no core until a read finds a page gone"
    );
}

/// A descriptor that reads with `O_DIRECT` bypasses the page cache, so
/// whatever ahead read ahead for it into the cache would be read twice,
/// once for nothing: its reads are left alone. A backward reader of
/// 64 KiB blocks with `O_DIRECT` loads no core, and under `--stats` (the
/// core loaded at start) gets no hint and leaves nothing cached; the same
/// reader with the flag cleared by `F_SETFL` before it reads is hinted,
/// and one that sets the flag after a first buffered read is hinted no
/// more.
#[test]
fn reads_with_o_direct_are_left_alone() {
    let Some((python, dir, file)) = python_and_file("direct.bin", 16 << 20) else {
        return;
    };
    let probe = CORE_PROBE.to_owned()
        + r#"import fcntl, mmap
how = sys.argv[2]
os.close(fd)
fd = os.open(sys.argv[1], os.O_RDONLY | (os.O_DIRECT if how != "set" else 0))
fl = fcntl.fcntl(fd, fcntl.F_GETFL)
if how == "set":
    os.pread(fd, 4096, size - 4096)
    fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_DIRECT)
elif how == "cleared":
    fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_DIRECT)
buf = mmap.mmap(-1, 65536)
total = 0
for i in range(1, 161):
    total += os.preadv(fd, [buf], size - 65536 * i)
print(total, core())
"#;
    let f = std::fs::File::open(&file).unwrap();
    // O_DIRECT is the file system's to allow (tmpfs refuses it).
    if std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&file)
        .is_err()
    {
        eprintln!("SKIP: O_DIRECT is refused where the scratch files are");
        return;
    }
    if ahead::residency::cached_pages(&f, 0, 4096).is_none() {
        eprintln!("SKIP: no cachestat(2) here to count the file's cached pages");
        return;
    }
    let want = format!("{}", 160 * 65536);
    ahead::residency::evict(&f, 0, 0).unwrap();
    let o = out(&mut ahead_cmd(&[
        "run",
        "--",
        s(&python),
        "-c",
        &probe,
        s(&file),
        "direct",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{want} 0\n"),
        "no core"
    );
    assert_eq!(ahead::residency::cached_pages(&f, 0, 16 << 20), Some(0));

    let stats = dir.path().join("stats.json");
    let hinted = |how: &str| {
        ahead::residency::evict(&f, 0, 0).unwrap();
        let _ = std::fs::remove_file(&stats);
        let (o, lines) = run_with_stats(&stats, &[s(&python), "-c", &probe, s(&file), how]);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("{want} 1\n"),
            "{how}"
        );
        let canon = std::fs::canonicalize(&file).unwrap();
        let hinted = lines
            .iter()
            .filter(|l| l["file"] == s(&canon))
            .map(|l| l["hinted_pages"].as_u64().unwrap())
            .sum::<u64>();
        (hinted, ahead::residency::cached_pages(&f, 0, 16 << 20))
    };
    assert_eq!(hinted("direct"), (0, Some(0)), "O_DIRECT from the open");
    let (cleared, cached) = hinted("cleared");
    assert!(
        cleared > 0 && cached > Some(0),
        "the flag cleared: {cleared} hinted, {cached:?} cached"
    );
    let (set, _) = hinted("set");
    assert_eq!(set, 0, "the flag set after a buffered read");
}

/// The library brings its own (hidden) unwinder stubs instead of libgcc_s:
/// a C++ program's exceptions still use the program's unwinder.
#[test]
fn a_cpp_program_still_throws_and_catches() {
    let Some(cxx) = need(&["c++", "g++", "clang++"], "C++ compiler") else {
        return;
    };
    let dir = scratch();
    let src = dir.path().join("ex.cpp");
    std::fs::write(
        &src,
        "#include <cstdio>\n#include <stdexcept>\n#include <fstream>\n#include <string>\n\
         int main(int, char** argv) { std::ifstream f(argv[1]); std::string s; std::getline(f, s);\n\
         try { throw std::runtime_error(\"thrown\"); }\n\
         catch (const std::exception& e) { std::printf(\"caught %s %zu\\n\", e.what(), s.size()); }\n\
         return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("ex");
    let o = out(Command::new(&cxx).arg("-O1").arg("-o").arg(&exe).arg(&src));
    assert!(o.status.success(), "{}", stderr(&o));
    let data = gen(dir.path(), "data", 1 << 20);
    for mode in ["--readahead", "--uncached", "--off"] {
        let o = out(&mut ahead_cmd(&["run", mode, "--", s(&exe), s(&data)]));
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).starts_with("caught thrown"),
            "{mode}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

/// The names of one part (`both` or `shim`) of the table in
/// crates/ahead-preload/src/interface.rs.
fn table_part(part: &str) -> std::collections::BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ahead-preload/src/interface.rs");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text
        .find(&format!("{part} {{"))
        .expect("the part is in the table");
    let body = &text[start..start + text[start..].find('}').unwrap()];
    body.lines()
        .skip(1)
        .filter_map(|l| l.trim().split_once('(').map(|(n, _)| n.to_owned()))
        .filter(|n| !n.is_empty() && !n.starts_with("//"))
        .collect()
}

/// Both built libraries export exactly the functions of the one table
/// (the build already checks each definition's type against it), besides
/// their own `ahead_` entry points.
#[test]
fn both_libraries_export_the_one_table() {
    let Some(nm) = need(&["nm"], "nm (binutils) to list the libraries' symbols") else {
        return;
    };
    let o = out(&mut ahead_cmd(&[
        "run",
        "--",
        "sh",
        "-c",
        "cat /proc/$$/maps",
    ]));
    let maps = String::from_utf8_lossy(&o.stdout);
    let shim = maps
        .split_whitespace()
        .find(|w| w.ends_with("/libahead_shim.so"))
        .map(PathBuf::from)
        .expect("the shim is mapped");
    let exported = |lib: &Path| -> std::collections::BTreeSet<String> {
        let o = out(Command::new(&nm).args(["-D", "--defined-only"]).arg(lib));
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .filter(|n| !n.starts_with("ahead_"))
            .map(str::to_owned)
            .collect()
    };
    let both = table_part("both");
    let shim_only = table_part("shim");
    // The shim's own part: the ends of a process that skip its exit
    // handlers (the core follows `lseek` too).
    assert!(
        both.len() > 40 && both.contains("lseek") && shim_only.iter().eq(["_Exit", "_exit"].iter()),
        "{both:?} {shim_only:?}"
    );
    let core = shim.with_file_name("libahead_preload.so");
    assert_eq!(exported(&core), both);
    let all: std::collections::BTreeSet<String> = both.union(&shim_only).cloned().collect();
    assert_eq!(exported(&shim), all);
}

/// `ahead` starts `ahead run`'s plain forms itself, with the libraries in
/// place, and hands everything else to `ahead-full` beside it: the first
/// run (nothing placed yet), `--stats`, other commands, a program that
/// cannot be started. What the program sees is the same either way. A
/// copy of the launcher beside an `ahead-full` that notes each call tells
/// which took it.
#[test]
fn the_launcher_starts_plain_runs_itself_and_hands_on_the_rest() {
    use std::os::unix::fs::PermissionsExt;
    let t = scratch();
    let dir = t.path();
    let front = dir.join("ahead");
    std::fs::copy(env!("CARGO_BIN_EXE_ahead"), &front).unwrap();
    let handed = dir.join("handed");
    let full = dir.join("ahead-full");
    std::fs::write(
        &full,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            handed.display(),
            env!("CARGO_BIN_EXE_ahead-full")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let calls = || {
        std::fs::read_to_string(&handed)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let run = |exe: &Path, args: &[&str]| {
        let o = output_of_copy(
            Command::new(exe)
                .args(args)
                .env("XDG_STATE_HOME", &state)
                .env_remove("LD_PRELOAD"),
        );
        (o.status.code(), s_out(&o), stderr(&o))
    };
    let show =
        "echo $AHEAD_RUN_MODE ${AHEAD_RUN_DONTCACHE:-} ${LD_PRELOAD:-none} ${AHEAD_FRONT_BUILD:-}";
    let shim = state.join("ahead/preload");
    // (arguments, handed to ahead-full the second time too)
    let cases: [(&[&str], bool); 4] = [
        (&["run", "--", "sh", "-c", show], false),
        (&["run", "--readahead", "--", "sh", "-c", show], false),
        (
            &[
                "run",
                "--no-dontcache",
                "--uncached",
                "--",
                "sh",
                "-c",
                show,
            ],
            false,
        ),
        (&["run", "--off", "--", "sh", "-c", show], false),
    ];
    for (i, (args, _)) in cases.iter().enumerate() {
        let before = calls();
        let (code, o, e) = run(&front, args);
        assert_eq!(code, Some(0), "{args:?}: {e}");
        let direct = run(Path::new(env!("CARGO_BIN_EXE_ahead-full")), args);
        assert_eq!(
            o, direct.1,
            "{args:?}: the launcher's program saw another environment"
        );
        // The mode, `0` for --no-dontcache, the shim (none for --off), and
        // no launcher's mark after them.
        let fields = match args[1] {
            "--off" => 1,
            "--no-dontcache" => 3,
            _ => 2,
        };
        assert_eq!(o.split_whitespace().count(), fields, "{args:?}: {o}");
        if args[1] != "--off" {
            assert!(o.contains(s(&shim)), "{args:?}: {o}");
        }
        // The first run places the libraries: ahead-full's work.
        assert_eq!(calls() - before, usize::from(i == 0), "{args:?}");
    }
    for args in [
        &[
            "run",
            "--stats",
            s(&dir.join("s.json")),
            "--",
            "sh",
            "-c",
            show,
        ][..],
        &["--version"],
        &["run", "--off", "--off", "--", "true"],
        &["run", "--", "/nonexistent/program"],
    ] {
        let before = calls();
        let (code, o, e) = run(&front, args);
        assert_eq!(calls() - before, 1, "{args:?}: not handed on");
        match args[..] {
            ["--version"] => assert!(o.starts_with("ahead "), "{o}"),
            ["run", "--stats", ..] => {
                assert_eq!(code, Some(0), "{e}");
                // The mode and the shim, and no launcher's mark after them.
                assert_eq!(o.split_whitespace().count(), 2, "{o}");
                assert!(o.starts_with("readahead ") && o.contains(s(&shim)), "{o}");
            }
            ["run", "--off", "--off", ..] => assert_eq!(code, Some(2), "{e}"),
            _ => {
                assert_eq!(code, Some(1));
                assert!(e.contains("/nonexistent/program: No such file"), "{e}");
            }
        }
    }
    // The whole environment the program sees is ahead-full's, in any order,
    // with the caller's LD_PRELOAD after the shim; and with the state
    // directory under $HOME as under $XDG_STATE_HOME.
    let home = dir.join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let env_of = |exe: &Path, args: &[&str], xdg: bool| {
        let mut c = Command::new(exe);
        c.args(args)
            .env("LD_PRELOAD", "libm.so.6")
            .env("AHEAD_RUN_DONTCACHE", "1")
            .env("HOME", &home);
        if xdg {
            c.env("XDG_STATE_HOME", &state);
        } else {
            c.env_remove("XDG_STATE_HOME");
        }
        let o = output_of_copy(&mut c);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let mut lines: Vec<String> = s_out(&o).lines().map(String::from).collect();
        lines.sort();
        lines
    };
    for xdg in [true, false] {
        for args in [
            &["run", "--", "env"][..],
            &["run", "--no-dontcache", "--uncached", "--", "env"],
            &["run", "--off", "--", "env"],
        ] {
            let direct = env_of(Path::new(env!("CARGO_BIN_EXE_ahead-full")), args, xdg);
            let before = calls();
            let quick = env_of(&front, args, xdg);
            assert_eq!(quick, direct, "{args:?}, XDG_STATE_HOME set: {xdg}");
            assert_eq!(calls() - before, 0, "{args:?}: handed on");
            if args[1] != "--off" {
                let preload = quick.iter().find(|l| l.starts_with("LD_PRELOAD=")).unwrap();
                assert!(
                    preload.ends_with(&"/libahead_shim.so:libm.so.6"),
                    "{preload}"
                );
            }
        }
    }
    // A static program: ahead-full says the preload cannot act on it.
    if let Some(ldconfig) = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
    {
        let before = calls();
        let (code, _, e) = run(&front, &["run", "--", s(ldconfig), "-p"]);
        assert_eq!(code, Some(0), "{e}");
        if e.contains("statically linked") {
            assert_eq!(calls() - before, 1, "a static program was not handed on");
        }
    }
    // ahead-full refuses a launcher of another build, and a launcher alone
    // says what it lacks.
    let o = Command::new(env!("CARGO_BIN_EXE_ahead-full"))
        .arg("--version")
        .env("AHEAD_FRONT_BUILD", "another")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("of another build"), "{}", stderr(&o));
    std::fs::remove_file(&full).unwrap();
    let (code, _, e) = run(&front, &["--version"]);
    assert_eq!(code, Some(1));
    assert!(e.contains("ahead-full"), "{e}");
}

/// The launcher finds and starts a program as `ahead-full` does (the
/// C library's `execvp`), whichever path takes it: a file that cannot be
/// executed or a directory earlier in PATH, an empty PATH entry (the
/// current directory), an executable with no `#!` (run by `/bin/sh`), a
/// program named by a path, one that is missing, an empty name, an
/// environment too large for the early path's arrays, and an `LD_PRELOAD`
/// too long for its buffer. Status, output and errors are compared.
#[test]
fn the_launcher_finds_and_starts_programs_as_execvp_does() {
    use std::os::unix::fs::PermissionsExt;
    let t = scratch();
    let dir = t.path();
    let state = dir.join("state");
    let cwd = dir.join("cwd");
    for d in [&state, &cwd, &dir.join("a"), &dir.join("b"), &dir.join("c")] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let file = |path: PathBuf, text: &str, mode: u32| {
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    // a/prog cannot be executed, a/isdir is a directory: both passed over.
    file(dir.join("a/prog"), "#!/bin/sh\necho a\n", 0o644);
    std::fs::create_dir(dir.join("a/isdir")).unwrap();
    file(dir.join("b/prog"), "#!/bin/sh\necho b \"$@\"\n", 0o755);
    file(dir.join("b/isdir"), "#!/bin/sh\necho b-isdir\n", 0o755);
    file(dir.join("b/plain"), "echo no-hashbang \"$1\"\n", 0o755);
    file(cwd.join("here"), "#!/bin/sh\necho here\n", 0o755);
    // After the empty entry: found only if the current directory is
    // skipped.
    file(dir.join("c/here"), "#!/bin/sh\necho c\n", 0o755);
    let path = format!(
        "{}:{}::{}:/usr/bin:/bin",
        s(&dir.join("a")),
        s(&dir.join("b")),
        s(&dir.join("c"))
    );
    let run = |exe: &str, args: &[&str], extra: &[(String, String)]| {
        let mut c = Command::new(exe);
        c.args(args)
            .current_dir(&cwd)
            .env("PATH", &path)
            .env("XDG_STATE_HOME", &state)
            .env_remove("LD_PRELOAD");
        for (k, v) in extra {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (o.status.code(), s_out(&o), stderr(&o))
    };
    let launcher = env!("CARGO_BIN_EXE_ahead");
    let full = env!("CARGO_BIN_EXE_ahead-full");
    // The libraries placed.
    assert_eq!(run(launcher, &["run", "--", "true"], &[]).0, Some(0));
    let many: Vec<(String, String)> = (0..1100)
        .map(|i| (format!("AHEAD_TEST_{i}"), i.to_string()))
        .collect();
    let long = vec![("LD_PRELOAD".to_string(), ":".repeat(10_000))];
    type Vars = [(String, String)];
    let cases: [(&[&str], &Vars); 11] = [
        (&["run", "--", "prog", "x"], &[]),
        (&["run", "--off", "--", "prog", "x"], &[]),
        (&["run", "--", "isdir"], &[]),
        (&["run", "--", "here"], &[]),
        (&["run", "--", "plain", "y"], &[]),
        (&["run", "--off", "--", "plain", "y"], &[]),
        (&["run", "--", "./here"], &[]),
        (&["run", "--", "missing-program"], &[]),
        (&["run", "--", ""], &[]),
        (&["run", "--", "prog", "z"], &many),
        (&["run", "--", "prog", "w"], &long),
    ];
    for (args, extra) in cases {
        let quick = run(launcher, args, extra);
        let direct = run(full, args, extra);
        assert_eq!(quick, direct, "{args:?} ({} more variables)", extra.len());
    }
    // Sanity: the programs ran where they should.
    assert_eq!(run(launcher, &["run", "--", "prog", "x"], &[]).1, "b x\n");
    assert_eq!(
        run(launcher, &["run", "--", "plain", "y"], &[]).1,
        "no-hashbang y\n"
    );
    assert_eq!(run(launcher, &["run", "--", "here"], &[]).1, "here\n");
}

/// The output of `c`, whose program may be a copy this test process just
/// wrote: a child another thread forks meanwhile holds the copy's
/// descriptor open until it execs, and an exec of the copy then fails
/// with ETXTBSY for that moment.
fn output_of_copy(c: &mut Command) -> Output {
    for _ in 0..100 {
        match c.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            o => return o.unwrap(),
        }
    }
    panic!("{c:?}: text file busy for 2 s");
}

/// On x86-64 Linux the launcher execs the program before its own C library
/// starts (src/early.rs): between the launcher's `execve` and the
/// program's, no `arch_prctl` (glibc's start sets its thread pointer with
/// it), and the launcher's first system call is its own. Other forms are
/// left to the C library's start and `main`.
#[test]
fn the_launcher_starts_a_program_before_its_own_c_library_starts() {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        eprintln!("SKIP: the early start is x86-64 Linux's");
        return;
    }
    let Some(strace) = need(&["strace"], "strace to see the launcher's system calls") else {
        return;
    };
    // The libraries placed (the first run's work is ahead-full's).
    assert!(out(&mut ahead_cmd(&["run", "--", "true"])).status.success());
    let calls = |args: &[&str]| {
        let o = Command::new(&strace)
            .args(["-f", "-qq", "-e", "trace=execve,arch_prctl,geteuid,brk"])
            .arg(env!("CARGO_BIN_EXE_ahead"))
            .args(args)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        // The calls after the launcher's exec, up to the program's.
        let e = stderr(&o);
        let names: Vec<String> = e
            .lines()
            .filter_map(|l| {
                let l = l
                    .split_once(' ')
                    .filter(|(p, _)| p.starts_with("[pid"))
                    .map_or(l, |(_, r)| r.trim_start());
                l.split_once('(').map(|(n, _)| n.to_string())
            })
            .collect();
        let second = names
            .iter()
            .skip(1)
            .position(|n| n == "execve")
            .map(|i| i + 1);
        names[1..second.map_or(names.len(), |i| i + 1)].to_vec()
    };
    for args in [
        &["run", "--", "true"][..],
        &["run", "--off", "--", "true"],
        &["run", "--uncached", "--", "true"],
    ] {
        let before = calls(args);
        assert_eq!(
            before.first().map(String::as_str),
            Some(if args[1] == "--off" {
                "execve"
            } else {
                "geteuid"
            }),
            "{args:?}: {before:?}"
        );
        assert!(
            !before.iter().any(|n| n == "arch_prctl" || n == "brk"),
            "{args:?}: the C library started first: {before:?}"
        );
    }
    // A form the early path leaves alone starts the C library.
    let t = scratch();
    let stats = t.path().join("s.json");
    let before = calls(&["run", "--stats", s(&stats), "--", "true"]);
    assert!(before.iter().any(|n| n == "arch_prctl"), "{before:?}");
}

fn s_out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The sections of an ELF64 little-endian file: (name, size).
fn elf_sections(path: &Path) -> Vec<(String, u64)> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(
        &b[..6],
        b"\x7fELF\x02\x01",
        "{}: not ELF64 LE",
        path.display()
    );
    let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (shoff, shentsize) = (u64_at(0x28) as usize, u16_at(0x3a));
    let (shnum, shstrndx) = (u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let at = strtab + u32_at(h);
            let end = at + b[at..].iter().position(|&c| c == 0).unwrap();
            let name = String::from_utf8_lossy(&b[at..end]).into_owned();
            (name, u64_at(h + 0x20))
        })
        .collect()
}

/// What a program under `ahead run` pays to start where ahead's own files
/// have left the page cache is reading them: a page fault reads around
/// itself, up to the disk's `read_ahead_kb`, so a file's size, not the
/// pages used, is what is read. The launcher carried its debug information
/// (51 MB in a release build): `ahead run --off -- sqlite3 …` read 16 MB
/// more than the query alone on the steady device (docs/run.md). The
/// core's 10 MiB descriptor table belongs in .bss; an earlier core had it
/// in .data, an 11 MB file.
#[test]
fn what_a_program_under_ahead_run_maps_is_what_it_runs() {
    let launcher = Path::new(env!("CARGO_BIN_EXE_ahead"));
    // (`.debug_gdb_scripts`, a few bytes that are loaded, may stay.)
    let debug: u64 = elf_sections(launcher)
        .iter()
        .filter(|(n, _)| n.starts_with(".debug"))
        .map(|(_, size)| size)
        .sum();
    assert!(
        debug < 4096,
        "the launcher carries {debug} bytes of debug information"
    );

    // `--stats` loads the core at once; `cat` shows what the process maps.
    let dir = scratch();
    let stats = dir.path().join("stats");
    let o = out(&mut ahead_cmd(&[
        "run",
        "--stats",
        s(&stats),
        "--",
        "cat",
        "/proc/self/maps",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let maps = String::from_utf8_lossy(&o.stdout).into_owned();
    for lib in ["libahead_shim.so", "libahead_preload.so"] {
        let path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.ends_with(lib))
            .unwrap_or_else(|| panic!("{lib} not mapped:\n{maps}"));
        for (name, size) in elf_sections(Path::new(path)) {
            assert!(
                !name.starts_with(".debug") || size < 4096,
                "{path} carries {name}"
            );
            // The descriptor tables are all zeros at start: .bss, not in
            // the file.
            assert!(
                name != ".data" || size < 1 << 20,
                "{path}: {name} of {size} bytes"
            );
        }
    }
}
