//! The `models` table: trained model files with their metrics and cards.

use crate::error::QueryContext;
use crate::rows::{from_json, precision, to_json};
use crate::{Model, ModelId, ModelRecord, Store, StoreError};

impl Store {
    /// Records a trained model. Returns its id.
    pub async fn insert_model(&self, m: &ModelRecord) -> Result<ModelId, StoreError> {
        let sql = self.sql(
            "INSERT INTO models (path, device_name, precision, metrics, card) \
             VALUES (?, ?, ?, ?, ?) RETURNING id",
        );
        let metrics = to_json(&m.metrics, "model metrics")?;
        let card = to_json(&m.card, "model card")?;
        let id: i64 = run_query!(
            self,
            sqlx::query_scalar(sql),
            [
                &m.path,
                &m.device_name,
                m.precision.as_str(),
                &metrics,
                &card
            ],
            fetch_one
        )
        .op("insert_model")?;
        Ok(ModelId(id))
    }

    /// Every recorded model, oldest first.
    pub async fn list_models(&self) -> Result<Vec<Model>, StoreError> {
        let sql = self.sql(
            "SELECT id, path, device_name, precision, metrics, card, created_at \
             FROM models ORDER BY id",
        );
        let rows = run_query!(self, sqlx::query_as::<_, ModelRow>(sql), [], fetch_all)
            .op("list_models")?;
        rows.into_iter().map(Model::try_from).collect()
    }
}

/// A `models` row as stored.
#[derive(sqlx::FromRow)]
struct ModelRow {
    id: i64,
    path: String,
    device_name: String,
    precision: String,
    metrics: String,
    card: String,
    created_at: String,
}

impl TryFrom<ModelRow> for Model {
    type Error = StoreError;
    fn try_from(r: ModelRow) -> Result<Model, StoreError> {
        Ok(Model {
            id: ModelId(r.id),
            record: ModelRecord {
                path: r.path,
                device_name: r.device_name,
                precision: precision(&r.precision, "models", "precision")?,
                metrics: from_json(&r.metrics, "models", "metrics")?,
                card: from_json(&r.card, "models", "card")?,
            },
            created_at: r.created_at,
        })
    }
}
