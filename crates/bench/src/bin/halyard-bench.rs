//! `halyard bench` as a binary of this crate, so that its own features (notably
//! `rocksdb`) can be switched on with `cargo run -p halyard-bench --features rocksdb -- ...`
//! whatever the `halyard` crate enables, and so that the tests can run it as a process.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: halyard_bench::BenchArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = halyard_bench::run(&cli.args) {
        eprintln!("halyard bench: {e}");
        std::process::exit(1);
    }
}
