//! What every layer shares, at the bottom: the configuration and its limits,
//! the one error type, and the binary CSR codec. It imports nothing of the crate
//! above it.

pub mod config;
pub mod csr_binary;
pub mod error;
