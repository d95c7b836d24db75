//! The `models` table: trained model files with their metrics and cards.

use crate::error::QueryContext;
use crate::rows::{from_json, get, precision, to_json};
use crate::{Model, ModelId, ModelRecord, Store, StoreError};
use sqlx::sqlite::SqliteRow;

impl Store {
    /// Records a trained model. Returns its id.
    pub async fn insert_model(&self, m: &ModelRecord) -> Result<ModelId, StoreError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO models (path, device_name, precision, metrics, card) \
             VALUES (?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(&m.path)
        .bind(&m.device_name)
        .bind(m.precision.as_str())
        .bind(to_json(&m.metrics, "model metrics")?)
        .bind(to_json(&m.card, "model card")?)
        .fetch_one(&self.pool)
        .await
        .op("insert_model")?;
        Ok(ModelId(id))
    }

    /// Every recorded model, oldest first.
    pub async fn list_models(&self) -> Result<Vec<Model>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, path, device_name, precision, metrics, card, created_at \
             FROM models ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .op("list_models")?;
        rows.iter().map(decode).collect()
    }
}

fn decode(r: &SqliteRow) -> Result<Model, StoreError> {
    const OP: &str = "decode model";
    let p: String = get(r, "precision", OP)?;
    let metrics: String = get(r, "metrics", OP)?;
    let card: String = get(r, "card", OP)?;
    Ok(Model {
        id: ModelId(get(r, "id", OP)?),
        record: ModelRecord {
            path: get(r, "path", OP)?,
            device_name: get(r, "device_name", OP)?,
            precision: precision(&p, "models", "precision")?,
            metrics: from_json(&metrics, "models", "metrics")?,
            card: from_json(&card, "models", "card")?,
        },
        created_at: get(r, "created_at", OP)?,
    })
}
