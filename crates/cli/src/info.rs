//! `spmv info FILE`: dimensions, nonzeros, the feature vector and, for a scheme, its bins.

use anyhow::Context;
use sparse::{Binning, Features, Scheme};
use std::path::PathBuf;

/// Arguments of `spmv info`.
#[derive(clap::Args)]
pub struct Args {
    /// Matrix Market file (.mtx or .mtx.gz).
    file: PathBuf,
    /// Also list the bins of this scheme: a granularity U (e.g. 100) or `single`.
    #[arg(long)]
    scheme: Option<Scheme>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Accept complex matrices by keeping their real part.
    #[arg(long)]
    real_part: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let opts = sparse::mm::ReadOptions {
        complex_real_part: args.real_part,
    };
    let a = sparse::mm::read_path::<f64>(&args.file, &opts)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let f = Features::of(&a);
    let binning = args.scheme.map(|s| Binning::new(a.row_ptr(), s));
    let bins: Vec<serde_json::Value> = binning
        .iter()
        .flat_map(|b| {
            b.nonempty_bins().map(move |bin| {
                serde_json::json!({"bin": bin, "rows": b.row_count(bin), "nnz": b.bin_nnz[bin]})
            })
        })
        .collect();
    if args.json {
        let mut o = serde_json::json!({
            "file": args.file.display().to_string(),
            "rows": a.nrows(),
            "cols": a.ncols(),
            "nnz": a.nnz(),
            "features": f.to_map(),
            "feature_order": &sparse::FEATURE_NAMES[..],
        });
        if let Some(b) = &binning {
            o["scheme"] = serde_json::json!(b.scheme);
            o["bins"] = serde_json::Value::Array(bins);
        }
        println!("{}", serde_json::to_string(&o)?);
        return Ok(());
    }
    println!("{}", args.file.display());
    println!("rows {}  cols {}  nnz {}", a.nrows(), a.ncols(), a.nnz());
    println!("features:");
    for (name, v) in f.named() {
        println!("  {name:<24} {v}");
    }
    if let Some(b) = &binning {
        println!("scheme {} (U = {} rows per virtual row):", b.scheme, b.u);
        println!("  {:>4} {:>12} {:>14}", "bin", "rows", "nnz");
        for bin in b.nonempty_bins() {
            println!(
                "  {:>4} {:>12} {:>14}",
                bin,
                b.row_count(bin),
                b.bin_nnz[bin]
            );
        }
    }
    Ok(())
}
