//! `ahead mount`: a bucket (or a prefix of one) as a read-only directory,
//! every file read through ahead's engine (crates/ahead-mount).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::read::EngineArgs;

/// Arguments of `ahead mount`.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// The bucket or prefix: `s3://bucket[/prefix]`, with the AWS_*
    /// environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, …).
    url: String,
    /// An empty directory to mount it on.
    mountpoint: PathBuf,
    /// Threads serving the kernel's requests (readers served at once).
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Let other users read the files (needs root, or user_allow_other in
    /// /etc/fuse.conf).
    #[arg(long)]
    allow_other: bool,
    /// An object_store option, KEY=VALUE (endpoint, allow_http, region,
    /// access_key_id, …), over the environment; repeatable.
    #[arg(long = "option", short = 'o', value_name = "KEY=VALUE")]
    options: Vec<String>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Runs `ahead mount` until the file system is unmounted (`fusermount3
/// -u DIR`, `umount DIR`) or the process gets SIGINT, SIGTERM or SIGHUP,
/// which unmount it.
pub fn run(args: MountArgs) -> Result<()> {
    let options = args
        .options
        .iter()
        .map(|o| {
            o.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("--option {o}: KEY=VALUE"))
        })
        .collect::<Result<Vec<_>>>()?;
    let meta = std::fs::metadata(&args.mountpoint)
        .with_context(|| format!("{}", args.mountpoint.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("{}: not a directory", args.mountpoint.display());
    }
    let engine = ahead::Engine::new(args.engine.config()?)?;
    let fs = ahead_mount::ObjectFs::new(&args.url, &options, engine)
        .with_context(|| args.url.clone())?;
    let opts = ahead_mount::MountOptions {
        threads: args.threads,
        allow_other: args.allow_other,
    };
    // A signal unmounts; serve then returns.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    let at = args.mountpoint.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            if let Err(e) = ahead_mount::unmount(&at) {
                eprintln!("ahead: unmounting {}: {e}", at.display());
            }
        }
    });
    eprintln!(
        "ahead: {} mounted on {} (read-only); unmount with fusermount3 -u or Ctrl-C",
        args.url,
        args.mountpoint.display()
    );
    ahead_mount::serve(fs, &args.mountpoint, &opts)
        .with_context(|| format!("mounting on {}", args.mountpoint.display()))
}
