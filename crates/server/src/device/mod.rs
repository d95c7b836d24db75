//! The device layer: the bounded queue and its worker thread, recovery from
//! device faults, the readiness probe, host pools of x and y, and matrices
//! uploaded and run on the engine. It sees only `domain` below it.

pub mod pool;
pub mod probe;
pub mod queue;
pub mod recovery;
pub mod run;
pub mod state;
pub mod vector;
