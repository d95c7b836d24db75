//! The `matrices` table: every matrix measured or served, by content hash.

use crate::error::QueryContext;
use crate::rows::{int, to_json};
use crate::{Matrix, MatrixId, MatrixRecord, Store, StoreError};

const COLUMNS: &str = "id, content_hash, name, source, nrows, ncols, nnz, features, created_at";

impl Store {
    /// Inserts a matrix, or finds the one with the same content hash. Returns its
    /// id. The first writer's name and source are kept (a corpus matrix later seen
    /// in a request stays a corpus matrix); the features are replaced, so that
    /// rows written under an older feature order are brought up to date.
    pub async fn upsert_matrix(&self, m: &MatrixRecord) -> Result<MatrixId, StoreError> {
        let sql = self.sql(
            "INSERT INTO matrices (content_hash, name, source, nrows, ncols, nnz, features) \
             VALUES (?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (content_hash) DO UPDATE SET features = excluded.features \
             RETURNING id",
        );
        let (nrows, ncols, nnz) = (
            int(m.nrows, "nrows")?,
            int(m.ncols, "ncols")?,
            int(m.nnz, "nnz")?,
        );
        let features = to_json(&m.features, "features")?;
        let id: i64 = run_query!(
            self,
            sqlx::query_scalar(sql),
            [
                &m.content_hash,
                &m.name,
                &m.source,
                nrows,
                ncols,
                nnz,
                &features
            ],
            fetch_one
        )
        .op("upsert_matrix")?;
        Ok(MatrixId(id))
    }

    /// The matrix with this content hash, if stored.
    pub async fn matrix_by_hash(&self, content_hash: &str) -> Result<Option<Matrix>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM matrices WHERE content_hash = ?"
        ));
        run_query!(self, sqlx::query_as(sql), [content_hash], fetch_optional)
            .read("matrices", "matrix_by_hash")
    }

    /// The matrix with this id, if stored.
    pub async fn matrix(&self, id: MatrixId) -> Result<Option<Matrix>, StoreError> {
        let sql = self.sql(&format!("SELECT {COLUMNS} FROM matrices WHERE id = ?"));
        run_query!(self, sqlx::query_as(sql), [id], fetch_optional).read("matrices", "matrix")
    }

    /// Stored matrices by id. `source: None` lists all; `Some(s)` lists those whose
    /// source is `s` or starts with `s:` — so `Some("generator")` gives every
    /// generator family and `Some("generator:stencil2d")` one of them.
    pub async fn list_matrices(&self, source: Option<&str>) -> Result<Vec<Matrix>, StoreError> {
        match source {
            None => {
                let sql = self.sql(&format!("SELECT {COLUMNS} FROM matrices ORDER BY id"));
                run_query!(self, sqlx::query_as(sql), [], fetch_all)
            }
            Some(s) => {
                // substr instead of LIKE: sources may hold '%' or '_'.
                let sql = self.sql(&format!(
                    "SELECT {COLUMNS} FROM matrices \
                     WHERE source = ?1 OR substr(source, 1, length(?1) + 1) = ?1 || ':' ORDER BY id"
                ));
                run_query!(self, sqlx::query_as(sql), [s], fetch_all)
            }
        }
        .read("matrices", "list_matrices")
    }
}
