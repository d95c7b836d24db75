//! /metrics parsed as Prometheus text by a real parser: request counters by
//! route and status, latency, queue-wait and kernel histograms, and gauges.

use crate::common;

use common::*;
use prometheus_parse::{Scrape, Value};

async fn scrape(app: &axum::Router) -> Scrape {
    let r = send(app, get("/metrics")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{:?}",
        r.headers
    );
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text")
}

fn sample<'a>(s: &'a Scrape, name: &str, labels: &[(&str, &str)]) -> Option<&'a Value> {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| &x.value)
}

#[tokio::test]
async fn counters_histograms_and_gauges_parse() {
    let (app, _) = test_app(&["--no-device"]).await;
    for _ in 0..3 {
        send(&app, get("/healthz")).await;
    }
    send(&app, get("/no/such/route")).await;
    let s = scrape(&app).await;
    match sample(
        &s,
        "spmv_http_requests_total",
        &[("route", "/healthz"), ("status", "200")],
    ) {
        // OpenMetrics types the family (`spmv_http_requests`) and names the sample
        // `..._total`; this parser then reads the sample as untyped.
        Some(Value::Counter(n) | Value::Untyped(n)) => assert_eq!(*n, 3.0),
        other => panic!("healthz counter: {other:?}"),
    }
    match sample(
        &s,
        "spmv_http_request_duration_seconds",
        &[("route", "/healthz")],
    ) {
        Some(Value::Histogram(h)) => {
            assert_eq!(h.last().unwrap().count, 3.0);
            assert!(h.windows(2).all(|w| w[0].count <= w[1].count), "cumulative");
        }
        other => panic!("latency histogram: {other:?}"),
    }
    assert!(matches!(sample(&s, "spmv_device_up", &[]), Some(Value::Gauge(g)) if *g == 0.0));
    assert!(
        matches!(sample(&s, "spmv_cache_capacity_bytes", &[]), Some(Value::Gauge(g)) if *g > 0.0)
    );
}

#[tokio::test]
async fn spmv_feeds_the_queue_wait_and_kernel_histograms() {
    let Some((app, _)) = device_app("spmv_feeds_the_histograms", &[]).await else {
        return;
    };
    let body =
        r#"{"nrows":2,"ncols":2,"row_ptr":[0,1,2],"col_idx":[0,1],"values":[2,3],"x":[1,1]}"#;
    for _ in 0..2 {
        assert_eq!(
            send(&app, post("/spmv", "application/json", body))
                .await
                .status,
            200
        );
    }
    let s = scrape(&app).await;
    match sample(&s, "spmv_queue_wait_seconds", &[]) {
        Some(Value::Histogram(h)) => assert!(h.last().unwrap().count >= 2.0),
        other => panic!("queue wait: {other:?}"),
    }
    match sample(&s, "spmv_kernel_seconds", &[("precision", "f64")]) {
        Some(Value::Histogram(h)) => assert_eq!(h.last().unwrap().count, 2.0),
        other => panic!("kernel: {other:?}"),
    }
    assert!(matches!(sample(&s, "spmv_device_up", &[]), Some(Value::Gauge(g)) if *g == 1.0));
}
