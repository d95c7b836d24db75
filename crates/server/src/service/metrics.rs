//! The service's metrics (prometheus-client), exposed at /metrics.
//!
//! In the OpenMetrics text format: request counts by route, method and status;
//! histograms of request latency by route, of the time device jobs wait in the
//! queue, and of kernel and device end-to-end time by precision; counters of
//! shed and failed work, of device jobs that expired in the queue or whose
//! result was discarded, and of device faults and rebuilds; gauges for the
//! cache and the queue.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::device::queue::QueueCounters;
use crate::device::recovery::RecoveryCounters;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// Buckets from 20 us to about 10 s, a factor of 2.5 apart (15 buckets).
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(2e-5, 2.5, 15))
}

/// The service's counters, histograms and gauges.
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    queue_wait: Histogram,
    kernel: Family<Labels, Histogram, fn() -> Histogram>,
    device_e2e: Family<Labels, Histogram, fn() -> Histogram>,
    rejected_full: Counter,
    solves: Family<Labels, Counter>,
    solve_iterations: Counter,
    deadline: Counter,
    log_failures: Counter,
    log_dropped: Counter,
    jobs: QueueCounters,
    recovery: RecoveryCounters,
    cache_bytes: Gauge,
    cache_capacity: Gauge,
    cache_entries: Gauge,
    queue_in_flight: Gauge,
    queue_depth: Gauge,
    device_up: Gauge,
}

/// Point-in-time values exposed as gauges.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Bytes held by the matrix cache.
    pub cache_bytes: usize,
    /// The cache's capacity.
    pub cache_capacity: usize,
    /// Matrices in the cache.
    pub cache_entries: usize,
    /// Device jobs admitted and not finished.
    pub queue_in_flight: usize,
    /// The queue's depth.
    pub queue_depth: usize,
    /// 1 when an OpenCL device is in use and not being rebuilt.
    pub device_up: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        let histogram = seconds_histogram as fn() -> Histogram;
        let mut m = Metrics {
            registry: Registry::with_prefix("spmv"),
            requests: Family::default(),
            latency: Family::new_with_constructor(histogram),
            queue_wait: seconds_histogram(),
            kernel: Family::new_with_constructor(histogram),
            device_e2e: Family::new_with_constructor(histogram),
            rejected_full: Counter::default(),
            solves: Family::default(),
            solve_iterations: Counter::default(),
            deadline: Counter::default(),
            log_failures: Counter::default(),
            log_dropped: Counter::default(),
            jobs: QueueCounters::default(),
            recovery: RecoveryCounters::default(),
            cache_bytes: Gauge::default(),
            cache_capacity: Gauge::default(),
            cache_entries: Gauge::default(),
            queue_in_flight: Gauge::default(),
            queue_depth: Gauge::default(),
            device_up: Gauge::default(),
        };
        m.register_all();
        m
    }
}

impl Metrics {
    fn register_all(&mut self) {
        let r = &mut self.registry;
        r.register(
            "http_requests",
            "HTTP requests by route, method and status",
            self.requests.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "Request latency inside the server, by route",
            self.latency.clone(),
        );
        r.register(
            "queue_wait_seconds",
            "Time a device job waited in the queue before it started",
            self.queue_wait.clone(),
        );
        r.register(
            "kernel_seconds",
            "Device kernel time of one SpMV (OpenCL events), by precision",
            self.kernel.clone(),
        );
        r.register(
            "device_e2e_seconds",
            "Device end-to-end time of one SpMV (x upload, kernels, y download), by precision",
            self.device_e2e.clone(),
        );
        r.register(
            "queue_rejected",
            "Requests answered 503 because the device queue was full",
            self.rejected_full.clone(),
        );
        r.register(
            "solves",
            "Iterative solves on the device, by why they stopped",
            self.solves.clone(),
        );
        r.register(
            "solve_iterations",
            "Iterations of the iterative solves on the device",
            self.solve_iterations.clone(),
        );
        r.register(
            "deadline_exceeded",
            "Requests answered 503 because they passed the per-request deadline",
            self.deadline.clone(),
        );
        r.register(
            "request_log_failures",
            "Requests that could not be written to the results database",
            self.log_failures.clone(),
        );
        r.register(
            "request_log_dropped",
            "Request-log entries dropped because the writer's queue was full",
            self.log_dropped.clone(),
        );
        r.register(
            "device_jobs_expired",
            "Device jobs dropped without running: their request's deadline passed (or its client left) while they waited",
            self.jobs.expired.clone(),
        );
        r.register(
            "device_jobs_discarded",
            "Device jobs that ran to their end after their request stopped waiting (result discarded)",
            self.jobs.discarded.clone(),
        );
        r.register(
            "device_faults",
            "Device jobs that failed with an OpenCL error (each drops the engine for a rebuild)",
            self.recovery.faults.clone(),
        );
        r.register(
            "device_rebuilds",
            "Engines rebuilt and checked after a device fault",
            self.recovery.rebuilds.clone(),
        );
        r.register(
            "device_rebuild_failures",
            "Attempts to rebuild the engine after a device fault that failed",
            self.recovery.rebuild_failures.clone(),
        );
        r.register(
            "cache_bytes",
            "Bytes held by the matrix cache (host and device)",
            self.cache_bytes.clone(),
        );
        r.register(
            "cache_capacity_bytes",
            "Capacity of the matrix cache",
            self.cache_capacity.clone(),
        );
        r.register(
            "cache_entries",
            "Matrices in the cache",
            self.cache_entries.clone(),
        );
        r.register(
            "queue_in_flight",
            "Device jobs admitted and not finished",
            self.queue_in_flight.clone(),
        );
        r.register(
            "queue_depth",
            "Device jobs admitted at most",
            self.queue_depth.clone(),
        );
        r.register(
            "device_up",
            "1 when an OpenCL device is in use and not being rebuilt",
            self.device_up.clone(),
        );
    }

    /// The device queue's counters (the queue counts into them).
    pub fn job_counters(&self) -> QueueCounters {
        self.jobs.clone()
    }

    /// The fault-recovery counters (the device slot counts into them).
    pub fn recovery_counters(&self) -> RecoveryCounters {
        self.recovery.clone()
    }

    /// Counts one finished request.
    pub fn request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&vec![
                ("route", route.to_string()),
                ("method", method.to_string()),
                ("status", status.to_string()),
            ])
            .inc();
        self.latency
            .get_or_create(&vec![("route", route.to_string())])
            .observe(seconds);
    }

    /// Records how long a device job waited before it started.
    pub fn queue_wait(&self, seconds: f64) {
        self.queue_wait.observe(seconds);
    }

    /// Records one SpMV's device kernel time and device end-to-end time.
    pub fn spmv(&self, precision: &str, kernel_s: f64, e2e_s: f64) {
        let l = vec![("precision", precision.to_string())];
        self.kernel.get_or_create(&l).observe(kernel_s);
        self.device_e2e.get_or_create(&l).observe(e2e_s);
    }

    /// Counts a solve on the device, its iterations and why it stopped.
    pub fn solve(&self, iterations: usize, stop: &str) {
        self.solves
            .get_or_create(&vec![("stop", stop.to_string())])
            .inc();
        self.solve_iterations.inc_by(iterations as u64);
    }

    /// Counts a request turned away because the device queue was full.
    pub fn queue_full(&self) {
        self.rejected_full.inc();
    }

    /// Counts a request that could not be written to the results database.
    pub fn log_failure(&self) {
        self.log_failures.inc();
    }

    /// Counts a request answered 503 because it passed its deadline.
    pub fn deadline_exceeded(&self) {
        self.deadline.inc();
    }

    /// Counts a request-log entry dropped because the log's queue was full.
    pub fn log_dropped(&self) {
        self.log_dropped.inc();
    }

    /// The exposition text, with the gauges set to `g` first.
    pub fn render(&self, g: Gauges) -> String {
        let set = |gauge: &Gauge<i64, std::sync::atomic::AtomicI64>, v: usize| {
            gauge.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set(&self.cache_bytes, g.cache_bytes);
        set(&self.cache_capacity, g.cache_capacity);
        set(&self.cache_entries, g.cache_entries);
        set(&self.queue_in_flight, g.queue_in_flight);
        set(&self.queue_depth, g.queue_depth);
        set(&self.device_up, usize::from(g.device_up));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.request("/spmv", "POST", 200, 0.003);
        m.request("/spmv", "POST", 200, 0.2);
        m.request("/spmv", "POST", 503, 0.0001);
        let t = m.render(Gauges {
            cache_bytes: 42,
            ..Default::default()
        });
        for line in [
            "spmv_http_requests_total{route=\"/spmv\",method=\"POST\",status=\"200\"} 2",
            "spmv_http_request_duration_seconds_count{route=\"/spmv\"} 3",
            "spmv_http_request_duration_seconds_bucket{le=\"+Inf\",route=\"/spmv\"} 3",
            "spmv_cache_bytes 42",
        ] {
            assert!(t.contains(line), "{line:?} missing from {t}");
        }
        assert!(t.ends_with("# EOF\n"), "{t}");
    }
}
