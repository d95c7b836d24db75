//! The `measurements` table: kernel times per matrix, device, precision, scheme
//! and bin (or whole plan). These are the trainer's labels; the unique key lets a
//! resumed trainer skip what is already timed.

use crate::error::QueryContext;
use crate::rows::{non_negative, precision, scheme, scheme_code, uint};
use crate::{
    ContextId, DeviceId, MatrixId, Measurement, MeasurementId, MeasurementKey, NewMeasurement,
    Precision, RunId, Store, StoreError, Target,
};
use sparse::plan::{KernelId, Plan};
use sqlx::sqlite::SqliteArguments;
use sqlx::{AssertSqlSafe, Sqlite};
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// `kernel` column value of a whole-plan timing.
const PLAN_KERNEL: &str = "plan";

const KEY_COLUMNS: &str = "matrix_id, device_id, precision, scheme, bin, kernel, plan, context_id";
const COLUMNS: &str = "id, matrix_id, device_id, precision, scheme, bin, kernel, plan, \
                       context_id, median_ms, spread_ms, repetitions, ci_rel, run_id, created_at";

/// The key's `(bin, kernel, plan)` column values.
fn target_columns(key: &MeasurementKey) -> Result<(i64, String, String), StoreError> {
    match &key.target {
        Target::Bin { bin, kernel } => Ok((i64::from(*bin), kernel.name(), String::new())),
        Target::Plan(json) => {
            let plan: Plan = serde_json::from_str(json).map_err(|e| StoreError::InvalidValue {
                what: "measurement plan",
                message: format!("not a plan: {e}"),
            })?;
            if crate::canonical_plan_json(&plan)? != *json {
                return Err(StoreError::InvalidValue {
                    what: "measurement plan",
                    message: "the plan JSON is not canonical; build the target with Target::plan"
                        .into(),
                });
            }
            if plan.scheme != key.scheme {
                return Err(StoreError::InvalidValue {
                    what: "measurement plan",
                    message: format!(
                        "the plan is for scheme {} but the key says {}",
                        plan.scheme, key.scheme
                    ),
                });
            }
            Ok((-1, PLAN_KERNEL.to_string(), json.clone()))
        }
    }
}

/// The INSERT OR IGNORE statement for one measurement.
fn insert_query(
    m: &NewMeasurement,
) -> Result<sqlx::query::Query<'static, Sqlite, SqliteArguments>, StoreError> {
    let (bin, kernel, plan) = target_columns(&m.key)?;
    let repetitions = if m.repetitions == 0 {
        return Err(StoreError::InvalidValue {
            what: "repetitions",
            message: "a measurement needs at least one run".into(),
        });
    } else {
        i64::from(m.repetitions)
    };
    Ok(sqlx::query(
        "INSERT INTO measurements (matrix_id, device_id, precision, scheme, bin, kernel, plan, \
                                   context_id, median_ms, spread_ms, repetitions, ci_rel, run_id) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (matrix_id, device_id, precision, scheme, bin, kernel, plan, context_id) \
         DO NOTHING",
    )
    .bind(m.key.matrix.0)
    .bind(m.key.device.0)
    .bind(m.key.precision.as_str())
    .bind(scheme_code(m.key.scheme))
    .bind(bin)
    .bind(kernel)
    .bind(plan)
    .bind(m.key.context.0)
    .bind(non_negative(m.median_ms, "median time")?)
    .bind(non_negative(m.spread_ms, "time spread")?)
    .bind(repetitions)
    .bind(
        m.ci_rel
            .map(|c| non_negative(c, "confidence interval"))
            .transpose()?,
    )
    .bind(m.run.map(|r| r.0)))
}

impl Store {
    /// Stores one measurement, committed when this returns. Idempotent: when a
    /// measurement with the same key exists, the stored one is kept and this
    /// returns `false`; it returns `true` when a row was added.
    pub async fn insert_measurement(&self, m: &NewMeasurement) -> Result<bool, StoreError> {
        let done = insert_query(m)?
            .execute(&self.pool)
            .await
            .op("insert_measurement")?;
        Ok(done.rows_affected() == 1)
    }

    /// Stores a batch of measurements in one transaction: after a crash either
    /// all of them or none are in the database. Keys already stored are skipped.
    /// Returns how many rows were added.
    pub async fn insert_measurements(&self, batch: &[NewMeasurement]) -> Result<usize, StoreError> {
        // Validate everything before taking the write lock.
        let queries = batch
            .iter()
            .map(insert_query)
            .collect::<Result<Vec<_>, _>>()?;
        // IMMEDIATE takes the write lock up front (waiting up to the busy timeout),
        // so concurrent writers queue instead of failing on a lock upgrade.
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .op("insert_measurements")?;
        let mut added = 0;
        for q in queries {
            added += q
                .execute(&mut *tx)
                .await
                .op("insert_measurements")?
                .rows_affected() as usize;
        }
        tx.commit().await.op("insert_measurements")?;
        Ok(added)
    }

    /// Whether a measurement with this key is stored.
    pub async fn has_measurement(&self, key: &MeasurementKey) -> Result<bool, StoreError> {
        let (bin, kernel, plan) = target_columns(key)?;
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM measurements WHERE matrix_id = ? AND device_id = ? AND precision = ? \
             AND scheme = ? AND bin = ? AND kernel = ? AND plan = ? AND context_id = ?",
        )
        .bind(key.matrix.0)
        .bind(key.device.0)
        .bind(key.precision.as_str())
        .bind(scheme_code(key.scheme))
        .bind(bin)
        .bind(kernel)
        .bind(plan)
        .bind(key.context.0)
        .fetch_optional(&self.pool)
        .await
        .op("has_measurement")?;
        Ok(found.is_some())
    }

    /// The keys of every measurement stored for a matrix on a device in a
    /// precision: what a resumed trainer must not time again.
    pub async fn measured_keys(
        &self,
        matrix: MatrixId,
        device: DeviceId,
        precision: Precision,
    ) -> Result<HashSet<MeasurementKey>, StoreError> {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM measurements \
             WHERE matrix_id = ? AND device_id = ? AND precision = ?"
        );
        let rows = sqlx::query_as::<_, KeyRow>(AssertSqlSafe(sql))
            .bind(matrix.0)
            .bind(device.0)
            .bind(precision.as_str())
            .fetch_all(&self.pool)
            .await
            .op("measured_keys")?;
        rows.into_iter().map(MeasurementKey::try_from).collect()
    }

    /// Every measurement of a matrix on a device in a precision, by id.
    pub async fn measurements_for(
        &self,
        matrix: MatrixId,
        device: DeviceId,
        precision: Precision,
    ) -> Result<Vec<Measurement>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM measurements \
             WHERE matrix_id = ? AND device_id = ? AND precision = ? ORDER BY id"
        );
        let rows = sqlx::query_as::<_, MeasurementRow>(AssertSqlSafe(sql))
            .bind(matrix.0)
            .bind(device.0)
            .bind(precision.as_str())
            .fetch_all(&self.pool)
            .await
            .op("measurements_for")?;
        rows.into_iter().map(Measurement::try_from).collect()
    }

    /// Every measurement on a device in a precision, ordered by matrix then id.
    pub async fn all_measurements(
        &self,
        device: DeviceId,
        precision: Precision,
    ) -> Result<Vec<Measurement>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM measurements WHERE device_id = ? AND precision = ? \
             ORDER BY matrix_id, id"
        );
        let rows = sqlx::query_as::<_, MeasurementRow>(AssertSqlSafe(sql))
            .bind(device.0)
            .bind(precision.as_str())
            .fetch_all(&self.pool)
            .await
            .op("all_measurements")?;
        rows.into_iter().map(Measurement::try_from).collect()
    }

    /// How many measurements are stored, over all matrices, devices and precisions.
    pub async fn measurement_count(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM measurements")
            .fetch_one(&self.pool)
            .await
            .op("measurement_count")?;
        uint(n, "measurements", "count")
    }
}

/// The kernel of a stored name. A table built once, because reading the
/// measurements of a large corpus parses this name hundreds of thousands of times.
fn kernel_by_name(name: &str) -> Result<KernelId, StoreError> {
    static NAMES: OnceLock<HashMap<String, KernelId>> = OnceLock::new();
    let names = NAMES.get_or_init(|| KernelId::all().into_iter().map(|k| (k.name(), k)).collect());
    match names.get(name) {
        Some(k) => Ok(*k),
        None => name.parse().map_err(|_| StoreError::Decode {
            table: "measurements",
            column: "kernel",
            message: format!("unknown kernel '{name}'"),
        }),
    }
}

/// The key columns of a `measurements` row (`KEY_COLUMNS`).
#[derive(sqlx::FromRow)]
struct KeyRow {
    matrix_id: i64,
    device_id: i64,
    precision: String,
    scheme: i64,
    bin: i64,
    kernel: String,
    plan: String,
    context_id: i64,
}

impl TryFrom<KeyRow> for MeasurementKey {
    type Error = StoreError;
    fn try_from(r: KeyRow) -> Result<MeasurementKey, StoreError> {
        let target = if r.bin == -1 {
            Target::Plan(r.plan)
        } else {
            Target::Bin {
                bin: uint(r.bin, "measurements", "bin")?,
                kernel: kernel_by_name(&r.kernel)?,
            }
        };
        Ok(MeasurementKey {
            matrix: MatrixId(r.matrix_id),
            device: DeviceId(r.device_id),
            precision: precision(&r.precision, "measurements", "precision")?,
            scheme: scheme(r.scheme, "measurements")?,
            target,
            context: ContextId(r.context_id),
        })
    }
}

/// A whole `measurements` row (`COLUMNS`).
#[derive(sqlx::FromRow)]
struct MeasurementRow {
    id: i64,
    #[sqlx(flatten)]
    key: KeyRow,
    median_ms: f64,
    spread_ms: f64,
    repetitions: i64,
    ci_rel: Option<f64>,
    run_id: Option<i64>,
    created_at: String,
}

impl TryFrom<MeasurementRow> for Measurement {
    type Error = StoreError;
    fn try_from(r: MeasurementRow) -> Result<Measurement, StoreError> {
        Ok(Measurement {
            id: MeasurementId(r.id),
            data: NewMeasurement {
                key: r.key.try_into()?,
                median_ms: r.median_ms,
                spread_ms: r.spread_ms,
                repetitions: uint(r.repetitions, "measurements", "repetitions")?,
                ci_rel: r.ci_rel,
                run: r.run_id.map(RunId),
            },
            created_at: r.created_at,
        })
    }
}
