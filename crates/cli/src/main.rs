//! `spmv`: the command-line face of the project. Each subcommand lives in its own module.

mod bench;
mod bench_overhead;
mod bench_parse;
mod check;
mod engine_args;
mod gen;
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
    /// Features + prediction + binning in SpMV-equivalents of the model's plan, per matrix and family (>= 1M nonzeros).
    BenchOverhead(bench_overhead::Args),
    /// Every kernel and precision against the reference on matrices and awkward shapes (non-zero exit on a mismatch).
    Check(check::Args),
    /// Compute y = A x on the OpenCL device and print y, one value per line.
    Run(run::Args),
    /// Print the plan the selector makes for a matrix (features, scheme, kernel per bin) and why.
    Predict(predict::Args),
    /// Write generated matrices (as `bench --gen` makes them) as binary CSR files for peer libraries.
    Gen(gen::Args),
}

/// Exit statuses in the style of sysexits.h, so scripts can tell a mistyped
/// command from bad data from a machine without a device.
mod exit {
    /// The command line was wrong (unknown flag or value, missing argument).
    pub const USAGE: i32 = 64;
    /// The input data was malformed or invalid.
    pub const DATA: i32 = 65;
    /// An input file does not exist or cannot be read.
    pub const NO_INPUT: i32 = 66;
    /// No OpenCL platform or no matching device.
    pub const UNAVAILABLE: i32 = 69;
    /// Anything else.
    pub const SOFTWARE: i32 = 70;
}

/// The exit status for an error, from the first typed error in its chain.
fn exit_code(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(e) = cause.downcast_ref::<sparse::SparseError>() {
            return match e {
                sparse::SparseError::Parse {
                    kind: sparse::error::ParseErrorKind::Io,
                    ..
                } => exit::NO_INPUT,
                _ => exit::DATA,
            };
        }
        if let Some(engine) = cause.downcast_ref::<engine::EngineError>() {
            use engine::EngineError as E;
            return match engine {
                E::NoPlatform(_) | E::NoDevice { .. } | E::UnsupportedPrecision { .. } => {
                    exit::UNAVAILABLE
                }
                E::XLength { .. } | E::TooBig { .. } => exit::DATA,
                _ => exit::SOFTWARE,
            };
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                    exit::NO_INPUT
                }
                std::io::ErrorKind::InvalidData => exit::DATA,
                _ => exit::SOFTWARE,
            };
        }
        if cause.downcast_ref::<std::num::ParseFloatError>().is_some() {
            return exit::DATA;
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return exit::USAGE;
        }
    }
    exit::SOFTWARE
}

/// A command line that parsed but asks for something impossible (an unknown
/// kernel name, a scheme off the ladder).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let result = match cli.command {
        Command::Info(a) => info::run(a),
        Command::BenchParse(a) => bench_parse::run(a),
        Command::Bench(a) => bench::run(a),
        Command::BenchOverhead(a) => bench_overhead::run(a),
        Command::Check(a) => check::run(a),
        Command::Run(a) => run::run(a),
        Command::Predict(a) => predict::run(a),
        Command::Gen(a) => gen::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(exit_code(&e));
    }
}
