//! The value types a matrix may hold: `f32` and `f64`.

use std::fmt::{Debug, Display};
use std::iter::Sum;
use std::ops::{Add, AddAssign, Mul, Neg, Sub};

/// A floating-point value type of a matrix and its vectors.
pub trait Scalar:
    Copy
    + Default
    + PartialEq
    + PartialOrd
    + Send
    + Sync
    + Debug
    + Display
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + Sum
{
    /// `"f32"` or `"f64"`: the name used in CLIs, databases and models.
    const NAME: &'static str;
    /// Size of one value in bytes.
    const BYTES: usize;
    /// Machine epsilon as `f64`.
    const EPSILON: f64;
    /// The additive identity.
    fn zero() -> Self;
    /// Conversion from `f64` (rounding for `f32`).
    fn from_f64(v: f64) -> Self;
    /// Conversion to `f64` (exact).
    fn to_f64(self) -> f64;
    /// Whether the value is neither NaN nor infinite.
    fn is_finite(self) -> bool;
    /// Absolute value.
    fn abs(self) -> Self;
}

macro_rules! impl_scalar {
    ($t:ty, $name:literal) => {
        impl Scalar for $t {
            const NAME: &'static str = $name;
            const BYTES: usize = std::mem::size_of::<$t>();
            const EPSILON: f64 = <$t>::EPSILON as f64;
            #[inline]
            fn zero() -> Self {
                0.0
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
    };
}

impl_scalar!(f32, "f32");
impl_scalar!(f64, "f64");
