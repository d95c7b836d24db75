//! The starting corpus: Matrix Market files (gzip ones decompressed and cut to
//! a size that keeps each run fast), JSON CSR documents, binary CSR bodies and
//! /spmv bodies built from the small ones, and multipart forms holding them.

use server::csr_binary::encode;
use std::path::Path;

/// Which reader an input is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Matrix Market text or gzip.
    MatrixMarket,
    /// A JSON CSR document or a JSON /spmv body.
    Json,
    /// A `multipart/form-data` /spmv body with boundary `B`.
    Multipart,
    /// A binary CSR body (`application/vnd.spmv-select.csr`), with or without x.
    BinaryCsr,
}

/// One corpus entry.
#[derive(Debug, Clone)]
pub struct Seed {
    /// Its kind.
    pub kind: Kind,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Reads every file of `dir` (not recursive) as Matrix Market seeds: the raw
/// bytes when small, and the text (gzip removed) cut to `max_len`.
pub fn from_dir(dir: &Path, max_len: usize, out: &mut Vec<Seed>) -> std::io::Result<usize> {
    let mut n = 0;
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    for p in paths {
        let raw = std::fs::read(&p)?;
        let text = match sparse::mm::gunzip_limited(&raw, 64 << 20) {
            Ok(t) if raw.starts_with(&[0x1f, 0x8b]) => t,
            _ => raw.clone(),
        };
        if raw.len() <= max_len {
            out.push(seed(Kind::MatrixMarket, raw));
        }
        let cut = text[..text.len().min(max_len)].to_vec();
        if text.len() <= 64 << 10 {
            add_derived(&text, out);
        }
        out.push(seed(Kind::MatrixMarket, cut));
        n += 1;
    }
    Ok(n)
}

fn seed(kind: Kind, bytes: Vec<u8>) -> Seed {
    Seed { kind, bytes }
}

/// JSON and multipart seeds from a small Matrix Market text: as a CSR object
/// when it parses, and inline (as a string or a part) either way.
fn add_derived(text: &[u8], out: &mut Vec<Seed>) {
    let opts = sparse::mm::ReadOptions {
        complex_real_part: true,
    };
    let ncols = match sparse::mm::read_bytes::<f64>(text, &opts) {
        Ok(a) => {
            let csr = serde_json::json!({
                "nrows": a.nrows(), "ncols": a.ncols(), "row_ptr": a.row_ptr(),
                "col_idx": a.col_idx(), "values": a.values(),
            });
            out.push(seed(Kind::Json, csr.to_string().into_bytes()));
            let mut spmv = csr.clone();
            spmv["x"] = serde_json::json!(vec![1.0; a.ncols()]);
            spmv["verify"] = serde_json::json!(true);
            out.push(seed(Kind::Json, spmv.to_string().into_bytes()));
            let x = vec![1.0; a.ncols()];
            out.push(seed(Kind::BinaryCsr, encode(&a, 4, 8, None)));
            out.push(seed(Kind::BinaryCsr, encode(&a, 8, 4, Some(&x))));
            a.ncols()
        }
        Err(_) => 3,
    };
    let s = String::from_utf8_lossy(text).into_owned();
    let x = serde_json::json!(vec![1.0; ncols]).to_string();
    let inline = serde_json::json!({"matrix": s, "x": serde_json::from_str::<serde_json::Value>(&x).unwrap_or_default(), "precision": "f64"});
    out.push(seed(Kind::Json, inline.to_string().into_bytes()));
    out.push(seed(Kind::Multipart, multipart(text, x.as_bytes())));
}

/// A multipart /spmv form (boundary `B`) with a matrix part and an x part.
pub fn multipart(matrix: &[u8], x: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(
        b"--B\r\nContent-Disposition: form-data; name=\"matrix\"; filename=\"m.mtx\"\r\n\r\n",
    );
    b.extend_from_slice(matrix);
    b.extend_from_slice(b"\r\n--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n");
    b.extend_from_slice(x);
    b.extend_from_slice(
        b"\r\n--B\r\nContent-Disposition: form-data; name=\"precision\"\r\n\r\nf32\r\n--B--\r\n",
    );
    b
}
