//! `spmv`: the command-line face of the project. Each subcommand lives in its own module.

mod info;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "spmv", version, about = "SpMV kernel selector: inspect, benchmark, predict and run")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a matrix's dimensions, features and (with --scheme) its bins.
    Info(info::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Info(a) => info::run(a),
    }
}
