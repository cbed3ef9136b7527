//! Builds the two libraries of `ahead run` and hands their bytes to the
//! binary, so that the one `ahead` executable, wherever `cargo build` or
//! `cargo install` left it, carries what it loads into programs:
//! * `libahead_shim.so` (crates/ahead-shim), the one preloaded into every
//!   process, small and idle until a process first reads a regular file;
//! * `libahead_preload.so` (crates/ahead-preload), the core the shim loads
//!   then.
//!
//! They are built in release mode, stripped, with link-time optimisation
//! and packed relative relocations (fewer pages for the loader to touch in
//! every process), in a target directory of their own under OUT_DIR (a
//! nested cargo cannot share the outer build's directory lock). A linker
//! without `-z pack-relative-relocs` (GNU ld before 2.38) gets the build
//! without it. The name of the directory `ahead run` places them in is a
//! checksum of both, computed here once.
//!
//! It also names the build (`AHEAD_BUILD_ID`, a checksum of every source
//! the tool is made from), which `ahead` hands to `ahead-full` so that one
//! never runs the other of another build (src/launch.rs).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let here =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = here.join("../..");
    // Everything the two programs are made of: a change anywhere here
    // names a new build.
    let sources: Vec<PathBuf> = [
        "crates/ahead/src",
        "crates/ahead/Cargo.toml",
        "crates/ahead-sim/src",
        "crates/ahead-sim/Cargo.toml",
        "crates/ahead-bench/src",
        "crates/ahead-bench/Cargo.toml",
        "crates/ahead-mount/src",
        "crates/ahead-mount/Cargo.toml",
        "crates/ahead-testkit/src",
        "crates/ahead-testkit/Cargo.toml",
        "crates/ahead-cli/src",
        "crates/ahead-cli/Cargo.toml",
        "crates/ahead-preload/src",
        "crates/ahead-preload/Cargo.toml",
        "crates/ahead-shim/src",
        "crates/ahead-shim/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    for p in &sources {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let target_dir = out.join("preload-target");
    let mut packed = true;
    if !build(&root, &target_dir, packed, None) {
        println!("cargo:warning=building the preload libraries without packed relocations");
        packed = false;
        assert!(
            build(&root, &target_dir, packed, None),
            "building crates/ahead-shim and crates/ahead-preload failed"
        );
    }
    // The shim again, linked as two segments (code and constants, then
    // data) where the linker can: the loader maps each segment of every
    // preloaded library in every process, and a read-only-after-start
    // part (RELRO) is one more `mprotect` that splits a mapping. lld
    // takes `--no-rosegment`, GNU ld `-z noseparate-code`; the first that
    // links is kept, else the shim as built above. Measured
    // (2026-11-30): 100 `posix_spawn`s of `/bin/true` a batch, the
    // variants and nothing preloaded in random order, 120 rounds, medians
    // of each round's ratio to nothing: the four-segment shim 1.134x, with
    // `--no-rosegment` alone (three segments, RELRO kept) 1.134x, two
    // segments 1.091x; an empty C library of four segments 1.10x, of two
    // 1.06-1.08x. What RELRO protects in the shim, the addresses of the
    // C library's functions it calls, it also keeps in writable atomics
    // (each hooked function's next definition, found at its first call).
    let merged = [
        ["-Wl,--no-rosegment", "-Wl,-z,norelro"],
        ["-Wl,-z,noseparate-code", "-Wl,-z,norelro"],
    ]
    .iter()
    .any(|args| build(&root, &target_dir, packed, Some(args)));
    // For the test that holds the shim to it (src/run.rs).
    println!("cargo:rustc-env=AHEAD_SHIM_MERGED={}", u8::from(merged));
    let mut sum = Vec::new();
    for (name, len) in [
        ("libahead_shim.so", "AHEAD_SHIM_LEN"),
        ("libahead_preload.so", "AHEAD_CORE_LEN"),
    ] {
        let bytes = std::fs::read(target_dir.join("release").join(name))
            .expect("reading a preload library");
        sum.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&bytes).to_le_bytes());
        std::fs::write(out.join(name), &bytes).expect("copying a preload library");
        println!("cargo:rustc-env={len}={}", bytes.len());
    }
    let preload = xxhash_rust::xxh3::xxh3_64(&sum);
    println!("cargo:rustc-env=AHEAD_PRELOAD_SUM={preload:016x}");
    let mut build = xxhash_rust::xxh3::Xxh3::new();
    build.update(&preload.to_le_bytes());
    for p in &sources {
        hash_tree(&mut build, p);
    }
    println!("cargo:rustc-env=AHEAD_BUILD_ID={:016x}", build.digest());
    static_launcher(&out);
    // The launcher without its debug information (`-S`, which GNU ld,
    // gold, lld and mold all take): the kernel reads a program's pages
    // from its file at exec, and where they have left the page cache (a
    // program idle for a while, or this machine's reclaimer after ~3 s)
    // a fault reads around it, up to the disk's `read_ahead_kb`, and on
    // into the debug sections behind the code. Measured on the steady
    // device (400 MiB/s, 20,000 IOPS), `ahead run --off -- sqlite3 DB
    // QUERY` with the launcher's pages evicted read 18,196 KiB where the
    // query alone read 1,844 (a 51 MB launcher, debug = 1); stripped, 2
    // MB and 1,900-3,832 KiB. `ahead-full` keeps its debug information:
    // it is not what a program under `ahead run` is started by.
    if env::var("TARGET").is_ok_and(|t| t.contains("-linux-")) {
        println!("cargo:rustc-link-arg-bin=ahead=-Wl,-S");
    }
    // The launcher's entry: its quick path, before the C library starts
    // (src/early.rs, built for this target only).
    if env::var("CARGO_CFG_TARGET_OS").is_ok_and(|o| o == "linux")
        && env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64")
    {
        println!("cargo:rustc-link-arg-bin=ahead=-Wl,-e,ahead_early");
    }
}

/// Links `ahead`, the launcher (src/front.rs), as a static
/// position-independent executable where the toolchain can: it is exec'd
/// in front of every program under `ahead run`, and a static one has no
/// loader to map the C library, the unwinder and the rest, or to resolve
/// their symbols. A copy of the launcher's exec-and-go
/// linked both ways, `perf stat -r 300` of it in front of `/bin/true`, two
/// rounds (2026-11-27, a slow day: `/bin/true` alone 2.74-2.77 ms): 2.2-2.6
/// ms added dynamic, 1.3 ms static. `ahead-full` stays as it is.
///
/// Cargo sets `crt-static` for a whole target, not one program (the shim,
/// the core and the Python module are shared objects, which it rules out),
/// so this is done at the link: `-static-pie`, and the libraries the
/// standard library names (`-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc`,
/// under `-Bdynamic`) found first in a directory of linker scripts, each
/// naming its static archive. Without the scripts `-Bdynamic` links
/// `libc.so` into the static executable, which then crashes at start.
///
/// Skipped, with the launcher linked as before, for another target than
/// the host's, outside glibc, where the toolchain has no `libc.a` or
/// `libgcc_eh.a` or cannot link and run a static PIE, or with
/// `AHEAD_DYNAMIC_LAUNCHER` set. A static launcher that cannot do a
/// thing (the password database, which glibc loads at run time, where
/// `$HOME` is not the caller's) hands the command to `ahead-full`, as any
/// launcher does for what it does not start itself (src/launch.rs).
fn static_launcher(out: &Path) {
    println!("cargo:rerun-if-env-changed=AHEAD_DYNAMIC_LAUNCHER");
    let target = env::var("TARGET").unwrap_or_default();
    if env::var_os("AHEAD_DYNAMIC_LAUNCHER").is_some()
        || target != env::var("HOST").unwrap_or_default()
        || !target.ends_with("-linux-gnu")
    {
        return;
    }
    let linker = env::var_os("RUSTC_LINKER").unwrap_or_else(|| "cc".into());
    let archive = |name: &str| -> Option<PathBuf> {
        let o = Command::new(&linker)
            .arg(format!("-print-file-name={name}"))
            .output()
            .ok()?;
        let p = PathBuf::from(String::from_utf8(o.stdout).ok()?.trim());
        (p.is_absolute() && p.is_file()).then_some(p)
    };
    let (Some(libc), Some(unwind)) = (archive("libc.a"), archive("libgcc_eh.a")) else {
        println!("cargo:warning=no libc.a or libgcc_eh.a: `ahead` is linked dynamically");
        return;
    };
    let dir = out.join("static-launcher");
    let probe = dir.join("probe");
    let static_pie = std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(dir.join("probe.c"), "int main(void) { return 0; }\n").is_ok()
        && Command::new(&linker)
            .arg("-static-pie")
            .arg(dir.join("probe.c"))
            .arg("-o")
            .arg(&probe)
            .status()
            .is_ok_and(|s| s.success())
        && Command::new(&probe).status().is_ok_and(|s| s.success());
    if !static_pie {
        println!("cargo:warning=no static PIE from {linker:?}: `ahead` is linked dynamically");
        return;
    }
    for (lib, ar) in [
        ("gcc_s", Some(unwind)),
        ("c", Some(libc.clone())),
        ("m", archive("libm.a")),
        ("pthread", archive("libpthread.a")),
        ("dl", archive("libdl.a")),
        ("rt", archive("librt.a")),
        ("util", archive("libutil.a")),
    ] {
        // glibc 2.34 and later keep the last four in libc (their archives
        // are empty); where one is missing, libc stands for it.
        let ar = ar.unwrap_or_else(|| libc.clone());
        std::fs::write(
            dir.join(format!("lib{lib}.so")),
            format!("INPUT({})\n", ar.display()),
        )
        .expect("writing a linker script for the static launcher");
    }
    println!("cargo:rustc-link-arg-bin=ahead=-static-pie");
    println!("cargo:rustc-link-arg-bin=ahead=-L{}", dir.display());
}

/// Adds `path` (a file, or a directory's files in name order) to `h`:
/// each file's path and bytes.
fn hash_tree(h: &mut xxhash_rust::xxh3::Xxh3, path: &Path) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .expect("listing a source directory")
            .map(|e| e.expect("reading a source directory").path())
            .collect();
        entries.sort();
        for e in entries {
            hash_tree(h, &e);
        }
    } else if let Ok(bytes) = std::fs::read(path) {
        h.update(path.as_os_str().as_encoded_bytes());
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
}

/// One cargo build of both libraries, or with `shim_link`, of the shim
/// alone with those arguments to its link; whether it succeeded.
fn build(root: &Path, target_dir: &Path, packed: bool, shim_link: Option<&[&str]>) -> bool {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    if shim_link.is_some() {
        c.args(["rustc", "--release", "--lib", "--quiet", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .args(["-p", "ahead-shim"]);
    } else {
        c.args(["build", "--release", "--lib", "--quiet", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .args(["-p", "ahead-shim", "-p", "ahead-preload"]);
    }
    c
        // The shim without the standard library: a quarter of the pages
        // to map in every process (crates/ahead-shim/src/lib.rs, `panic`).
        .args(["--features", "ahead-shim/no-std"])
        .arg("--target-dir")
        .arg(target_dir)
        .args([
            "--config",
            "profile.release.debug=0",
            "--config",
            "profile.release.strip=true",
            // A panic must never unwind into the program's C frames; abort
            // also drops the unwinder (libgcc_s) from what every program
            // under `ahead run` loads.
            "--config",
            "profile.release.panic=\"abort\"",
            "--config",
            "profile.release.lto=true",
            "--config",
            "profile.release.codegen-units=1",
        ]);
    if packed {
        c.args([
            "--config",
            "build.rustflags=[\"-C\", \"link-arg=-Wl,-z,pack-relative-relocs\"]",
        ]);
    }
    if let Some(args) = shim_link {
        c.arg("--");
        for a in args {
            c.args(["-C", &format!("link-arg={a}")]);
        }
    }
    // The outer build's settings for its own target do not apply.
    c.env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    c.status().is_ok_and(|s| s.success())
}
