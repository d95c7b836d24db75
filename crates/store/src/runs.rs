//! The `training_runs` table: when the trainer ran, with what parameters, and
//! whether it finished. A killed run stays `running` with no end time until a
//! later trainer sees that its process is gone (pid, host and token recorded by
//! [`Store::start_owned_run`], `heartbeat_at` kept fresh by [`Store::heartbeat_run`])
//! and marks it with [`Store::interrupt_abandoned_run`].

use crate::error::QueryContext;
use crate::rows::{to_json, uint};
use crate::{RunId, RunOwner, RunRecord, RunStatus, Store, StoreError, TrainingRun};

impl Store {
    /// The columns of a [`TrainingRun`], with the idle time computed by this
    /// backend (never negative, though clocks may disagree).
    fn run_columns(&self) -> String {
        let idle = self
            .backend()
            .seconds_since("COALESCE(heartbeat_at, started_at)");
        format!(
            "id, started_at, finished_at, device_id, precision, params, status, notes, \
             pid, host, token, heartbeat_at, CASE WHEN {idle} > 0 THEN {idle} ELSE 0.0 END AS idle_s"
        )
    }
}

impl Store {
    /// Records the start of a training run (status `running`). Returns its id.
    pub async fn start_run(&self, r: &RunRecord) -> Result<RunId, StoreError> {
        self.insert_run(r, None, "start_run").await
    }

    /// Records the start of a training run (status `running`) by the process
    /// `owner`, with a first heartbeat. Returns its id.
    pub async fn start_owned_run(
        &self,
        r: &RunRecord,
        owner: &RunOwner,
    ) -> Result<RunId, StoreError> {
        self.insert_run(r, Some(owner), "start_owned_run").await
    }

    /// Inserts a run; without an owner, its pid, host, token and heartbeat
    /// stay NULL. `op` names the operation in errors.
    async fn insert_run(
        &self,
        r: &RunRecord,
        owner: Option<&RunOwner>,
        op: &'static str,
    ) -> Result<RunId, StoreError> {
        let sql = self.sql(&format!(
            "INSERT INTO training_runs (device_id, precision, params, notes, pid, host, token, heartbeat_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, {}) RETURNING id",
            if owner.is_some() { self.backend().now() } else { "NULL" }
        ));
        let params = to_json(&r.params, "run parameters")?;
        let id: i64 = run_query!(
            self,
            sqlx::query_scalar(sql),
            [
                r.device.map(|d| d.0),
                r.precision.map(|p| p.as_str()),
                &params,
                &r.notes,
                owner.map(|o| i64::from(o.pid)),
                owner.map(|o| o.host.as_str()),
                owner.map(|o| o.token.as_str())
            ],
            fetch_one
        )
        .op(op)?;
        Ok(RunId(id))
    }

    /// Notes that a running run is making progress (sets `heartbeat_at` to now).
    /// Does nothing to a run that is no longer `running`.
    pub async fn heartbeat_run(&self, id: RunId) -> Result<(), StoreError> {
        let sql = self.sql(&format!(
            "UPDATE training_runs SET heartbeat_at = {} WHERE id = ? AND status = 'running'",
            self.backend().now()
        ));
        rows_changed!(self, sql, [id.0]).op("heartbeat_run")?;
        Ok(())
    }

    /// Marks a run whose process is gone as [`RunStatus::Interrupted`], its end
    /// time being its last heartbeat (else its start), with `note` appended to
    /// its notes. Only a run still `running` is changed, so two trainers
    /// starting at once mark it once: returns whether this call changed it.
    pub async fn interrupt_abandoned_run(&self, id: RunId, note: &str) -> Result<bool, StoreError> {
        let sql = self.sql(&format!(
            "UPDATE training_runs SET status = 'interrupted', \
               finished_at = COALESCE(heartbeat_at, started_at), \
               notes = CASE WHEN notes = '' THEN ?1 ELSE notes || {} || ?1 END \
             WHERE id = ?2 AND status = 'running' AND finished_at IS NULL",
            self.backend().newline()
        ));
        let done = rows_changed!(self, sql, [note, id.0]).op("interrupt_abandoned_run")?;
        Ok(done == 1)
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
        let b = self.backend();
        let sql = self.sql(&format!(
            "UPDATE training_runs SET status = ?1, finished_at = {}, \
             notes = CASE WHEN ?2 = '' THEN notes WHEN notes = '' THEN ?2 ELSE notes || {} || ?2 END \
             WHERE id = ?3",
            b.now(),
            b.newline()
        ));
        let done = rows_changed!(self, sql, [status.as_str(), notes, id.0]).op("finish_run")?;
        if done == 0 {
            return Err(StoreError::NotFound {
                table: "training_runs",
                id: id.0,
            });
        }
        Ok(())
    }

    /// The run with this id, if any.
    pub async fn run(&self, id: RunId) -> Result<Option<TrainingRun>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {} FROM training_runs WHERE id = ?",
            self.run_columns()
        ));
        run_query!(self, sqlx::query_as(sql), [id], fetch_optional).read("training_runs", "run")
    }

    /// Every run, oldest first.
    pub async fn list_runs(&self) -> Result<Vec<TrainingRun>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {} FROM training_runs ORDER BY id",
            self.run_columns()
        ));
        run_query!(self, sqlx::query_as(sql), [], fetch_all).read("training_runs", "list_runs")
    }

    /// Runs that never finished (still going, or killed), oldest first.
    pub async fn unfinished_runs(&self) -> Result<Vec<TrainingRun>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {} FROM training_runs WHERE finished_at IS NULL ORDER BY id",
            self.run_columns()
        ));
        run_query!(self, sqlx::query_as(sql), [], fetch_all)
            .read("training_runs", "unfinished_runs")
    }
}

/// The owner columns of a `training_runs` row: all three set, or none.
#[derive(sqlx::FromRow)]
pub(crate) struct OwnerColumns {
    pid: Option<i64>,
    host: Option<String>,
    token: Option<String>,
}

impl TryFrom<OwnerColumns> for Option<RunOwner> {
    type Error = StoreError;
    fn try_from(r: OwnerColumns) -> Result<Option<RunOwner>, StoreError> {
        Ok(match (r.pid, r.host, r.token) {
            (Some(pid), Some(host), Some(token)) => Some(RunOwner {
                pid: uint(pid, "training_runs", "pid")?,
                host,
                token,
            }),
            _ => None,
        })
    }
}
