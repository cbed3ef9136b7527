//! `ahead` — the command-line tool. Thin: parsing and output; the work is in
//! the libraries.

mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ahead",
    version,
    about = "A user-space read path for Linux files"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate readahead policies on modelled devices (the seeds' benchmarks).
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ahead: {e:#}");
            ExitCode::FAILURE
        }
    }
}
