//! The device the service runs on, or why there is none: opening it (the
//! engine, its programs, the copy bandwidth and launch cost measured at start).

use engine::{CopyBandwidth, DeviceInfo, Engine};
use sparse::Precision;
use std::sync::Arc;

/// The device the service runs on, or why there is none.
#[derive(Clone)]
pub struct DeviceState {
    /// The engine, when a device was opened. [`AppState::new`] hands it to
    /// its [`DeviceSlot`] and keeps none here, so that a device fault can
    /// really drop it: use [`DeviceState::available`] to ask whether there
    /// is a device.
    pub engine: Option<Arc<Engine>>,
    /// The device's description, kept when the engine is handed on.
    info: Option<DeviceInfo>,
    /// Copy bandwidth measured at start-up (the bandwidth bound's reference).
    pub copy: Option<CopyBandwidth>,
    /// Host time to prepare one kernel launch, measured at start-up (ms):
    /// the planner's per-launch analysis cost.
    pub launch_ms: Option<f64>,
    /// Why there is no device, when there is none.
    pub unavailable: Option<String>,
    /// What shared host pools are made of (`svm` or `mapped`) and from how
    /// many bytes of x and y together they are used in place; `None`
    /// without a device.
    pub shared: Option<(&'static str, usize)>,
}

impl DeviceState {
    /// Opens the device named by `selector` (or the best one), measuring its copy
    /// bandwidth. Never fails: without a device the reason is kept for /device and
    /// the 503 answers of /spmv. Blocks (OpenCL calls).
    pub fn open(selector: Option<&str>) -> DeviceState {
        DeviceState::open_with(&engine::EngineConfig {
            device: selector.map(str::to_string),
            ..Default::default()
        })
    }

    /// As [`DeviceState::open`], with the whole engine configuration.
    pub fn open_with(cfg: &engine::EngineConfig) -> DeviceState {
        match Engine::with_config(cfg).and_then(|e| build_programs(&e).map(|()| e)) {
            Ok(engine) => {
                let fig = engine.planning_figures();
                let launch_ms = fig.launch();
                let copy = match fig.copy {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not measure the device's copy bandwidth");
                        None
                    }
                };
                let i = engine.info();
                let shared_memory = if engine.shared_is_svm() {
                    "svm"
                } else {
                    "mapped"
                };
                tracing::info!(device = %i.name, platform = %i.platform, kind = %i.kind,
                    shared_memory, in_place_min_bytes = engine.in_place_min_bytes(),
                    copy_gbps = copy.as_ref().map(|c| c.gbps),
                    peak_copy_gbps = copy.as_ref().map(|c| c.peak_gbps), "OpenCL device ready");
                let shared = Some((shared_memory, engine.in_place_min_bytes()));
                DeviceState {
                    info: Some(engine.info().clone()),
                    engine: Some(Arc::new(engine)),
                    copy,
                    launch_ms,
                    unavailable: None,
                    shared,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "no OpenCL device: /predict works, /spmv answers 503");
                DeviceState::none(e.to_string())
            }
        }
    }

    /// No device, for the given reason.
    pub fn none(reason: impl Into<String>) -> DeviceState {
        DeviceState {
            engine: None,
            info: None,
            copy: None,
            launch_ms: None,
            unavailable: Some(reason.into()),
            shared: None,
        }
    }

    /// The same description without the engine (once the slot holds it).
    pub fn without_engine(self) -> DeviceState {
        DeviceState {
            engine: None,
            ..self
        }
    }

    /// The device's description.
    pub fn info(&self) -> Option<&DeviceInfo> {
        self.info.as_ref()
    }

    /// Whether a device was opened at start (it may be rebuilding now: see
    /// [`DeviceSlot::is_up`]).
    pub fn available(&self) -> bool {
        self.info.is_some()
    }

    /// The device's name.
    pub fn name(&self) -> Option<&str> {
        self.info().map(|i| i.name.as_str())
    }

    /// The device as the model selector matches it (name, vendor, driver, type).
    pub fn identity(&self) -> Option<selector::DeviceIdentity> {
        self.info()
            .map(|i| selector::DeviceIdentity::new(&i.name, &i.vendor, &i.driver, &i.kind))
    }
}

/// Builds (or loads from the binary cache) the kernel programs of every
/// precision the device supports, so that no request pays for a build.
pub(crate) fn build_programs(engine: &Engine) -> Result<(), engine::EngineError> {
    engine.program(Precision::F32)?;
    if engine.info().fp64 {
        engine.program(Precision::F64)?;
    }
    Ok(())
}
