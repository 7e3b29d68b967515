//! `halyard bench`: YCSB workloads against engines side by side.

use clap::Args;

/// Arguments of `halyard bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Directory for the engines' data.
    #[arg(long, default_value = "halyard-bench")]
    pub dir: std::path::PathBuf,
}

/// Runs the benchmark.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    Err(format!("halyard bench is not implemented yet (dir {})", args.dir.display()))
}
