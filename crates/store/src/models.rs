//! The `models` table: trained model files with their metrics and cards.

use crate::error::QueryContext;
use crate::rows::to_json;
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
        run_query!(self, sqlx::query_as(sql), [], fetch_all).read("models", "list_models")
    }
}
