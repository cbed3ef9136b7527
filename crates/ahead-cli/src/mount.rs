//! `ahead mount`: a bucket (or a prefix of one) as a read-only directory,
//! every file read through ahead's engine (crates/ahead-mount).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::read::EngineArgs;

/// The mount's largest readahead window unless `--max-readahead` says
/// otherwise.
const MOUNT_MAX_READAHEAD: u64 = 16 << 20;

/// Arguments of `ahead mount`.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// The bucket or prefix: `s3://bucket[/prefix]`, with the AWS_*
    /// environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, …); or one
    /// object, `http(s)://host/path/NAME`, as the file NAME alone in the
    /// mount (a web server has no listing).
    url: String,
    /// An empty directory to mount it on.
    mountpoint: PathBuf,
    /// Threads taking the kernel's requests (a read waiting on the store
    /// holds none of them).
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// How long a directory's listing answers lookups before the store
    /// is listed again, in seconds (`ls` always lists again).
    #[arg(long, default_value_t = 1.0)]
    metadata_ttl: f64,
    /// Bypass the kernel's page cache and readahead for the files
    /// (FOPEN_DIRECT_IO): every read reaches ahead as the program made it.
    #[arg(long)]
    direct_io: bool,
    /// Do not store a backward reader's next blocks in the kernel's page
    /// cache ahead of it (`FUSE_NOTIFY_STORE`, 1 MiB at a time): each of
    /// its reads then reaches ahead as the program made it.
    #[arg(long)]
    no_backward_stores: bool,
    /// Return once the file system is mounted, serving it from a process
    /// in the background (its errors then go to the syslog-less void:
    /// run without --daemon to see them).
    #[arg(long)]
    daemon: bool,
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
    if args.daemon {
        return daemonize(&args.mountpoint);
    }
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
    let mut config = args.engine.config()?;
    if args.engine.max_readahead.is_none() {
        // A window must cover the network's bandwidth-delay product for a
        // forward reader to keep it busy: 250 MB/s at 30 ms to the first
        // byte is 7.5 MB. With 4 MiB windows `cat` of a 128 MiB object ran
        // at 107 MB/s on the s3 profile, with 16 MiB at 185 MB/s
        // (docs/mount.md).
        // The engine wants a budget of three windows: a smaller --cache
        // gets the largest window it allows, in whole MiB.
        let fits = (config.cache_bytes / 3) & !((1 << 20) - 1);
        config = config.with_max_readahead(MOUNT_MAX_READAHEAD.min(fits.max(1 << 20)));
    }
    let engine = ahead::Engine::new(config)?;
    let fs = ahead_mount::ObjectFs::new(&args.url, &options, engine)
        .with_context(|| args.url.clone())?
        .with_direct_io(args.direct_io)
        .with_backward_stores(!args.no_backward_stores)
        .with_metadata_ttl(std::time::Duration::from_secs_f64(
            args.metadata_ttl.clamp(0.0, 1e9),
        ));
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

/// `--daemon`: runs this same command without `--daemon` in a process
/// group of its own, its standard error into an unlinked temporary file
/// (read back if it fails before mounting; a closed pipe would make its
/// later messages fail), and returns once `mountpoint` is mounted,
/// printing the process's id.
fn daemonize(mountpoint: &std::path::Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding the ahead binary")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--daemon")
        .collect();
    let mut log = tempfile::tempfile().context("a temporary file for the mount's errors")?;
    let mut child = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log.try_clone()?)
        .process_group(0)
        .spawn()
        .context("starting the mount's process")?;
    let at =
        std::fs::canonicalize(mountpoint).with_context(|| format!("{}", mountpoint.display()))?;
    let start = std::time::Instant::now();
    loop {
        if is_mounted(&at) {
            outln!("{}", child.id());
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            use std::io::{Read, Seek};
            let mut err = String::new();
            let _ = log.seek(std::io::SeekFrom::Start(0));
            let _ = log.read_to_string(&mut err);
            anyhow::bail!("the mount's process exited ({status}): {}", err.trim());
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            anyhow::bail!("{} was not mounted within 60 s", at.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `dir` (canonical) is a mount point now.
fn is_mounted(dir: &std::path::Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(4) == dir.to_str())
    })
}
