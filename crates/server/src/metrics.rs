//! Prometheus metrics in the text exposition format, kept by hand: request
//! counts by route, method and status, latency histograms by route, device
//! kernel and end-to-end time histograms, and gauges for the cache and queue.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Upper bounds (seconds) of the histogram buckets.
const BUCKETS: [f64; 17] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    kernel: BTreeMap<String, Histogram>,
    device_e2e: BTreeMap<String, Histogram>,
    rejected_full: u64,
    log_failures: u64,
    log_dropped: u64,
    deadline_exceeded: u64,
}

/// The service's counters and histograms.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// Point-in-time values rendered as gauges.
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
    /// 1 when an OpenCL device is in use.
    pub device_up: bool,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave counters inconsistent in a
        // way that matters, so a poisoned lock is simply used.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one finished request.
    pub fn request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let mut m = self.lock();
        *m.requests
            .entry((route.to_string(), method.to_string(), status))
            .or_default() += 1;
        m.latency
            .entry(route.to_string())
            .or_default()
            .observe(seconds);
    }

    /// Records one SpMV's device kernel time and device end-to-end time.
    pub fn spmv(&self, precision: &str, kernel_s: f64, e2e_s: f64) {
        let mut m = self.lock();
        m.kernel
            .entry(precision.to_string())
            .or_default()
            .observe(kernel_s);
        m.device_e2e
            .entry(precision.to_string())
            .or_default()
            .observe(e2e_s);
    }

    /// Counts a request turned away because the device queue was full.
    pub fn queue_full(&self) {
        self.lock().rejected_full += 1;
    }

    /// Counts a request that could not be written to the results database.
    pub fn log_failure(&self) {
        self.lock().log_failures += 1;
    }

    /// Counts a request answered 503 because it passed its deadline.
    pub fn deadline_exceeded(&self) {
        self.lock().deadline_exceeded += 1;
    }

    /// Counts a request-log entry dropped because the log's queue was full.
    pub fn log_dropped(&self) {
        self.lock().log_dropped += 1;
    }

    /// The exposition text.
    pub fn render(&self, g: Gauges) -> String {
        let m = self.lock();
        let mut out = String::new();
        out.push_str(
            "# HELP spmv_http_requests_total HTTP requests by route, method and status.\n",
        );
        out.push_str("# TYPE spmv_http_requests_total counter\n");
        for ((route, method, status), n) in &m.requests {
            let _ = writeln!(
                out,
                "spmv_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                escape(route),
                escape(method)
            );
        }
        out.push_str("# HELP spmv_http_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE spmv_http_request_duration_seconds histogram\n");
        for (route, h) in &m.latency {
            h.render(
                &mut out,
                "spmv_http_request_duration_seconds",
                &format!("route=\"{}\"", escape(route)),
            );
        }
        out.push_str("# HELP spmv_kernel_seconds Device kernel time of one SpMV (OpenCL events), by precision.\n");
        out.push_str("# TYPE spmv_kernel_seconds histogram\n");
        for (p, h) in &m.kernel {
            h.render(
                &mut out,
                "spmv_kernel_seconds",
                &format!("precision=\"{p}\""),
            );
        }
        out.push_str("# HELP spmv_device_e2e_seconds Device end-to-end time of one SpMV (x upload, kernels, y download).\n");
        out.push_str("# TYPE spmv_device_e2e_seconds histogram\n");
        for (p, h) in &m.device_e2e {
            h.render(
                &mut out,
                "spmv_device_e2e_seconds",
                &format!("precision=\"{p}\""),
            );
        }
        let gauges: [(&str, &str, &str, f64); 6] = [
            (
                "spmv_cache_bytes",
                "gauge",
                "Bytes held by the matrix cache (host and device).",
                g.cache_bytes as f64,
            ),
            (
                "spmv_cache_capacity_bytes",
                "gauge",
                "Capacity of the matrix cache.",
                g.cache_capacity as f64,
            ),
            (
                "spmv_cache_entries",
                "gauge",
                "Matrices in the cache.",
                g.cache_entries as f64,
            ),
            (
                "spmv_queue_in_flight",
                "gauge",
                "Device jobs admitted and not finished.",
                g.queue_in_flight as f64,
            ),
            (
                "spmv_queue_depth",
                "gauge",
                "Device jobs admitted at most.",
                g.queue_depth as f64,
            ),
            (
                "spmv_device_up",
                "gauge",
                "1 when an OpenCL device is in use.",
                if g.device_up { 1.0 } else { 0.0 },
            ),
        ];
        for (name, kind, help, v) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP spmv_queue_rejected_total Requests answered 503 because the device queue was full.\n# TYPE spmv_queue_rejected_total counter\nspmv_queue_rejected_total {}",
            m.rejected_full
        );
        let _ = writeln!(
            out,
            "# HELP spmv_request_log_failures_total Requests that could not be written to the results database.\n# TYPE spmv_request_log_failures_total counter\nspmv_request_log_failures_total {}",
            m.log_failures
        );
        let _ = writeln!(
            out,
            "# HELP spmv_request_log_dropped_total Request-log entries dropped because the writer's queue was full.\n# TYPE spmv_request_log_dropped_total counter\nspmv_request_log_dropped_total {}",
            m.log_dropped
        );
        let _ = writeln!(
            out,
            "# HELP spmv_deadline_exceeded_total Requests answered 503 because they passed the per-request deadline.\n# TYPE spmv_deadline_exceeded_total counter\nspmv_deadline_exceeded_total {}",
            m.deadline_exceeded
        );
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
        assert!(t.contains(
            "spmv_http_requests_total{route=\"/spmv\",method=\"POST\",status=\"200\"} 2"
        ));
        assert!(
            t.contains("spmv_http_request_duration_seconds_bucket{route=\"/spmv\",le=\"0.005\"} 2")
        );
        assert!(
            t.contains("spmv_http_request_duration_seconds_bucket{route=\"/spmv\",le=\"+Inf\"} 3")
        );
        assert!(t.contains("spmv_cache_bytes 42"));
    }
}
