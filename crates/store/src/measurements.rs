//! The `measurements` table: kernel times per matrix, device, precision, scheme
//! and bin (or whole plan). These are the trainer's labels; the unique key lets a
//! resumed trainer skip what is already timed.

use crate::error::QueryContext;
use crate::rows::{non_negative, scheme_code, uint, Stored};
use crate::{
    ContextId, DeviceId, MatrixId, Measurement, MeasurementKey, NewMeasurement, Precision, Store,
    StoreError, Target,
};
use sparse::plan::{KernelId, Plan};
use sparse::Scheme;
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

/// The column values of one measurement, checked.
struct InsertValues {
    matrix: i64,
    device: i64,
    precision: &'static str,
    scheme: i64,
    bin: i64,
    kernel: String,
    plan: String,
    context: i64,
    median_ms: f64,
    spread_ms: f64,
    repetitions: i64,
    ci_rel: Option<f64>,
    run: Option<i64>,
}

/// The insert of one measurement, skipped when its key is stored.
const INSERT: &str =
    "INSERT INTO measurements (matrix_id, device_id, precision, scheme, bin, kernel, plan, \
                                   context_id, median_ms, spread_ms, repetitions, ci_rel, run_id) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (matrix_id, device_id, precision, scheme, bin, kernel, plan, context_id) \
         DO NOTHING";

/// Checks a measurement and gives its column values.
fn insert_values(m: &NewMeasurement) -> Result<InsertValues, StoreError> {
    let (bin, kernel, plan) = target_columns(&m.key)?;
    if m.repetitions == 0 {
        return Err(StoreError::InvalidValue {
            what: "repetitions",
            message: "a measurement needs at least one run".into(),
        });
    }
    Ok(InsertValues {
        matrix: m.key.matrix.0,
        device: m.key.device.0,
        precision: m.key.precision.as_str(),
        scheme: scheme_code(m.key.scheme),
        bin,
        kernel,
        plan,
        context: m.key.context.0,
        median_ms: non_negative(m.median_ms, "median time")?,
        spread_ms: non_negative(m.spread_ms, "time spread")?,
        repetitions: i64::from(m.repetitions),
        ci_rel: m
            .ci_rel
            .map(|c| non_negative(c, "confidence interval"))
            .transpose()?,
        run: m.run.map(|r| r.0),
    })
}

/// The [`INSERT`] statement with the values of `$v` bound, for either backend.
macro_rules! insert_query {
    ($sql:expr, $v:expr) => {
        sqlx::query($sql)
            .bind($v.matrix)
            .bind($v.device)
            .bind($v.precision)
            .bind($v.scheme)
            .bind($v.bin)
            .bind(&$v.kernel)
            .bind(&$v.plan)
            .bind($v.context)
            .bind($v.median_ms)
            .bind($v.spread_ms)
            .bind($v.repetitions)
            .bind($v.ci_rel)
            .bind($v.run)
    };
}

impl Store {
    /// Stores one measurement, committed when this returns. Idempotent: when a
    /// measurement with the same key exists, the stored one is kept and this
    /// returns `false`; it returns `true` when a row was added.
    pub async fn insert_measurement(&self, m: &NewMeasurement) -> Result<bool, StoreError> {
        let v = insert_values(m)?;
        let sql = self.sql(INSERT);
        let added = on_pool!(self, |pool| insert_query!(sql, v)
            .execute(pool)
            .await
            .map(|d| d.rows_affected()))
        .op("insert_measurement")?;
        Ok(added == 1)
    }

    /// Stores a batch of measurements in one transaction: after a crash either
    /// all of them or none are in the database. Keys already stored are skipped.
    /// Returns how many rows were added.
    pub async fn insert_measurements(&self, batch: &[NewMeasurement]) -> Result<usize, StoreError> {
        // Validate everything before taking the write lock.
        let values = batch
            .iter()
            .map(insert_values)
            .collect::<Result<Vec<_>, _>>()?;
        let added = rows_changed_each!(self, self.sql(INSERT), &values, |sql, v| {
            insert_query!(sql, v)
        })
        .op("insert_measurements")?;
        Ok(added as usize)
    }

    /// Whether a measurement with this key is stored.
    pub async fn has_measurement(&self, key: &MeasurementKey) -> Result<bool, StoreError> {
        let (bin, kernel, plan) = target_columns(key)?;
        let sql = self.sql(
            "SELECT EXISTS (SELECT 1 FROM measurements WHERE matrix_id = ? AND device_id = ? \
             AND precision = ? AND scheme = ? AND bin = ? AND kernel = ? AND plan = ? \
             AND context_id = ?)",
        );
        run_query!(
            self,
            sqlx::query_scalar::<_, bool>(sql),
            [
                key.matrix.0,
                key.device.0,
                key.precision.as_str(),
                scheme_code(key.scheme),
                bin,
                &kernel,
                &plan,
                key.context.0
            ],
            fetch_one
        )
        .op("has_measurement")
    }

    /// The keys of every measurement stored for a matrix on a device in a
    /// precision: what a resumed trainer must not time again.
    pub async fn measured_keys(
        &self,
        matrix: MatrixId,
        device: DeviceId,
        precision: Precision,
    ) -> Result<HashSet<MeasurementKey>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {KEY_COLUMNS} FROM measurements \
             WHERE matrix_id = ? AND device_id = ? AND precision = ?"
        ));
        let rows = run_query!(
            self,
            sqlx::query_as::<_, KeyColumns>(sql),
            [matrix, device, precision.as_str()],
            fetch_all
        )
        .read("measurements", "measured_keys")?;
        rows.into_iter().map(MeasurementKey::try_from).collect()
    }

    /// Every measurement of a matrix on a device in a precision, by id.
    pub async fn measurements_for(
        &self,
        matrix: MatrixId,
        device: DeviceId,
        precision: Precision,
    ) -> Result<Vec<Measurement>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM measurements \
             WHERE matrix_id = ? AND device_id = ? AND precision = ? ORDER BY id"
        ));
        run_query!(
            self,
            sqlx::query_as(sql),
            [matrix, device, precision.as_str()],
            fetch_all
        )
        .read("measurements", "measurements_for")
    }

    /// Every measurement on a device in a precision, ordered by matrix then id.
    pub async fn all_measurements(
        &self,
        device: DeviceId,
        precision: Precision,
    ) -> Result<Vec<Measurement>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM measurements WHERE device_id = ? AND precision = ? \
             ORDER BY matrix_id, id"
        ));
        run_query!(
            self,
            sqlx::query_as(sql),
            [device, precision.as_str()],
            fetch_all
        )
        .read("measurements", "all_measurements")
    }

    /// How many measurements are stored, over all matrices, devices and precisions.
    pub async fn measurement_count(&self) -> Result<u64, StoreError> {
        let n: i64 = run_query!(
            self,
            sqlx::query_scalar("SELECT COUNT(*) FROM measurements"),
            [],
            fetch_one
        )
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
            column: "kernel".into(),
            message: format!("unknown kernel '{name}'"),
        }),
    }
}

/// The key columns of a `measurements` row (`KEY_COLUMNS`), read together
/// because the target is made of three of them.
#[derive(sqlx::FromRow)]
pub(crate) struct KeyColumns {
    matrix_id: MatrixId,
    device_id: DeviceId,
    #[sqlx(try_from = "Stored<String>")]
    precision: Precision,
    #[sqlx(try_from = "i64")]
    scheme: u32,
    bin: i64,
    kernel: String,
    plan: String,
    context_id: ContextId,
}

impl TryFrom<KeyColumns> for MeasurementKey {
    type Error = StoreError;
    fn try_from(r: KeyColumns) -> Result<MeasurementKey, StoreError> {
        let target = if r.bin == -1 {
            Target::Plan(r.plan)
        } else {
            Target::Bin {
                bin: uint(r.bin, "measurements", "bin")?,
                kernel: kernel_by_name(&r.kernel)?,
            }
        };
        Ok(MeasurementKey {
            matrix: r.matrix_id,
            device: r.device_id,
            precision: r.precision,
            scheme: Scheme::from_code(r.scheme),
            target,
            context: r.context_id,
        })
    }
}
