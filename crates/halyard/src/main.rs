//! The `halyard` command.

use clap::{Parser, Subcommand};

/// Halyard: a replicated key-value store for fast storage.
#[derive(Parser, Debug)]
#[command(name = "halyard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run benchmarks (YCSB workloads) against Halyard and other engines side by side.
    Bench(halyard_bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Bench(a) => halyard_bench::run(a),
    };
    if let Err(e) = r {
        eprintln!("halyard: {e}");
        std::process::exit(1);
    }
}
