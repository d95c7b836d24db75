//! The `requests` table: the HTTP service's log of served work (features, plan,
//! kernel time), which the trainer can learn from.

use crate::error::QueryContext;
use crate::rows::{non_negative, to_json};
use crate::{Request, RequestId, RequestRecord, Store, StoreError};

impl Store {
    /// Appends a request to the log, committed when this returns. Returns its id.
    pub async fn log_request(&self, r: &RequestRecord) -> Result<RequestId, StoreError> {
        let features = r
            .features
            .as_ref()
            .map(|f| to_json(f, "request features"))
            .transpose()?;
        let plan = r
            .plan
            .as_ref()
            .map(crate::canonical_plan_json)
            .transpose()?;
        let kernel_ms = r
            .kernel_ms
            .map(|t| non_negative(t, "kernel time"))
            .transpose()?;
        let e2e_ms = r
            .e2e_ms
            .map(|t| non_negative(t, "end-to-end time"))
            .transpose()?;
        let sql = self.sql(
            "INSERT INTO requests (route, matrix_hash, features, plan, precision, device, model, \
                                   kernel_ms, e2e_ms, status) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        );
        let id: i64 = run_query!(
            self,
            sqlx::query_scalar(sql),
            [
                &r.route,
                r.matrix_hash.as_deref(),
                features.as_deref(),
                plan.as_deref(),
                r.precision.map(|p| p.as_str()),
                r.device.as_deref(),
                r.model.as_deref(),
                kernel_ms,
                e2e_ms,
                i64::from(r.status)
            ],
            fetch_one
        )
        .op("log_request")?;
        Ok(RequestId(id))
    }

    /// Logged requests with an id greater than `after`, oldest first, at most
    /// `limit` of them. Start with `RequestId(0)` and pass the last id seen to
    /// read the log incrementally.
    pub async fn requests_since(
        &self,
        after: RequestId,
        limit: u32,
    ) -> Result<Vec<Request>, StoreError> {
        let sql = self.sql(
            "SELECT id, at, route, matrix_hash, features, plan, precision, device, model, \
                    kernel_ms, e2e_ms, status \
             FROM requests WHERE id > ? ORDER BY id LIMIT ?",
        );
        run_query!(
            self,
            sqlx::query_as(sql),
            [after, i64::from(limit)],
            fetch_all
        )
        .read("requests", "requests_since")
    }
}
