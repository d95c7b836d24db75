//! The `requests` table: the HTTP service's log of served work (features, plan,
//! kernel time), which the trainer can learn from.

use crate::error::QueryContext;
use crate::rows::{from_json_opt, non_negative, precision, to_json, uint};
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
        let rows = run_query!(
            self,
            sqlx::query_as::<_, RequestRow>(sql),
            [after.0, i64::from(limit)],
            fetch_all
        )
        .op("requests_since")?;
        rows.into_iter().map(Request::try_from).collect()
    }
}

/// A `requests` row as stored.
#[derive(sqlx::FromRow)]
struct RequestRow {
    id: i64,
    at: String,
    route: String,
    matrix_hash: Option<String>,
    features: Option<String>,
    plan: Option<String>,
    precision: Option<String>,
    device: Option<String>,
    model: Option<String>,
    kernel_ms: Option<f64>,
    e2e_ms: Option<f64>,
    status: i64,
}

impl TryFrom<RequestRow> for Request {
    type Error = StoreError;
    fn try_from(r: RequestRow) -> Result<Request, StoreError> {
        Ok(Request {
            id: RequestId(r.id),
            at: r.at,
            record: RequestRecord {
                route: r.route,
                matrix_hash: r.matrix_hash,
                features: from_json_opt(r.features, "requests", "features")?,
                plan: from_json_opt(r.plan, "requests", "plan")?,
                precision: r
                    .precision
                    .map(|p| precision(&p, "requests", "precision"))
                    .transpose()?,
                device: r.device,
                model: r.model,
                kernel_ms: r.kernel_ms,
                e2e_ms: r.e2e_ms,
                status: uint(r.status, "requests", "status")?,
            },
        })
    }
}
