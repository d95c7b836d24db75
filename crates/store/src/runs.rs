//! The `training_runs` table: when the trainer ran, with what parameters, and
//! whether it finished (a killed run stays `running` with no end time).

use crate::error::QueryContext;
use crate::rows::{from_json, get, precision, to_json, NOW};
use crate::{DeviceId, RunId, RunRecord, RunStatus, Store, StoreError, TrainingRun};
use sqlx::sqlite::SqliteRow;
use sqlx::AssertSqlSafe;

const COLUMNS: &str = "id, started_at, finished_at, device_id, precision, params, status, notes";

impl Store {
    /// Records the start of a training run (status `running`). Returns its id.
    pub async fn start_run(&self, r: &RunRecord) -> Result<RunId, StoreError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO training_runs (device_id, precision, params, notes) \
             VALUES (?, ?, ?, ?) RETURNING id",
        )
        .bind(r.device.map(|d| d.0))
        .bind(r.precision.map(|p| p.as_str()))
        .bind(to_json(&r.params, "run parameters")?)
        .bind(&r.notes)
        .fetch_one(&self.pool)
        .await
        .op("start_run")?;
        Ok(RunId(id))
    }

    /// Records the end of a run: its status (anything but
    /// [`RunStatus::Running`]), the end time, and `notes` appended to the run's
    /// notes when not empty.
    pub async fn finish_run(
        &self,
        id: RunId,
        status: RunStatus,
        notes: &str,
    ) -> Result<(), StoreError> {
        if status == RunStatus::Running {
            return Err(StoreError::InvalidValue {
                what: "run status",
                message: "a finished run cannot be 'running'".into(),
            });
        }
        let sql = format!(
            "UPDATE training_runs SET status = ?, finished_at = {NOW}, \
             notes = CASE WHEN ? = '' THEN notes WHEN notes = '' THEN ? ELSE notes || char(10) || ? END \
             WHERE id = ?"
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(status.as_str())
            .bind(notes)
            .bind(notes)
            .bind(notes)
            .bind(id.0)
            .execute(&self.pool)
            .await
            .op("finish_run")?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                table: "training_runs",
                id: id.0,
            });
        }
        Ok(())
    }

    /// The run with this id, if any.
    pub async fn run(&self, id: RunId) -> Result<Option<TrainingRun>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM training_runs WHERE id = ?");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .op("run")?;
        row.as_ref().map(decode).transpose()
    }

    /// Every run, oldest first.
    pub async fn list_runs(&self) -> Result<Vec<TrainingRun>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM training_runs ORDER BY id");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .op("list_runs")?;
        rows.iter().map(decode).collect()
    }

    /// Runs that never finished (still going, or killed), oldest first.
    pub async fn unfinished_runs(&self) -> Result<Vec<TrainingRun>, StoreError> {
        let sql =
            format!("SELECT {COLUMNS} FROM training_runs WHERE finished_at IS NULL ORDER BY id");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .op("unfinished_runs")?;
        rows.iter().map(decode).collect()
    }
}

fn decode(r: &SqliteRow) -> Result<TrainingRun, StoreError> {
    const OP: &str = "decode training run";
    let p: Option<String> = get(r, "precision", OP)?;
    let params: String = get(r, "params", OP)?;
    let status: String = get(r, "status", OP)?;
    Ok(TrainingRun {
        id: RunId(get(r, "id", OP)?),
        record: RunRecord {
            device: get::<Option<i64>>(r, "device_id", OP)?.map(DeviceId),
            precision: p
                .map(|p| precision(&p, "training_runs", "precision"))
                .transpose()?,
            params: from_json(&params, "training_runs", "params")?,
            notes: get(r, "notes", OP)?,
        },
        status: status.parse().map_err(|_| StoreError::Decode {
            table: "training_runs",
            column: "status",
            message: format!("unknown status '{status}'"),
        })?,
        started_at: get(r, "started_at", OP)?,
        finished_at: get(r, "finished_at", OP)?,
    })
}
