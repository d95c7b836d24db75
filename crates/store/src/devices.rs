//! The `devices` table: the compute devices measurements were taken on.

use crate::error::QueryContext;
use crate::rows::{int, non_negative};
use crate::{Device, DeviceId, DeviceRecord, Store, StoreError};

const COLUMNS: &str =
    "id, name, vendor, driver, compute_units, global_mem_bytes, copy_bandwidth_gbps, created_at";

impl Store {
    /// Inserts a device, or updates the one with the same name, vendor and driver
    /// (compute units, memory and bandwidth take the new values; a `None`
    /// bandwidth keeps the stored one). Returns its id.
    pub async fn upsert_device(&self, d: &DeviceRecord) -> Result<DeviceId, StoreError> {
        let bw = d
            .copy_bandwidth_gbps
            .map(|b| non_negative(b, "copy bandwidth"))
            .transpose()?;
        let sql = self.sql(
            "INSERT INTO devices (name, vendor, driver, compute_units, global_mem_bytes, copy_bandwidth_gbps) \
             VALUES (?, ?, ?, ?, ?, ?) \
             ON CONFLICT (name, vendor, driver) DO UPDATE SET \
               compute_units = excluded.compute_units, \
               global_mem_bytes = excluded.global_mem_bytes, \
               copy_bandwidth_gbps = COALESCE(excluded.copy_bandwidth_gbps, devices.copy_bandwidth_gbps) \
             RETURNING id",
        );
        let mem = int(d.global_mem_bytes, "global memory size")?;
        let id: i64 = run_query!(
            self,
            sqlx::query_scalar(sql),
            [
                &d.name,
                &d.vendor,
                &d.driver,
                i64::from(d.compute_units),
                mem,
                bw
            ],
            fetch_one
        )
        .op("upsert_device")?;
        Ok(DeviceId(id))
    }

    /// The device with this id, if any.
    pub async fn device(&self, id: DeviceId) -> Result<Option<Device>, StoreError> {
        let sql = self.sql(&format!("SELECT {COLUMNS} FROM devices WHERE id = ?"));
        run_query!(self, sqlx::query_as(sql), [id], fetch_optional).read("devices", "device")
    }

    /// Every device, by id.
    pub async fn list_devices(&self) -> Result<Vec<Device>, StoreError> {
        let sql = self.sql(&format!("SELECT {COLUMNS} FROM devices ORDER BY id"));
        run_query!(self, sqlx::query_as(sql), [], fetch_all).read("devices", "list_devices")
    }
}
