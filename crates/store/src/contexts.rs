//! The `measurement_contexts` table: the kernel sources, build options and
//! engine version a timing was taken under, referenced by measurements and plans.

use crate::error::QueryContext;
use crate::rows::uint;
use crate::{
    ContextId, DeviceId, MeasurementContext, Precision, Store, StoreError, StoredContext,
    LEGACY_CONTEXT,
};

const COLUMNS: &str = "id, hash, kernel_sources_hash, build_options, engine_version";

impl Store {
    /// The id of a context, stored first when new.
    pub async fn upsert_context(&self, c: &MeasurementContext) -> Result<ContextId, StoreError> {
        // DO UPDATE (a no-op write) rather than DO NOTHING, so that RETURNING
        // gives the id of an existing row too.
        let sql = self.sql(
            "INSERT INTO measurement_contexts (hash, kernel_sources_hash, build_options, engine_version) \
             VALUES (?, ?, ?, ?) \
             ON CONFLICT (hash) DO UPDATE SET hash = excluded.hash \
             RETURNING id",
        );
        let hash = c.hash();
        let id: i64 = run_query!(
            self,
            sqlx::query_scalar(sql),
            [
                &hash,
                &c.kernel_sources_hash,
                &c.build_options,
                &c.engine_version
            ],
            fetch_one
        )
        .op("upsert_context")?;
        Ok(ContextId(id))
    }

    /// The context of a hash ([`MeasurementContext::hash`] or [`LEGACY_CONTEXT`]),
    /// or of a unique prefix of at least 8 hex digits of it.
    pub async fn context_by_hash(&self, hash: &str) -> Result<Option<StoredContext>, StoreError> {
        let exact = hash == LEGACY_CONTEXT || hash.len() >= 64;
        let pattern = if exact {
            hash.to_string()
        } else if hash.len() >= 8 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            format!("{hash}%")
        } else {
            return Ok(None);
        };
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM measurement_contexts WHERE hash LIKE ? LIMIT 2"
        ));
        let rows = run_query!(self, sqlx::query_as(sql), [&pattern], fetch_all)
            .read("measurement_contexts", "context_by_hash")?;
        Ok(match <[StoredContext; 1]>::try_from(rows) {
            Ok([row]) => Some(row),
            Err(_) => None,
        })
    }

    /// The contexts that hold measurements of a device in a precision, by id,
    /// each with its number of measurements.
    pub async fn contexts_used(
        &self,
        device: DeviceId,
        precision: Precision,
    ) -> Result<Vec<(StoredContext, u64)>, StoreError> {
        let sql = self.sql(
            "SELECT context_id, COUNT(*) FROM measurements \
             WHERE device_id = ? AND precision = ? GROUP BY context_id ORDER BY context_id",
        );
        let rows: Vec<(i64, i64)> = run_query!(
            self,
            sqlx::query_as(sql),
            [device.0, precision.as_str()],
            fetch_all
        )
        .op("contexts_used")?;
        let all = self.contexts().await?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, n) in rows {
            if let Some(c) = all.iter().find(|c| c.id.0 == id) {
                out.push((c.clone(), uint(n, "measurements", "count")?));
            }
        }
        Ok(out)
    }

    /// Every stored context, by id (the legacy context first).
    pub async fn contexts(&self) -> Result<Vec<StoredContext>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM measurement_contexts ORDER BY id"
        ));
        run_query!(self, sqlx::query_as(sql), [], fetch_all)
            .read("measurement_contexts", "contexts")
    }
}
