//! The `requests` table: the HTTP service's log of served work (features, plan,
//! kernel time), which the trainer can learn from.

use crate::error::QueryContext;
use crate::rows::{from_json_opt, get, non_negative, precision, to_json, uint};
use crate::{Request, RequestId, RequestRecord, Store, StoreError};
use sqlx::sqlite::SqliteRow;

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
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO requests (route, matrix_hash, features, plan, precision, device, model, \
                                   kernel_ms, e2e_ms, status) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(&r.route)
        .bind(r.matrix_hash.as_deref())
        .bind(features)
        .bind(plan)
        .bind(r.precision.map(|p| p.as_str()))
        .bind(r.device.as_deref())
        .bind(r.model.as_deref())
        .bind(kernel_ms)
        .bind(e2e_ms)
        .bind(i64::from(r.status))
        .fetch_one(&self.pool)
        .await
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
        let rows = sqlx::query(
            "SELECT id, at, route, matrix_hash, features, plan, precision, device, model, \
                    kernel_ms, e2e_ms, status \
             FROM requests WHERE id > ? ORDER BY id LIMIT ?",
        )
        .bind(after.0)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .op("requests_since")?;
        rows.iter().map(decode).collect()
    }
}

fn decode(r: &SqliteRow) -> Result<Request, StoreError> {
    const OP: &str = "decode request";
    let p: Option<String> = get(r, "precision", OP)?;
    Ok(Request {
        id: RequestId(get(r, "id", OP)?),
        at: get(r, "at", OP)?,
        record: RequestRecord {
            route: get(r, "route", OP)?,
            matrix_hash: get(r, "matrix_hash", OP)?,
            features: from_json_opt(get(r, "features", OP)?, "requests", "features")?,
            plan: from_json_opt(get(r, "plan", OP)?, "requests", "plan")?,
            precision: p
                .map(|p| precision(&p, "requests", "precision"))
                .transpose()?,
            device: get(r, "device", OP)?,
            model: get(r, "model", OP)?,
            kernel_ms: get(r, "kernel_ms", OP)?,
            e2e_ms: get(r, "e2e_ms", OP)?,
            status: uint(get(r, "status", OP)?, "requests", "status")?,
        },
    })
}
