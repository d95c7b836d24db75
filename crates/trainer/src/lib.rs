//! The offline stage (paper 000, Section III-C and Figure 3): build a corpus,
//! time every scheme, bin and kernel on the device into the results database,
//! fit the two-stage trees on a stratified 75/25 split, and evaluate the held-out
//! matrices by time.
//!
//! Architecture invariant: SQL only through `store`, OpenCL only through
//! `engine`, trees only through `selector`.

pub mod corpus;
pub mod dataset;
pub mod evaluate;
pub mod feature_study;
pub mod finish;
pub mod first_call;
pub mod label;
pub mod peers;
pub mod perf_eval;
pub mod perf_fit;
pub mod pipeline;
pub mod quick_fit;
pub mod report;
pub mod runs;
pub mod split;
pub mod worker;
