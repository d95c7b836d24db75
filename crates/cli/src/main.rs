//! `spmv`: the command-line face of the project. Each subcommand lives in its own module.

mod bench;
mod bench_parse;
mod engine_args;
mod info;
mod predict;
mod run;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "spmv",
    version,
    about = "SpMV kernel selector: inspect, benchmark, predict and run"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a matrix's dimensions, features and (with --scheme) its bins.
    Info(info::Args),
    /// Matrix Market parse throughput beside scipy, and the analysis overhead in SpMV-equivalents.
    BenchParse(bench_parse::Args),
    /// Time every kernel on whole matrices beside the CPU and the device's copy bandwidth.
    Bench(bench::Args),
    /// Compute y = A x on the OpenCL device and print y, one value per line.
    Run(run::Args),
    /// Print the plan the selector makes for a matrix (features, scheme, kernel per bin) and why.
    Predict(predict::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Info(a) => info::run(a),
        Command::BenchParse(a) => bench_parse::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Run(a) => run::run(a),
        Command::Predict(a) => predict::run(a),
    }
}
