//! The `label_queue` table: corpus matrices waiting to be labelled by
//! `trainer worker` processes, each claimed by one worker at a time.
//!
//! A claim is held while its heartbeat is fresh; once the heartbeat is older
//! than the lease the claiming worker passes, the claim has lapsed and the next
//! [`Store::claim_label`] may take it over. On PostgreSQL the claim picks its
//! row with `FOR UPDATE SKIP LOCKED`, so workers never wait on each other's
//! claims; on SQLite the one `UPDATE ... RETURNING` statement runs under the
//! database's single write lock, which gives the same one-owner guarantee.

use crate::backend::Backend;
use crate::error::QueryContext;
use crate::rows::{uint, Stored};
use crate::{Store, StoreError};
use std::time::Duration;

/// The id of a queue row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct QueueId(pub i64);

/// The state of a queue row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueStatus {
    /// Never claimed.
    Pending,
    /// Held by a worker (whose heartbeat may have stopped: see
    /// [`QueueEntry::lapsed`]).
    Claimed,
    /// Labelled.
    Done,
    /// Labelling failed (the error is kept).
    Failed,
}

impl QueueStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueStatus::Pending => "pending",
            QueueStatus::Claimed => "claimed",
            QueueStatus::Done => "done",
            QueueStatus::Failed => "failed",
        }
    }
}

impl std::str::FromStr for QueueStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<QueueStatus, StoreError> {
        Ok(match s {
            "pending" => QueueStatus::Pending,
            "claimed" => QueueStatus::Claimed,
            "done" => QueueStatus::Done,
            "failed" => QueueStatus::Failed,
            other => {
                return Err(StoreError::InvalidValue {
                    what: "queue status",
                    message: format!("unknown status '{other}'"),
                })
            }
        })
    }
}

/// A row claimed by [`Store::claim_label`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelClaim {
    /// The row.
    pub id: QueueId,
    /// The corpus item's name.
    pub name: String,
    /// The corpus item's source.
    pub source: String,
    /// How many times the row has been claimed, this claim included (above 1:
    /// an earlier claim lapsed or was released).
    pub attempts: u32,
}

/// A queue row as listed by [`Store::label_queue`].
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueueEntry {
    /// The row.
    pub id: QueueId,
    /// The corpus item's name.
    pub name: String,
    /// The corpus item's source.
    pub source: String,
    /// Its state.
    #[sqlx(try_from = "Stored<String>")]
    pub status: QueueStatus,
    /// How many times it was claimed.
    #[sqlx(try_from = "i64")]
    pub attempts: u32,
    /// The worker holding or last holding it.
    pub worker: Option<String>,
    /// Why labelling failed.
    pub error: Option<String>,
    /// Whether it is claimed and its heartbeat is older than the lease asked about.
    pub lapsed: bool,
}

/// The SQL condition "the claim's heartbeat is older than `?N` seconds".
fn lapsed_sql(b: Backend, lease_param: &str) -> String {
    format!(
        "(status = 'claimed' AND {} > {lease_param})",
        b.seconds_since("heartbeat_at")
    )
}

impl Store {
    /// Adds the corpus items `(name, source)` to `queue` as pending; items
    /// already in it (whatever their state) are left alone. Returns how many
    /// were added. One transaction.
    pub async fn enqueue_labels(
        &self,
        queue: &str,
        items: &[(String, String)],
    ) -> Result<usize, StoreError> {
        let sql = self.sql(
            "INSERT INTO label_queue (queue, name, source) VALUES (?, ?, ?) \
             ON CONFLICT (queue, name) DO NOTHING",
        );
        let added = rows_changed_each!(self, sql, items, |sql, (name, source)| {
            sqlx::query(sql).bind(queue).bind(name).bind(source)
        })
        .op("enqueue_labels")?;
        Ok(added as usize)
    }

    /// Claims the first row of `queue` that is pending, or claimed with a
    /// heartbeat older than `lease` (its worker stopped), and was claimed fewer
    /// than `max_attempts` times, for `worker`. `None` when there is none now.
    pub async fn claim_label(
        &self,
        queue: &str,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<LabelClaim>, StoreError> {
        let b = self.backend();
        let skip_locked = match b {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let sql = self.sql(&format!(
            "UPDATE label_queue SET status = 'claimed', worker = ?1, claimed_at = {now}, \
               heartbeat_at = {now}, attempts = attempts + 1, error = NULL \
             WHERE id = (SELECT id FROM label_queue \
               WHERE queue = ?2 AND attempts < ?4 AND (status = 'pending' OR {lapsed}) \
               ORDER BY id LIMIT 1 {skip_locked}) \
             RETURNING id, name, source, attempts",
            now = b.now(),
            lapsed = lapsed_sql(b, "?3"),
        ));
        let row: Option<(i64, String, String, i64)> = run_query!(
            self,
            sqlx::query_as(sql),
            [worker, queue, lease.as_secs_f64(), i64::from(max_attempts)],
            fetch_optional
        )
        .op("claim_label")?;
        row.map(|(id, name, source, attempts)| {
            Ok(LabelClaim {
                id: QueueId(id),
                name,
                source,
                attempts: uint(attempts, "label_queue", "attempts")?,
            })
        })
        .transpose()
    }

    /// Renews `worker`'s claim on row `id`. Returns `false` when the claim is no
    /// longer this worker's (it lapsed and another worker took it over, or it
    /// was finished).
    pub async fn heartbeat_label(&self, id: QueueId, worker: &str) -> Result<bool, StoreError> {
        let sql = self.sql(&format!(
            "UPDATE label_queue SET heartbeat_at = {} \
             WHERE id = ? AND worker = ? AND status = 'claimed'",
            self.backend().now()
        ));
        let n = rows_changed!(self, sql, [id.0, worker]).op("heartbeat_label")?;
        Ok(n == 1)
    }

    /// Ends `worker`'s claim on row `id`: done (`error: None`) or failed with
    /// the error. Returns `false`, changing nothing, when the claim is no longer
    /// this worker's.
    pub async fn finish_label(
        &self,
        id: QueueId,
        worker: &str,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let status = match error {
            None => QueueStatus::Done,
            Some(_) => QueueStatus::Failed,
        };
        let sql = self.sql(&format!(
            "UPDATE label_queue SET status = ?, error = ?, finished_at = {} \
             WHERE id = ? AND worker = ? AND status = 'claimed'",
            self.backend().now()
        ));
        let n =
            rows_changed!(self, sql, [status.as_str(), error, id.0, worker]).op("finish_label")?;
        Ok(n == 1)
    }

    /// Every row of `queue` by id, with whether its claim has lapsed under `lease`.
    pub async fn label_queue(
        &self,
        queue: &str,
        lease: Duration,
    ) -> Result<Vec<QueueEntry>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT id, name, source, status, attempts, worker, error, {} AS lapsed \
             FROM label_queue WHERE queue = ?1 ORDER BY id",
            lapsed_sql(self.backend(), "?2")
        ));
        run_query!(
            self,
            sqlx::query_as(sql),
            [queue, lease.as_secs_f64()],
            fetch_all
        )
        .read("label_queue", "label_queue")
    }
}
