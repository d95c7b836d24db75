//! x as a request carried it ([`XIn`]) and y as little-endian bytes: how each is
//! checked finite and converted into the device's staging buffers.

use crate::device::pool::Pooled;
use crate::domain::error::ApiError;
use sparse::{Precision, Scalar};

/// Parses x given as little-endian binary values of the precision's width.
pub fn parse_x_binary(bytes: &[u8], precision: Precision) -> Result<Vec<f64>, ApiError> {
    let w = precision.bytes();
    if !bytes.chunks_exact(w).remainder().is_empty() {
        return Err(ApiError::BadRequest(format!(
            "binary x has {} bytes, not a multiple of {w} (little-endian {precision} values)",
            bytes.len()
        )));
    }
    Ok(match precision {
        Precision::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        Precision::F64 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("chunk of 8")))
            .collect(),
    })
}

/// x as a request carried it: values (JSON, multipart, binary CSR's trailing
/// x), or the little-endian bytes of an `application/octet-stream` body, kept as
/// they came (for an uploaded matrix on a device, received straight into a
/// reused buffer: `http::extract::binary_x`) and handed to the device as they are, or
/// converted once, on the device worker, straight into the pinned staging
/// buffer (the request path makes no other copy of them).
#[derive(Debug, Clone)]
pub enum XIn {
    /// Values.
    Values(Vec<f64>),
    /// Little-endian values of `precision`, their count checked (a whole number).
    Binary {
        /// The body.
        bytes: axum::body::Bytes,
        /// The width of each value.
        precision: Precision,
        /// Whether every value was already checked finite as it arrived
        /// (`http::extract::binary_x::receive_x`), so [`XIn::check_finite`] has nothing to do.
        checked: bool,
        /// Whether the bytes lie in pinned host memory (received into a
        /// pinned buffer of the matrix's x pool).
        pinned: bool,
        /// The shared memory the bytes are (received into a shared buffer
        /// of the matrix's x pool), for the kernels to read in place.
        shared: Option<engine::SharedView>,
    },
}

impl XIn {
    /// Binary x: checks that the bytes hold a whole number of values.
    pub fn binary(bytes: axum::body::Bytes, precision: Precision) -> Result<XIn, ApiError> {
        let w = precision.bytes();
        if !bytes.len().is_multiple_of(w) {
            return Err(ApiError::BadRequest(format!(
                "binary x has {} bytes, not a multiple of {w} (little-endian {precision} values)",
                bytes.len()
            )));
        }
        Ok(XIn::Binary {
            bytes,
            precision,
            checked: false,
            pinned: false,
            shared: None,
        })
    }

    /// Binary x received by `http::extract::binary_x::receive_x`: its length matches
    /// the matrix and every value was checked finite on arrival.
    pub fn received(x: Pooled, precision: Precision) -> XIn {
        XIn::Binary {
            pinned: x.is_pinned(),
            shared: x.shared_view(),
            bytes: x.into_bytes(),
            precision,
            checked: true,
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            XIn::Values(v) => v.len(),
            XIn::Binary {
                bytes, precision, ..
            } => bytes.len() / precision.bytes(),
        }
    }

    /// Whether x is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as `f64` (for the reference SpMV of `verify`).
    pub fn to_values(&self) -> Vec<f64> {
        match self {
            XIn::Values(v) => v.clone(),
            XIn::Binary {
                bytes, precision, ..
            } => parse_x_binary(bytes, *precision).unwrap_or_default(),
        }
    }

    /// The bytes of a binary x of `T`'s width as they came, unchecked: a
    /// little-endian device takes them as they are
    /// ([`engine::Engine::execute_le`]) while [`XIn::check_finite`] runs.
    /// `None` for x given as values or in another width.
    pub fn le_bytes_of_width(&self, width: usize) -> Option<engine::LeBytes<'_>> {
        match self {
            XIn::Binary {
                bytes,
                precision,
                pinned,
                shared,
                ..
            } if precision.bytes() == width => Some(engine::LeBytes {
                bytes,
                pinned: *pinned,
                shared: shared.as_ref(),
            }),
            _ => None,
        }
    }

    /// Checks that every value of a binary x is finite, in one pass over the
    /// body's bytes with no copy (x given as values is checked as it is
    /// converted, by [`XIn::fill`]).
    pub fn check_finite(&self) -> Result<(), ApiError> {
        match self {
            XIn::Binary {
                bytes,
                precision,
                checked: false,
                ..
            } => check_finite_le(bytes, *precision, 0),
            _ => Ok(()),
        }
    }

    /// Converts x into `out` (`out.len()` values), checking the length and that
    /// every value is finite in `T`.
    pub fn fill<T: Scalar>(&self, out: &mut [T]) -> Result<(), ApiError> {
        if self.len() != out.len() {
            return Err(ApiError::XLength {
                expected: out.len(),
                found: self.len(),
            });
        }
        match self {
            XIn::Values(v) => x_into(v, out),
            XIn::Binary {
                bytes, precision, ..
            } => fill_le(bytes, *precision, out),
        }
    }
}

/// Converts little-endian values of `precision` into `out` (as many), each
/// checked finite in `T`.
fn fill_le<T: Scalar>(bytes: &[u8], precision: Precision, out: &mut [T]) -> Result<(), ApiError> {
    match precision {
        Precision::F32 => fill_values(
            bytes
                .as_chunks::<4>()
                .0
                .iter()
                .map(|c| f32::from_le_bytes(*c) as f64),
            out,
        ),
        Precision::F64 => fill_values(
            bytes
                .as_chunks::<8>()
                .0
                .iter()
                .map(|c| f64::from_le_bytes(*c)),
            out,
        ),
    }
}

/// Checks that every little-endian value of `precision` in `bytes` (a whole
/// number of them) is finite; the first that is not is named by its index,
/// counted from `first` (the index of the first value in `bytes`).
pub(crate) fn check_finite_le(
    bytes: &[u8],
    precision: Precision,
    first: usize,
) -> Result<(), ApiError> {
    match precision {
        Precision::F32 => check_le(bytes.as_chunks::<4>().0, |c| f32::from_le_bytes(c) as f64),
        Precision::F64 => check_le(bytes.as_chunks::<8>().0, f64::from_le_bytes),
    }
    .map_err(|(i, v)| {
        let i = first + i;
        ApiError::NonFinite(format!("x[{i}] = {v:?} is not finite in {precision}"))
    })
}

/// Writes `values` converted to `T` into `out`, refusing the first one that is
/// not finite in `T` (the caller has checked the count). The conversion and
/// the check are separate branch-free passes, so both vectorise: on the
/// request path this is one pass over x at about memory speed.
fn fill_values<T: Scalar>(
    values: impl Iterator<Item = f64> + Clone,
    out: &mut [T],
) -> Result<(), ApiError> {
    for (v, o) in values.clone().zip(out.iter_mut()) {
        *o = T::from_f64(v);
    }
    if all_finite(out) {
        return Ok(());
    }
    let i = out
        .iter()
        .position(|v| !v.is_finite())
        .expect("a value is not finite");
    let v = values.clone().nth(i).unwrap_or(f64::NAN);
    Err(ApiError::NonFinite(format!(
        "x[{i}] = {v:?} is not finite in {}",
        T::NAME
    )))
}

/// Checks that every little-endian value is finite; else the index and value
/// of the first that is not. Blocks of a few thousand values are folded
/// without early exit (vector code), and only a failing block is searched.
fn check_le<const W: usize>(
    values: &[[u8; W]],
    decode: impl Fn([u8; W]) -> f64,
) -> Result<(), (usize, f64)> {
    const BLOCK: usize = 4096;
    for (b, block) in values.chunks(BLOCK).enumerate() {
        if block.iter().fold(true, |ok, c| ok & decode(*c).is_finite()) {
            continue;
        }
        for (i, c) in block.iter().enumerate() {
            let v = decode(*c);
            if !v.is_finite() {
                return Err((b * BLOCK + i, v));
            }
        }
    }
    Ok(())
}

/// Whether every value is finite: a fold without early exit, which the
/// compiler turns into vector code.
fn all_finite<T: Scalar>(v: &[T]) -> bool {
    v.iter().fold(true, |ok, x| ok & x.is_finite())
}

/// Converts x into `out` (the device's pinned staging buffer on the request
/// path), checking its length and that every value is finite in `T`.
pub fn x_into<T: Scalar>(x: &[f64], out: &mut [T]) -> Result<(), ApiError> {
    if x.len() != out.len() {
        return Err(ApiError::XLength {
            expected: out.len(),
            found: x.len(),
        });
    }
    fill_values(x.iter().copied(), out)
}

/// Encodes y as little-endian bytes.
pub fn y_binary<T: Scalar>(y: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; y.len() * T::BYTES];
    y_binary_into(y, &mut out);
    out
}

/// Writes y as little-endian bytes into `out` (`y.len() * T::BYTES` bytes).
/// Each width is one fixed-size store per value, which compiles to a copy.
pub fn y_binary_into<T: Scalar>(y: &[T], out: &mut [u8]) {
    match T::BYTES {
        4 => {
            for (o, v) in out.as_chunks_mut::<4>().0.iter_mut().zip(y) {
                *o = (v.to_f64() as f32).to_le_bytes();
            }
        }
        _ => {
            for (o, v) in out.as_chunks_mut::<8>().0.iter_mut().zip(y) {
                *o = v.to_f64().to_le_bytes();
            }
        }
    }
}

impl engine::XSource for XIn {
    type Error = ApiError;
    fn fill<T: engine::DeviceScalar>(&self, out: &mut [T]) -> Result<(), ApiError> {
        XIn::fill(self, out)
    }
    fn le_bytes(&self, width: usize) -> Option<engine::LeBytes<'_>> {
        XIn::le_bytes_of_width(self, width)
    }
    fn check(&self) -> Result<(), ApiError> {
        XIn::check_finite(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_x_fills_the_staging_buffer_checking_length_and_finiteness() {
        let b = axum::body::Bytes::from(y_binary(&[1.5f64, -2.0, 3.0]));
        let x = XIn::binary(b.clone(), Precision::F64).unwrap();
        assert_eq!(x.len(), 3);
        let mut out = [0f32; 3];
        x.fill(&mut out).unwrap();
        assert_eq!(out, [1.5, -2.0, 3.0]);
        assert_eq!(x.to_values(), vec![1.5, -2.0, 3.0]);
        let e = x.fill(&mut [0f64; 2]).unwrap_err();
        assert!(
            matches!(
                e,
                ApiError::XLength {
                    expected: 2,
                    found: 3
                }
            ),
            "{e}"
        );
        assert!(XIn::binary(b.slice(..7), Precision::F64).is_err());
        let big = XIn::binary(
            axum::body::Bytes::from(y_binary(&[1e300f64])),
            Precision::F64,
        )
        .unwrap();
        let e = big.fill(&mut [0f32; 1]).unwrap_err();
        assert!(e.to_string().contains("not finite in f32"), "{e}");
        let f32x = XIn::binary(
            axum::body::Bytes::from(y_binary(&[0.25f32])),
            Precision::F32,
        )
        .unwrap();
        let mut o = [0f64; 1];
        f32x.fill(&mut o).unwrap();
        assert_eq!(o, [0.25]);
    }

    #[test]
    fn binary_x_round_trip_and_bad_length() {
        let y = [1.5f32, -2.0];
        let b = y_binary(&y);
        assert_eq!(parse_x_binary(&b, Precision::F32).unwrap(), vec![1.5, -2.0]);
        assert!(parse_x_binary(&b[..7], Precision::F32).is_err());
        let e = x_into::<f32>(&[1e300], &mut [0f32; 1]).unwrap_err();
        assert!(e.to_string().contains("not finite in f32"), "{e}");
    }
}
