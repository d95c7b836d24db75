//! `spmv run`: y = A x on the OpenCL device, y printed one value per line in
//! full (round-trip) precision, so anyone can check our answer with their tools.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use engine::{Engine, LaunchMode};
use sparse::mm::{read_path, ReadOptions};
use sparse::{Binning, Csr, KernelId, Plan, Scheme};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// Arguments of `spmv run`.
#[derive(ClapArgs, Debug)]
#[command(
    after_help = "Plan: --kernel K runs K on the whole matrix (with --scheme U: K on every bin of U); \
--scheme U alone picks a kernel per bin from the bin's mean row length (serial, subvector-X, CSR-Adaptive for the last bin). \
Without either, the plan is the trained model's for this device and precision (from --model, or the models folder), \
or the rule baseline when no model matches; `spmv predict` shows that plan and why."
)]
pub struct Args {
    /// Matrix Market file (.mtx or .mtx.gz).
    pub matrix: PathBuf,
    /// Text file with x, one value per line (blank lines and lines starting with % or # are skipped); default all ones.
    #[arg(long)]
    pub x: Option<PathBuf>,
    /// Precision of the computation: f32 or f64.
    #[arg(long, default_value = "f64")]
    pub precision: sparse::Precision,
    /// Kernel to run (any name `spmv bench` prints: serial, subvector2..subvector128, vector, csr_adaptive, merge_path, merge_tile).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Binning scheme: `single` or a granularity U.
    #[arg(long)]
    pub scheme: Option<String>,
    /// Launch mode: grouped (one launch per kernel), per_bin (one per bin) or fused (the row-mapped bins in one launch).
    #[arg(long, default_value = "grouped", value_parser = ["grouped", "per_bin", "fused"])]
    pub mode: String,
    /// OpenCL device (platform or device name substring); default env SPMV_DEVICE, else the best device.
    #[arg(long, env = "SPMV_DEVICE")]
    pub device: Option<String>,
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
    /// Accept complex matrices by keeping the real part.
    #[arg(long)]
    pub real_part: bool,
    /// Model file used when neither --kernel nor --scheme is given (default: the
    /// models folder's model matching the device and precision).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Models folder (default: env SPMV_MODELS_DIR, else `models/`).
    #[arg(long, alias = "models", env = "SPMV_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
}

/// A kernel for a bin from its mean row length: X work-items for rows of about X
/// nonzeros, CSR-Adaptive for the last bin (rows of 99 and more, possibly huge).
pub fn heuristic_kernel(bin: usize) -> KernelId {
    match bin {
        0..=1 => KernelId::Serial,
        b if b >= sparse::MAX_BIN => KernelId::CsrAdaptive,
        b => {
            let x = (b as u32).next_power_of_two().clamp(2, 128);
            KernelId::Subvector(x)
        }
    }
}

fn read_x(path: &PathBuf, n: usize) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading x from {}", path.display()))?;
    let mut x = Vec::with_capacity(n);
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('%') || t.starts_with('#') {
            continue;
        }
        let v: f64 = t
            .parse()
            .with_context(|| format!("{} line {}: '{t}' is not a number", path.display(), i + 1))?;
        x.push(v);
    }
    if x.len() != n {
        // Bad data (exit 65), not a failure of the tool.
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} holds {} values but the matrix has {n} columns",
                path.display(),
                x.len()
            ),
        )
        .into());
    }
    Ok(x)
}

fn plan_for(
    a_rows: &[u32],
    kernel: Option<KernelId>,
    scheme: Option<Scheme>,
) -> Option<(Plan, String)> {
    Some(match (kernel, scheme) {
        (Some(k), None) => (Plan::single(k), format!("{k} on the whole matrix")),
        (Some(k), Some(s)) => (
            Plan::uniform(&Binning::new(a_rows, s), k),
            format!("{k} on every bin of scheme {s}"),
        ),
        (None, Some(s)) => {
            let b = Binning::new(a_rows, s);
            let plan = Plan {
                scheme: s,
                kernels: b
                    .nonempty_bins()
                    .map(|bin| (bin, heuristic_kernel(bin)))
                    .collect(),
            };
            (
                plan,
                format!("scheme {s}, kernel per bin by mean row length"),
            )
        }
        (None, None) => return None,
    })
}

/// y = A x in `precision` (values and x rounded to it), y widened to `f64`.
fn compute(
    e: &Engine,
    a: &Csr<f64>,
    x: &[f64],
    plan: &Plan,
    precision: sparse::Precision,
    mode: LaunchMode,
) -> Result<(Vec<f64>, engine::Timings)> {
    let m = e.upload_as(a, precision)?;
    let pp = e.prepare_any(&m, plan, mode)?;
    Ok(e.execute_any(&m, &pp, x)?)
}

/// An optional flag's value parsed; a value that does not parse is a usage
/// error naming the flag.
fn parse_flag<T>(flag: &str, value: Option<&str>) -> Result<Option<T>, crate::UsageError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    value
        .map(str::parse::<T>)
        .transpose()
        .map_err(|e| crate::UsageError(format!("{flag}: {e}")))
}

/// Runs `spmv run`.
pub fn run(args: Args) -> Result<()> {
    let kernel: Option<KernelId> = parse_flag("--kernel", args.kernel.as_deref())?;
    let scheme: Option<Scheme> = parse_flag("--scheme", args.scheme.as_deref())?;
    let mode: LaunchMode = args.mode.parse()?;
    let opts = ReadOptions {
        complex_real_part: args.real_part,
    };
    let a: Csr<f64> = read_path(&args.matrix, &opts)
        .with_context(|| format!("reading {}", args.matrix.display()))?;
    let x = match &args.x {
        Some(p) => read_x(p, a.ncols())?,
        None => vec![1.0; a.ncols()],
    };
    let e = Engine::with_config(&args.engine.config(args.device.as_deref()))?;
    let (plan, what) = match plan_for(a.row_ptr(), kernel, scheme) {
        Some(p) => p,
        None => {
            let dir = args
                .models_dir
                .clone()
                .unwrap_or_else(crate::predict::default_models_dir);
            let (sel, note) = crate::predict::choose_selector(
                args.model.as_deref(),
                &dir,
                Some(&crate::predict::identity(e.info())),
                args.precision.name(),
            )?;
            let pred = sel.plan(&sparse::Features::of(&a), a.rows());
            (pred.plan, format!("plan of the {note}"))
        }
    };
    let out = std::io::stdout();
    let mut w = BufWriter::new(out.lock());
    let (y, t) = compute(&e, &a, &x, &plan, args.precision, mode)?;
    for v in y {
        if args.precision == sparse::Precision::F32 {
            // Values came from f32: print them as f32 so the shortest round-trip form is used.
            writeln!(w, "{}", v as f32)?;
        } else {
            writeln!(w, "{v}")?;
        }
    }
    w.flush()?;
    eprintln!(
        "{} x {} ({} nonzeros) on {}: {what}; kernel {:.3} ms, end-to-end {:.3} ms",
        a.nrows(),
        a.ncols(),
        a.nnz(),
        e.info().name,
        t.kernel_ms(),
        t.wall_ms()
    );
    Ok(())
}
