//! The `uploads` table: matrices uploaded to the HTTP service, shared by every
//! replica on one database. The store keeps the encoded matrix as opaque bytes
//! (the service's binary CSR encoding) with its dimensions and owner; it never
//! decodes them.

use crate::error::QueryContext;
use crate::rows::int;
use crate::{Store, StoreError};

/// What describes an uploaded matrix, without the matrix itself.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UploadMeta {
    /// The matrix id the service answered with.
    pub id: String,
    /// The API key name that uploaded it ("" without keys).
    pub owner: String,
    /// Rows.
    #[sqlx(try_from = "i64")]
    pub nrows: u64,
    /// Columns.
    #[sqlx(try_from = "i64")]
    pub ncols: u64,
    /// Stored entries.
    #[sqlx(try_from = "i64")]
    pub nnz: u64,
    /// Products the uploader expects (at least 1).
    #[sqlx(try_from = "i64")]
    pub expected_calls: u64,
    /// Bytes of the encoded matrix.
    #[sqlx(try_from = "i64")]
    pub bytes: u64,
    /// When it was first stored (ISO-8601 UTC); empty in a record to store.
    pub created_at: String,
}

/// An uploaded matrix: its description and its encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Upload {
    /// The description (`bytes` is `csr.len()`).
    #[sqlx(flatten)]
    pub meta: UploadMeta,
    /// The encoded matrix.
    pub csr: Vec<u8>,
}

/// The description columns; `bytes` is the length of the encoded matrix
/// (`length` of a BLOB or a BYTEA is its byte count on both backends; cast,
/// since PostgreSQL's is a 32-bit integer).
const META_COLUMNS: &str = "id, owner, nrows, ncols, nnz, expected_calls, \
     CAST(length(csr) AS BIGINT) AS bytes, created_at";

impl Store {
    /// Stores an uploaded matrix under `u.meta.id`, committed when this returns.
    /// Idempotent: a row with that id already there is left as it is (the id
    /// is derived from owner and content, so it holds the same matrix).
    /// Returns whether a row was added. `meta.bytes` and `meta.created_at` are
    /// ignored.
    pub async fn put_upload(&self, u: &Upload) -> Result<bool, StoreError> {
        let m = &u.meta;
        let sql = self.sql(
            "INSERT INTO uploads (id, owner, nrows, ncols, nnz, expected_calls, csr) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        );
        let (nrows, ncols, nnz) = (
            int(m.nrows, "upload rows")?,
            int(m.ncols, "upload columns")?,
            int(m.nnz, "upload nonzeros")?,
        );
        let calls = int(m.expected_calls.max(1), "upload expected calls")?;
        let added = rows_changed!(
            self,
            sql,
            [&m.id, &m.owner, nrows, ncols, nnz, calls, &u.csr]
        )
        .op("put_upload")?;
        Ok(added == 1)
    }

    /// The description of upload `id`, without its bytes: one primary-key
    /// lookup, which the service makes on every use of a cached upload to see
    /// that no replica has deleted it. `None` when there is no such row.
    pub async fn upload_meta(&self, id: &str) -> Result<Option<UploadMeta>, StoreError> {
        let sql = self.sql(&format!("SELECT {META_COLUMNS} FROM uploads WHERE id = ?"));
        run_query!(self, sqlx::query_as(sql), [id], fetch_optional).read("uploads", "upload_meta")
    }

    /// Upload `id` with its encoded bytes; `None` when there is no such row.
    pub async fn get_upload(&self, id: &str) -> Result<Option<Upload>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {META_COLUMNS}, csr FROM uploads WHERE id = ?"
        ));
        run_query!(self, sqlx::query_as(sql), [id], fetch_optional).read("uploads", "get_upload")
    }

    /// Deletes upload `id` if `owner` uploaded it; returns whether a row went
    /// (false when there was none, or it is another owner's).
    pub async fn delete_upload(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let sql = self.sql("DELETE FROM uploads WHERE id = ? AND owner = ?");
        let gone = rows_changed!(self, sql, [id, owner]).op("delete_upload")?;
        Ok(gone == 1)
    }

    /// Whether upload `id` exists and belongs to `owner`.
    pub async fn upload_exists(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        Ok(self
            .upload_meta(id)
            .await?
            .is_some_and(|m| m.owner == owner))
    }
}
