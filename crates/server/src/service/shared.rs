//! Uploaded matrices shared between replicas through the results database.
//!
//! With a database (the default), every upload is written to its `uploads`
//! table (the CSR in the binary encoding of [`crate::domain::csr_binary`]) before the
//! service answers, and the database is the truth about which uploads exist:
//! a replica whose memory cache lacks an id loads it from there (and plans and
//! uploads it to its own device on first use), and every use of a cached
//! upload first looks its row up by primary key, so that a matrix deleted on
//! one replica is gone on all of them at the next request. Plans are not
//! shared: each replica plans for its own device and models. Without a
//! database (`--no-database`) uploads live in this process's cache only.

use crate::domain::config::Limits;
use crate::domain::error::ApiError;
use crate::service::auth::Principal;
use crate::service::state::{transposed_id, AppState, StoredMatrix};
use sparse::{Csr, Features};
use std::sync::Arc;

/// Largest encoded matrix the database keeps: both SQLite's default
/// `SQLITE_MAX_LENGTH` and PostgreSQL's BYTEA allow about 10^9 bytes per
/// value (at 12 bytes per nonzero, about 83 million nonzeros).
pub const MAX_SHARED_BYTES: u64 = 1_000_000_000;

/// Bytes of `a` in the stored encoding (u32 indices, f64 values).
pub fn shared_bytes(a: &Csr<f64>) -> u64 {
    crate::domain::csr_binary::HEADER_BYTES as u64
        + 4 * (a.nrows() as u64 + 1)
        + 12 * a.nnz() as u64
}

/// Stored rows were checked when they were uploaded (on some replica, under
/// its limits); reading them back is limited only by the row's own length.
const STORED: Limits = Limits {
    max_body_bytes: usize::MAX,
    max_decompressed_bytes: usize::MAX,
    max_rows: usize::MAX,
    max_cols: usize::MAX,
    max_nnz: usize::MAX,
    body_timeout_s: 0,
};

impl AppState {
    /// Refuses (413), before any work, a matrix too large for the database to
    /// share; without a database any size the limits allow is kept.
    pub fn check_shareable(&self, a: &Csr<f64>) -> Result<(), ApiError> {
        let bytes = shared_bytes(a);
        if self.store().is_some() && bytes > MAX_SHARED_BYTES {
            return Err(ApiError::too_large(
                "the matrix in the shared database's encoding (bytes)",
                bytes,
                MAX_SHARED_BYTES,
            ));
        }
        Ok(())
    }

    /// Writes an upload to the database (idempotent for its id). `None`
    /// without a database, else whether a row was added (false: it was there).
    pub async fn share_upload(&self, m: &Arc<StoredMatrix>) -> Result<Option<bool>, ApiError> {
        let Some(db) = self.store().cloned() else {
            return Ok(None);
        };
        let m2 = m.clone();
        let csr = crate::service::blocking(move || {
            Ok(crate::domain::csr_binary::encode(&m2.host, 4, 8, None))
        })
        .await?;
        let u = store::Upload {
            meta: store::UploadMeta {
                id: m.id.clone(),
                owner: m.owner.clone(),
                nrows: m.host.nrows() as u64,
                ncols: m.host.ncols() as u64,
                nnz: m.host.nnz() as u64,
                expected_calls: m.expected_calls,
                bytes: csr.len() as u64,
                created_at: String::new(),
            },
            csr,
        };
        Ok(Some(db.put_upload(&u).await?))
    }

    /// This caller's upload `id`, or `None` (never uploaded, deleted on any
    /// replica, another caller's, or evicted here without a database). With a
    /// database its row is looked up first (one primary-key lookup); a cached
    /// copy whose row is gone is dropped. When `load`, an id this replica has
    /// not cached is read from the database into its cache.
    pub async fn resolve(
        &self,
        id: &str,
        who: &Principal,
        load: bool,
    ) -> Result<Option<Arc<StoredMatrix>>, ApiError> {
        let Some(db) = self.store() else {
            return Ok(self.try_cached(id, who));
        };
        // Nothing to check (and no lookup to pay) when nothing is cached and
        // nothing is to be loaded.
        if !load && self.try_cached(id, who).is_none() {
            return Ok(None);
        }
        let meta = match db.upload_meta(id).await? {
            Some(meta) if meta.owner == who.owner() => meta,
            Some(_) => return Ok(None),
            None => {
                if self.remove_any(id) {
                    tracing::info!(%id, "deleted on another replica; dropped from the cache");
                }
                return Ok(None);
            }
        };
        match self.try_cached(id, who) {
            Some(m) => Ok(Some(m)),
            None if load => self.load_shared(meta).await,
            None => Ok(None),
        }
    }

    /// Reads upload `meta.id` from the database into this replica's cache
    /// (its device state is made on first use, as for an upload here). The
    /// bytes read and decoded are reserved in the memory budget meanwhile.
    async fn load_shared(
        &self,
        meta: store::UploadMeta,
    ) -> Result<Option<Arc<StoredMatrix>>, ApiError> {
        let host = 12 * meta.nnz + 4 * (meta.nrows + 1);
        let _held = self.budget().reserve(meta.bytes + host).await?;
        let db = self.store().cloned().expect("called with a database");
        // Deleted since its description was read: gone.
        let Some(u) = db.get_upload(&meta.id).await? else {
            return Ok(None);
        };
        let m = crate::service::blocking(move || {
            let (a, _) = crate::domain::csr_binary::parse(&u.csr, &STORED).map_err(|e| {
                ApiError::internal(format!("upload {} in the database: {e}", u.meta.id))
            })?;
            drop(u.csr);
            let features = Features::of(&a);
            let m = StoredMatrix::new(u.meta.id, u.meta.owner, a, features);
            Ok(m.with_expected_calls(u.meta.expected_calls))
        })
        .await?;
        tracing::info!(id = %m.id, nnz = m.host.nnz(), "loaded from the shared database");
        Ok(Some(self.insert(m)?.0))
    }

    /// Deletes this caller's upload `id` everywhere; false when there was none
    /// (or it is another caller's). The local copy goes too; other replicas
    /// drop theirs at their next use of it.
    /// The transpose of this caller's uploaded matrix `id`: built from its
    /// host copy on first use (off the async threads) and kept in the cache
    /// under [`transposed_id`] like any matrix (its host copy, plan and device
    /// buffers charged and evicted alike); `None` when `id` is not theirs.
    pub async fn resolve_transposed(
        &self,
        id: &str,
        who: &Principal,
    ) -> Result<Option<Arc<StoredMatrix>>, ApiError> {
        let Some(m) = self.resolve(id, who, true).await? else {
            return Ok(None);
        };
        let tid = transposed_id(id);
        if let Some(t) = self.try_cached(&tid, who) {
            return Ok(Some(t));
        }
        let m2 = m.clone();
        let t = crate::service::blocking(move || {
            Ok(
                StoredMatrix::lazy(tid, m2.owner.clone(), m2.host.transpose())
                    .with_expected_calls(m2.expected_calls),
            )
        })
        .await?;
        Ok(Some(self.insert(t)?.0))
    }

    pub async fn delete_upload(&self, id: &str, who: &Principal) -> Result<bool, ApiError> {
        let Some(db) = self.store() else {
            return Ok(self.remove(id, who));
        };
        let gone = db.delete_upload(id, who.owner()).await?;
        self.remove(id, who);
        Ok(gone)
    }
}
