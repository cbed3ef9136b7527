//! Builds the preload library of `ahead run` (crates/ahead-preload) and
//! hands its bytes to the binary, so that the one `ahead` executable,
//! wherever `cargo build` or `cargo install` left it, carries the library it
//! loads into programs. The library is built in release mode, stripped,
//! in a target directory of its own under OUT_DIR (a nested cargo cannot
//! share the outer build's directory lock).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let here =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let preload = here.join("../ahead-preload");
    let core = here.join("../ahead/src");
    for p in [
        preload.join("src"),
        preload.join("Cargo.toml"),
        core.clone(),
        here.join("../ahead/Cargo.toml"),
        here.join("../../Cargo.lock"),
    ] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let target_dir = out.join("preload-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--lib", "--quiet", "--manifest-path"])
        .arg(preload.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
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
        ])
        // The outer build's settings for its own target do not apply.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("running cargo for the preload library");
    assert!(status.success(), "building crates/ahead-preload failed");
    let lib = target_dir.join("release/libahead_preload.so");
    let dest = out.join("libahead_preload.so");
    std::fs::copy(&lib, &dest).expect("copying the preload library");
}
