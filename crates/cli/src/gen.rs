//! `spmv gen`: the generated matrices `spmv bench --gen` times, written as
//! binary CSR files (the service's `application/vnd.spmv-select.csr` layout,
//! docs/api.md) so that a peer library on the same machine times the very
//! same matrices (`bench/cusparse_bench.py` reads them) without a Matrix
//! Market text of hundreds of MB.

use anyhow::{Context, Result};
use clap::Parser;
use sparse::Csr;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
pub struct Args {
    /// Generated matrices, FAMILY:NNZ as for `spmv bench --gen` (e.g. power_law:4M, stencil2d:16M)
    #[arg(required = true)]
    pub specs: Vec<String>,
    /// Folder to write `gen_FAMILY_NNZ.csr` into (created when missing)
    #[arg(long)]
    pub out: PathBuf,
}

/// The file name of generated matrix `gen:FAMILY:NNZ` (the name `spmv bench`
/// gives it): `gen_FAMILY_NNZ.csr`.
pub fn file_name(family: &str, nnz: usize) -> String {
    format!("gen_{family}_{nnz}.csr")
}

/// `a` in the binary CSR layout: 40-byte header (magic, version 1, index
/// width 4, value width 8, no x), then row_ptr, col_idx and values,
/// little-endian.
pub fn write_csr(a: &Csr<f64>, path: &Path) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    w.write_all(b"SPMVCSR\0")?;
    w.write_all(&1u16.to_le_bytes())?;
    w.write_all(&[4u8, 8u8])?;
    w.write_all(&0u32.to_le_bytes())?;
    for v in [a.nrows(), a.ncols(), a.nnz()] {
        w.write_all(&(v as u64).to_le_bytes())?;
    }
    for &v in a.row_ptr() {
        w.write_all(&v.to_le_bytes())?;
    }
    for &v in a.col_idx() {
        w.write_all(&v.to_le_bytes())?;
    }
    for &v in a.values() {
        w.write_all(&v.to_le_bytes())?;
    }
    w.flush()?;
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    for spec in &args.specs {
        let (fam, nnz) = crate::bench::parse_gen(spec)?;
        // Seed 1, as `spmv bench --gen` generates it.
        let a = fam.generate(nnz, 1)?;
        let path = args.out.join(file_name(&fam.to_string(), nnz));
        write_csr(&a, &path)?;
        println!(
            "gen:{fam}:{nnz} -> {} ({}x{}, {} nonzeros)",
            path.display(),
            a.nrows(),
            a.ncols(),
            a.nnz()
        );
    }
    Ok(())
}
