//! Conversions between Rust values and column values, shared by the table modules.
//!
//! Reading: the stored types derive `sqlx::FromRow`; a column whose stored form
//! (text, an integer) is not the field's type is read as [`Stored`] and turned
//! into the field's type by `TryFrom` (`#[sqlx(try_from = "Stored<String>")]`).
//! A conversion that fails is a decode error of that column
//! ([`crate::error::QueryContext::read`] makes it [`StoreError::Decode`]).

use crate::queue::QueueStatus;
use crate::{FeatureVector, Precision, RunStatus, StoreError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sparse::plan::Plan;
use sparse::Scheme;
use std::str::FromStr;

/// A column value as the database holds it, before it becomes its field's type.
#[derive(sqlx::Type)]
#[sqlx(transparent)]
pub struct Stored<T>(pub T);

/// `TryFrom<Stored<String>>` for a type stored as text, by `$read` (a
/// `fn(&str) -> Result<$ty, String>`), and the same for its nullable column.
macro_rules! text_column {
    ($ty:ty, $read:expr) => {
        impl TryFrom<Stored<String>> for $ty {
            type Error = String;
            fn try_from(s: Stored<String>) -> Result<Self, String> {
                $read(&s.0)
            }
        }

        impl TryFrom<Stored<Option<String>>> for Option<$ty> {
            type Error = String;
            fn try_from(s: Stored<Option<String>>) -> Result<Self, String> {
                s.0.map(|t| Stored(t).try_into()).transpose()
            }
        }
    };
}

/// A reader of text that `parse` understands; `what` names it in the message.
fn parsed<T: FromStr>(what: &'static str) -> impl Fn(&str) -> Result<T, String> {
    move |text| text.parse().map_err(|_| format!("unknown {what} '{text}'"))
}

/// Reads JSON text.
fn json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("bad JSON: {e}"))
}

text_column!(Precision, parsed("precision"));
text_column!(RunStatus, parsed("status"));
text_column!(QueueStatus, parsed("status"));
text_column!(FeatureVector, json);
text_column!(Plan, json);
text_column!(serde_json::Value, json);

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
        column: column.into(),
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

/// The stored code of a scheme.
pub(crate) fn scheme_code(scheme: Scheme) -> i64 {
    i64::from(scheme.code())
}
