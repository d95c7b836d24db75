//! The binary CSR body (`application/vnd.spmv-select.csr`): a 40-byte header,
//! then `row_ptr`, `col_idx`, `values` and optionally x, all little-endian, so
//! that clients send large matrices without formatting numbers as text.
//!
//! Layout (offsets in bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SPMVCSR\0` |
//! | 8 | 2 | version, u16 = 1 |
//! | 10 | 1 | index width: 4 (u32) or 8 (u64) |
//! | 11 | 1 | value width: 4 (f32) or 8 (f64) |
//! | 12 | 4 | flags, u32: bit 0 = an x section follows (inline /spmv); other bits 0 |
//! | 16 | 8 | nrows, u64 |
//! | 24 | 8 | ncols, u64 |
//! | 32 | 8 | nnz, u64 |
//! | 40 | (nrows+1) * iw | row_ptr |
//! | .. | nnz * iw | col_idx |
//! | .. | nnz * vw | values |
//! | .. | ncols * vw | x, when flag bit 0 is set |
//!
//! The body must have exactly that length. The header is checked (magic,
//! version, widths, flags, sizes against the limits and against the body
//! length) before anything is allocated for the arrays; the arrays then go
//! through `Csr::try_new` like JSON CSR (rows sorted by column, duplicates
//! summed, structural errors 422) and values must be finite.

use crate::domain::config::{check_dims, Limits};
use crate::domain::error::ApiError;
use sparse::Csr;

/// The media type of the format.
pub const CONTENT_TYPE: &str = "application/vnd.spmv-select.csr";
/// The first 8 bytes of every body.
pub const MAGIC: [u8; 8] = *b"SPMVCSR\0";
/// The version this server reads and writes.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 40;
/// Flag bit: an x section of `ncols` values follows the matrix.
pub const FLAG_X: u32 = 1;

/// A checked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Number of rows.
    pub nrows: u64,
    /// Number of columns.
    pub ncols: u64,
    /// Number of stored entries.
    pub nnz: u64,
    /// Bytes of each index (4 or 8).
    pub index_width: u8,
    /// Bytes of each value (4 for f32, 8 for f64).
    pub value_width: u8,
    /// Whether an x section follows.
    pub has_x: bool,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BinaryCsr(msg.into())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// Reads and checks the header of `body`: magic, version, widths, flags,
    /// sizes within the limits (413) and a body length equal to what the
    /// header declares (400). Nothing is allocated.
    pub fn read(body: &[u8], limits: &Limits) -> Result<Header, ApiError> {
        if body.len() < HEADER_BYTES {
            return Err(bad(format!(
                "the body has {} bytes, fewer than the {HEADER_BYTES}-byte header",
                body.len()
            )));
        }
        if body[..8] != MAGIC {
            return Err(bad(format!(
                "the body does not start with the magic bytes \"SPMVCSR\\0\" (found {:?})",
                String::from_utf8_lossy(&body[..8])
            )));
        }
        let version = u16::from_le_bytes([body[8], body[9]]);
        if version != VERSION {
            return Err(bad(format!(
                "version {version} is not supported; this server reads version {VERSION}"
            )));
        }
        let (index_width, value_width) = (body[10], body[11]);
        if index_width != 4 && index_width != 8 {
            return Err(bad(format!(
                "index width {index_width} is not supported: use 4 (u32) or 8 (u64)"
            )));
        }
        if value_width != 4 && value_width != 8 {
            return Err(bad(format!(
                "value width {value_width} is not supported: use 4 (f32) or 8 (f64)"
            )));
        }
        let flags = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes"));
        if flags & !FLAG_X != 0 {
            return Err(bad(format!(
                "unknown flags {flags:#x}: only bit 0 (an x section follows) is defined"
            )));
        }
        let h = Header {
            nrows: u64_at(body, 16),
            ncols: u64_at(body, 24),
            nnz: u64_at(body, 32),
            index_width,
            value_width,
            has_x: flags & FLAG_X != 0,
        };
        check_dims(limits, h.nrows, h.ncols, h.nnz)?;
        let want = h.body_bytes();
        if want != Some(body.len() as u64) {
            return Err(bad(format!(
                "the header declares {} rows, {} columns, {} entries (index width {}, value width {}{}), \
                 which take {} bytes with the header, but the body has {} bytes",
                h.nrows,
                h.ncols,
                h.nnz,
                h.index_width,
                h.value_width,
                if h.has_x { ", with x" } else { "" },
                want.map_or_else(|| "more than 2^64".to_string(), |w| w.to_string()),
                body.len()
            )));
        }
        Ok(h)
    }

    /// The body length the header declares, `None` when it overflows.
    pub fn body_bytes(&self) -> Option<u64> {
        let (iw, vw) = (self.index_width as u64, self.value_width as u64);
        let ptr = self.nrows.checked_add(1)?.checked_mul(iw)?;
        let idx = self.nnz.checked_mul(iw)?;
        let val = self.nnz.checked_mul(vw)?;
        let x = if self.has_x {
            self.ncols.checked_mul(vw)?
        } else {
            0
        };
        (HEADER_BYTES as u64)
            .checked_add(ptr)?
            .checked_add(idx)?
            .checked_add(val)?
            .checked_add(x)
    }

    /// Bytes the parse holds beyond the body: the arrays as `Csr<f64>` (12 per
    /// entry, 4 per row), a sorting copy (12 per entry), the features and x.
    pub fn parse_estimate(&self) -> u64 {
        24 * self.nnz + 32 * (self.nrows + 1) + 16 * self.ncols
    }
}

/// Decodes `n` little-endian indices of `width` bytes into u32, naming the
/// first one that does not fit 32-bit indices.
fn indices(b: &[u8], width: u8, name: &str) -> Result<Vec<u32>, ApiError> {
    if width == 4 {
        return Ok(b
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect());
    }
    b.chunks_exact(8)
        .enumerate()
        .map(|(i, c)| {
            let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            u32::try_from(v).map_err(|_| {
                ApiError::Unprocessable(format!(
                    "invalid matrix: {name}[{i}] = {v} does not fit 32-bit indices"
                ))
            })
        })
        .collect()
}

/// Decodes little-endian f32 or f64 values into f64.
fn values(b: &[u8], width: u8) -> Vec<f64> {
    if width == 4 {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64)
            .collect()
    } else {
        b.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect()
    }
}

/// Parses a whole body into a validated, finite matrix within the limits and
/// the x section when there is one.
pub fn parse(body: &[u8], limits: &Limits) -> Result<(Csr<f64>, Option<Vec<f64>>), ApiError> {
    let h = Header::read(body, limits)?;
    let (iw, vw) = (h.index_width as usize, h.value_width as usize);
    // Lengths fit usize: the body holding them is in memory.
    let (nrows, ncols, nnz) = (h.nrows as usize, h.ncols as usize, h.nnz as usize);
    let mut at = HEADER_BYTES;
    let mut take = |n: usize| {
        let s = &body[at..at + n];
        at += n;
        s
    };
    let row_ptr = indices(take((nrows + 1) * iw), h.index_width, "row_ptr")?;
    let col_idx = indices(take(nnz * iw), h.index_width, "col_idx")?;
    let vals = values(take(nnz * vw), h.value_width);
    let x = h.has_x.then(|| values(take(ncols * vw), h.value_width));
    let a = Csr::try_new(nrows, ncols, row_ptr, col_idx, vals)?;
    a.check_finite()?;
    Ok((a, x))
}

/// Encodes a matrix (and x) in the format, with the given index and value
/// widths (4 or 8); values are rounded to f32 when the value width is 4.
pub fn encode(a: &Csr<f64>, index_width: u8, value_width: u8, x: Option<&[f64]>) -> Vec<u8> {
    assert!(matches!(index_width, 4 | 8) && matches!(value_width, 4 | 8));
    let h = Header {
        nrows: a.nrows() as u64,
        ncols: a.ncols() as u64,
        nnz: a.nnz() as u64,
        index_width,
        value_width,
        has_x: x.is_some(),
    };
    let mut out = Vec::with_capacity(h.body_bytes().unwrap_or(0) as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[index_width, value_width]);
    out.extend_from_slice(&(if h.has_x { FLAG_X } else { 0 }).to_le_bytes());
    for v in [h.nrows, h.ncols, h.nnz] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for &i in a.row_ptr().iter().chain(a.col_idx()) {
        match index_width {
            4 => out.extend_from_slice(&i.to_le_bytes()),
            _ => out.extend_from_slice(&(i as u64).to_le_bytes()),
        }
    }
    for &v in a.values().iter().chain(x.unwrap_or(&[])) {
        match value_width {
            4 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::small()
    }

    fn small() -> Csr<f64> {
        Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.5, -2.0, 4.0]).unwrap()
    }

    #[test]
    fn round_trip_in_every_width() {
        let a = small();
        for (iw, vw) in [(4, 4), (4, 8), (8, 4), (8, 8)] {
            let b = encode(&a, iw, vw, Some(&[1.0, 2.0, 3.0]));
            let (back, x) = parse(&b, &limits()).unwrap();
            assert_eq!(back, a, "widths {iw}/{vw}");
            assert_eq!(x.unwrap(), vec![1.0, 2.0, 3.0]);
        }
        let (_, x) = parse(&encode(&a, 4, 8, None), &limits()).unwrap();
        assert!(x.is_none());
    }

    #[test]
    fn header_errors_name_the_problem() {
        let good = encode(&small(), 4, 8, None);
        // (byte offset, value written there, what the error says)
        for (at, value, says) in [
            (0, b'X', "magic"),
            (8, 2, "version 2"),
            (10, 2, "index width 2"),
            (13, 1, "unknown flags"),
        ] {
            let mut b = good.clone();
            b[at] = value;
            let e = parse(&b, &limits()).unwrap_err().to_string();
            assert!(e.contains(says), "byte {at} = {value}: {e}");
        }
        let e = parse(&good[..good.len() - 1], &limits()).unwrap_err();
        assert!(e.to_string().contains("but the body has"), "{e}");
        assert_eq!(e.status().as_u16(), 400);
    }

    #[test]
    fn overflowing_declarations_are_refused_without_allocating() {
        let mut b = encode(&small(), 8, 8, None);
        b[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = parse(&b, &limits()).unwrap_err();
        assert_eq!(e.status().as_u16(), 413, "{e}");
        let big = Limits {
            max_nnz: usize::MAX,
            max_rows: usize::MAX,
            ..limits()
        };
        let e = parse(&b, &big).unwrap_err();
        assert!(e.to_string().contains("more than 2^64"), "{e}");
    }
}
