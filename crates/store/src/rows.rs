//! Conversions between Rust values and column values, shared by the table modules.

use crate::{Precision, StoreError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sparse::Scheme;

/// A count for an INTEGER column.
pub(crate) fn int(value: u64, what: &'static str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::InvalidValue {
        what,
        message: format!("{value} does not fit in a 64-bit signed integer"),
    })
}

/// A count read back from an INTEGER column.
pub(crate) fn uint<T: TryFrom<i64>>(
    value: i64,
    table: &'static str,
    column: &'static str,
) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| StoreError::Decode {
        table,
        column,
        message: format!("{value} is out of range"),
    })
}

/// A time or rate: finite and not negative.
pub(crate) fn non_negative(value: f64, what: &'static str) -> Result<f64, StoreError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(StoreError::InvalidValue {
            what,
            message: format!("{value} is not a finite, non-negative number"),
        })
    }
}

/// JSON text of a value.
pub(crate) fn to_json<T: Serialize>(value: &T, what: &'static str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::InvalidValue {
        what,
        message: e.to_string(),
    })
}

/// A value from JSON text.
pub(crate) fn from_json<T: DeserializeOwned>(
    text: &str,
    table: &'static str,
    column: &'static str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Decode {
        table,
        column,
        message: format!("bad JSON: {e}"),
    })
}

/// An optional value from nullable JSON text.
pub(crate) fn from_json_opt<T: DeserializeOwned>(
    text: Option<String>,
    table: &'static str,
    column: &'static str,
) -> Result<Option<T>, StoreError> {
    text.map(|t| from_json(&t, table, column)).transpose()
}

/// A precision from its stored name.
pub(crate) fn precision(
    text: &str,
    table: &'static str,
    column: &'static str,
) -> Result<Precision, StoreError> {
    text.parse().map_err(|_| StoreError::Decode {
        table,
        column,
        message: format!("unknown precision '{text}'"),
    })
}

/// A scheme from its stored code (0 = single, else U).
pub(crate) fn scheme(code: i64, table: &'static str) -> Result<Scheme, StoreError> {
    let code: u32 = uint(code, table, "scheme")?;
    Ok(Scheme::from_code(code))
}

/// The stored code of a scheme.
pub(crate) fn scheme_code(scheme: Scheme) -> i64 {
    i64::from(scheme.code())
}
