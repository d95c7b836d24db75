//! The engine's one error type.

use thiserror::Error;

/// Everything that can go wrong in the engine. Bad input is an error, never a panic.
#[derive(Debug, Error)]
pub enum EngineError {
    /// No OpenCL platform is installed (or the ICD loader found none).
    #[error("no OpenCL platform found: {0}")]
    NoPlatform(String),
    /// No device matches the selector (or the platforms list no device at all).
    #[error("no OpenCL device matches '{selector}'; available: {available}")]
    NoDevice {
        /// The selector asked for (a platform or device name substring), or "any".
        selector: String,
        /// The devices that exist, "platform / device" separated by "; ".
        available: String,
    },
    /// The kernel program failed to compile; `log` is the compiler's build log.
    #[error("building the {precision} kernel program for {device} failed:\n{log}")]
    BuildFailed {
        /// Device name.
        device: String,
        /// `f32` or `f64`.
        precision: &'static str,
        /// Build log (or the OpenCL error text when no log is available).
        log: String,
    },
    /// The device cannot compute in the asked precision (no `cl_khr_fp64`).
    #[error("device {device} does not support {precision} (no cl_khr_fp64)")]
    UnsupportedPrecision {
        /// Device name.
        device: String,
        /// `f64`.
        precision: &'static str,
    },
    /// The input vector's length does not match the matrix.
    #[error("x has {got} entries but the matrix has {expected} columns")]
    XLength {
        /// Columns of the matrix.
        expected: usize,
        /// Entries of x.
        got: usize,
    },
    /// A buffer or the whole matrix does not fit the device.
    #[error("{what} needs {bytes} bytes but device {device} allows {limit} bytes")]
    TooBig {
        /// Which buffer (or "matrix and vectors" for the total).
        what: String,
        /// Bytes needed.
        bytes: u64,
        /// The device's limit (max allocation or global memory).
        limit: u64,
        /// Device name.
        device: String,
    },
    /// The plan does not fit the matrix (wrong scheme, missing bin, unsupported kernel).
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// A prepared plan was used with a different matrix than the one it was made for.
    #[error("the prepared plan was made for another matrix")]
    WrongMatrix,
    /// A value of the matrix is not finite in the precision it was to be uploaded
    /// in (it overflows `f32`); the text names the row, column and precision.
    #[error("{0}")]
    NonFinite(String),
    /// The engine's configuration is invalid (kernel parameters, warp-shuffle setting).
    #[error("engine configuration: {0}")]
    Config(String),
    /// An OpenCL call failed.
    #[error("OpenCL error: {0}")]
    OpenCl(String),
}

impl From<ocl::Error> for EngineError {
    fn from(e: ocl::Error) -> Self {
        EngineError::OpenCl(e.to_string())
    }
}

impl From<ocl::core::Error> for EngineError {
    fn from(e: ocl::core::Error) -> Self {
        EngineError::OpenCl(e.to_string())
    }
}

/// Result with [`EngineError`].
pub type Result<T> = std::result::Result<T, EngineError>;
