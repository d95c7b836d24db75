//! Solving y = A x for a request: a cached matrix (uploaded first when it is not
//! on the device, run again on a rebuilt engine) or one used for this call only.

use crate::device::run::{execute_blocking, upload_blocking, Executed};
use crate::device::vector::XIn;
use crate::domain::config::PoolKind;
use crate::domain::error::ApiError;
use crate::service::blocking;
use crate::service::planner::Planned;
use crate::service::state::{AppState, StoredMatrix};
use sparse::Precision;
use std::sync::Arc;
use std::time::Instant;

/// One y = A x to run: the matrix in precision `p`, x, and whether y is
/// wanted as little-endian bytes.
pub struct Solve<'a> {
    /// The service.
    pub s: &'a AppState,
    /// The matrix.
    pub m: &'a Arc<StoredMatrix>,
    /// The precision.
    pub p: Precision,
    /// x.
    pub x: &'a Arc<XIn>,
    /// Whether y is wanted as bytes (a binary answer, nothing to verify).
    pub bytes_y: bool,
}

impl Solve<'_> {
    /// Runs it: the plan, the result, and the set-up time when this call
    /// uploaded the matrix.
    pub async fn run(
        &self,
        cached: bool,
    ) -> Result<(Arc<Planned>, Executed, Option<f64>), ApiError> {
        if cached {
            self.cached().await
        } else {
            self.once().await
        }
    }

    /// y = A x for an uploaded matrix, uploading it first when it is not on the
    /// device (first use, or its buffers were dropped by a device fault). When
    /// the engine is rebuilt between the upload and the run, it is uploaded to the
    /// new engine and run once more. Returns the plan, the result and the set-up
    /// time when this call uploaded it.
    async fn cached(&self) -> Result<(Arc<Planned>, Executed, Option<f64>), ApiError> {
        let (s, m, p, x, bytes_y) = (self.s, self.m, self.p, self.x, self.bytes_y);
        let mut retried = false;
        loop {
            let (ready, created) = s.ensure_ready(m, p).await?;
            let (r2, x2) = (ready.clone(), x.clone());
            let run = s
                .on_device_at(Some(ready.generation), move |e, _| {
                    execute_blocking(e, &r2.buffers, &x2, bytes_y)
                })
                .await;
            match run {
                Ok(exec) => {
                    if let Some((key, predicted)) = &ready.predicted {
                        s.observe_time(p, key, *predicted, exec.timings.kernel_ms());
                    }
                    return Ok((
                        ready.planned.clone(),
                        exec,
                        created.then_some(ready.setup_ms),
                    ));
                }
                Err(ApiError::Recovering { .. }) if !retried && s.device_slot().is_up() => {
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Plans, uploads and runs a matrix used for this call only (never tuned: it
    /// is multiplied once).
    async fn once(&self) -> Result<(Arc<Planned>, Executed, Option<f64>), ApiError> {
        let (s, m, p, x, bytes_y) = (self.s, self.m, self.p, self.x, self.bytes_y);
        let t = Instant::now();
        let (s2, m2) = (s.clone(), m.clone());
        let planned = Arc::new(blocking(move || Ok(s2.plan(&m2, p, false))).await?);
        let (m2, x2, pl2) = (m.clone(), x.clone(), planned.clone());
        let exec: Executed = s
            .on_device(move |e| {
                let b = upload_blocking(e, &m2.host, p, &pl2.binning, &pl2.plan, PoolKind::Heap)?;
                execute_blocking(e, &b, &x2, bytes_y)
            })
            .await?;
        let setup = t.elapsed().as_secs_f64() * 1e3 - exec.timings.wall_ms();
        Ok((planned, exec, Some(setup)))
    }
}
