//! The `plans` table: the best plan of each scheme per matrix, device and
//! precision, and which of them is the oracle (the best over all schemes).

use crate::backend::{Backend, BeginWrite};
use crate::error::QueryContext;
use crate::rows::{non_negative, scheme_code};
use crate::{
    canonical_plan_json, ContextId, DeviceId, MatrixId, PlanId, PlanRecord, Precision, Store,
    StoreError, StoredPlan,
};

const COLUMNS: &str = "id, matrix_id, device_id, precision, plan, total_ms, bins_sum_ms, \
                       is_oracle, context_id, created_at";

impl Store {
    /// Stores the plan of its scheme for the matrix, device and precision,
    /// replacing the previous one of that scheme. When `is_oracle` is set, the
    /// oracle flag is taken away from the other schemes' plans in the same
    /// transaction, so there is at most one oracle. Returns the plan's row id.
    pub async fn upsert_plan(&self, p: &PlanRecord) -> Result<PlanId, StoreError> {
        let json = canonical_plan_json(&p.plan)?;
        let total = non_negative(p.total_ms, "plan time")?;
        let bins_sum = p
            .bins_sum_ms
            .map(|t| non_negative(t, "plan bins time"))
            .transpose()?;
        let code = scheme_code(p.plan.scheme);
        let clear = self.sql(
            "UPDATE plans SET is_oracle = FALSE \
             WHERE matrix_id = ? AND device_id = ? AND precision = ? AND context_id = ? \
             AND scheme <> ? AND is_oracle = TRUE",
        );
        let upsert = self.sql(&format!(
            "INSERT INTO plans (matrix_id, device_id, precision, scheme, plan, total_ms, bins_sum_ms, is_oracle, \
                                context_id) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (matrix_id, device_id, precision, scheme, context_id) DO UPDATE SET \
               plan = excluded.plan, total_ms = excluded.total_ms, bins_sum_ms = excluded.bins_sum_ms, \
               is_oracle = excluded.is_oracle, created_at = {} \
             RETURNING id",
            self.backend().now()
        ));
        // SQLite's IMMEDIATE transaction already holds the one write lock; on
        // PostgreSQL two writers of oracles for one matrix would each clear the
        // other's flag and then clash on the one-oracle index, so plan writers
        // queue on a table lock (they are rare: one per scheme and matrix).
        let lock = (self.backend() == Backend::Postgres)
            .then_some("LOCK TABLE plans IN SHARE ROW EXCLUSIVE MODE");
        let id: i64 = on_pool!(self, |pool| async {
            let mut tx = pool.begin_write().await?;
            if let Some(lock) = lock {
                sqlx::query(lock).execute(&mut *tx).await?;
            }
            if p.is_oracle {
                sqlx::query(clear)
                    .bind(p.matrix.0)
                    .bind(p.device.0)
                    .bind(p.precision.as_str())
                    .bind(p.context.0)
                    .bind(code)
                    .execute(&mut *tx)
                    .await?;
            }
            let id: i64 = sqlx::query_scalar(upsert)
                .bind(p.matrix.0)
                .bind(p.device.0)
                .bind(p.precision.as_str())
                .bind(code)
                .bind(&json)
                .bind(total)
                .bind(bins_sum)
                .bind(p.is_oracle)
                .bind(p.context.0)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(id)
        }
        .await)
        .op("upsert_plan")?;
        Ok(PlanId(id))
    }

    /// The oracle plan of a matrix on a device in a precision, if one is stored.
    pub async fn oracle_plan(
        &self,
        matrix: MatrixId,
        device: DeviceId,
        precision: Precision,
        context: ContextId,
    ) -> Result<Option<StoredPlan>, StoreError> {
        // At most one: the schema keeps one oracle per key (`plans_one_oracle`).
        let key = (matrix, device, precision, context);
        let plans = self
            .plans_where(key, "AND is_oracle = TRUE", "oracle_plan")
            .await?;
        Ok(plans.into_iter().next())
    }

    /// The stored plans (one per scheme) of a matrix on a device in a precision,
    /// by scheme code (single first, then increasing U).
    pub async fn plans_for(
        &self,
        matrix: MatrixId,
        device: DeviceId,
        precision: Precision,
        context: ContextId,
    ) -> Result<Vec<StoredPlan>, StoreError> {
        let key = (matrix, device, precision, context);
        self.plans_where(key, "ORDER BY scheme", "plans_for").await
    }

    /// The plans of one (matrix, device, precision, context) key, with `more`
    /// (a further condition or an order) after the key's condition.
    async fn plans_where(
        &self,
        key: (MatrixId, DeviceId, Precision, ContextId),
        more: &str,
        op: &'static str,
    ) -> Result<Vec<StoredPlan>, StoreError> {
        let (matrix, device, precision, context) = key;
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM plans \
             WHERE matrix_id = ? AND device_id = ? AND precision = ? AND context_id = ? {more}"
        ));
        run_query!(
            self,
            sqlx::query_as(sql),
            [matrix, device, precision.as_str(), context],
            fetch_all
        )
        .read("plans", op)
    }

    /// The oracle plans of every matrix on a device in a precision, by matrix id:
    /// the stage-1 labels.
    pub async fn oracle_plans(
        &self,
        device: DeviceId,
        precision: Precision,
        context: ContextId,
    ) -> Result<Vec<StoredPlan>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM plans \
             WHERE device_id = ? AND precision = ? AND context_id = ? AND is_oracle = TRUE \
             ORDER BY matrix_id"
        ));
        run_query!(
            self,
            sqlx::query_as(sql),
            [device, precision.as_str(), context],
            fetch_all
        )
        .read("plans", "oracle_plans")
    }
}
