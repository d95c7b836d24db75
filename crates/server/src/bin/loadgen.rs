//! `loadgen`: an open-loop (fixed-rate) load generator for the service.
//!
//! Requests are scheduled every `1 / rate` seconds whatever the server does:
//! each one is spawned as its own task at its scheduled instant (a tokio
//! interval that bursts to catch up when the generator falls behind), and its
//! latency runs from that *scheduled* instant to the last byte of the answer.
//! A slow answer therefore never delays the next request, and a stall shows in
//! the latency of every request scheduled during it (no coordinated omission).
//!
//! Targets: `/predict` with a generated Matrix Market body, or `/spmv` by id on
//! a matrix uploaded first (x and y as little-endian binary). Latencies go into
//! HDR histograms; answers are counted by status, with connection errors and
//! client time-outs apart. `--find-sustainable` searches for the highest rate
//! whose p99 stays under a bound with every answer a 200.
//!
//! At most `--max-in-flight` requests are open at once; one waiting for a slot
//! still counts its latency from its scheduled instant.
//!
//! Only for loopback or a test deployment of your own: it sends what it is told.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use sparse::Precision;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{Instant, MissedTickBehavior};

#[derive(Parser, Debug)]
#[command(about = "Open-loop, fixed-rate load generator for the SpMV service")]
struct Args {
    /// Server address (host:port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// Route under load.
    #[arg(long, value_enum, default_value_t = Target::Predict)]
    target: Target,
    /// Requests per second, scheduled at fixed intervals.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Generated matrix family.
    #[arg(long, value_enum, default_value_t = Generator::Laplace2d)]
    matrix: Generator,
    /// About how many nonzeros the generated matrix holds (default: 10000 for
    /// /predict, 100000 for /spmv).
    #[arg(long)]
    matrix_nnz: Option<usize>,
    /// Precision asked for.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Requests in flight at most (open connections); a request waiting for a
    /// slot still counts its latency from its scheduled send.
    #[arg(long, default_value_t = 256)]
    max_in_flight: usize,
    /// Client time-out per request once sent, in milliseconds (counted as a time-out).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Unmeasured requests sent one after another before the load (the first
    /// /spmv call compiles the kernels).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// API key, sent as `X-API-Key` (needed only when the server has keys).
    #[arg(long, env = "SPMV_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Search for the highest rate with p99 under `--p99-ms` and only 200s,
    /// instead of one run at `--rate` (which is then the first rate tried).
    #[arg(long)]
    find_sustainable: bool,
    /// The p99 bound of `--find-sustainable`, in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    p99_ms: f64,
    /// Seconds of each probe of `--find-sustainable`.
    #[arg(long, default_value_t = 3.0)]
    probe_seconds: f64,
    /// Highest rate `--find-sustainable` tries.
    #[arg(long, default_value_t = 20_000.0)]
    max_rate: f64,
    /// Bisection steps of `--find-sustainable` after the first failing rate.
    #[arg(long, default_value_t = 4)]
    steps: usize,
    /// Print one JSON object on stdout instead of the human summary.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Target {
    Predict,
    Spmv,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Generator {
    /// 5-point 2D Laplacian (about 5 nonzeros a row).
    Laplace2d,
    /// 10 uniformly random columns a row.
    Uniform,
    /// Power-law row lengths (average 8).
    PowerLaw,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One request, rebuilt for every send (the body is shared, not copied).
struct Workload {
    path: String,
    headers: Vec<(header::HeaderName, String)>,
    body: Bytes,
    /// Length a 200 answer must have (binary y), when known.
    expect_len: Option<usize>,
}

/// How one request ended.
enum Outcome {
    Answered { status: u16, server_ms: Option<f64> },
    Error(String),
    Timeout,
}

/// The generator's view of the service: client, base URI, key.
struct Service {
    client: HttpClient,
    base: String,
    key: Option<String>,
    timeout: Duration,
}

impl Service {
    fn new(args: &Args) -> Service {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(4096)
            .build(conn);
        Service {
            client,
            base: format!("http://{}", args.addr),
            key: args.api_key.clone(),
            timeout: Duration::from_millis(args.timeout_ms),
        }
    }

    /// Sends one request and reads the whole answer.
    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(header::HeaderName, String)],
        body: Bytes,
    ) -> Result<(u16, hyper::HeaderMap, Bytes)> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(k, v);
        }
        if let Some(k) = &self.key {
            req = req.header("x-api-key", k);
        }
        let resp = self.client.request(req.body(Full::new(body))?).await?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await?.to_bytes();
        Ok((parts.status.as_u16(), parts.headers, bytes))
    }

    /// One measured send of `w`, bounded by the client time-out.
    async fn send(&self, w: &Workload) -> Outcome {
        let call = self.call(Method::POST, &w.path, &w.headers, w.body.clone());
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Outcome::Timeout,
            Ok(Err(e)) => Outcome::Error(format!("{e:#}")),
            Ok(Ok((status, headers, body))) => {
                if status == 200 && w.expect_len.is_some_and(|n| n != body.len()) {
                    return Outcome::Error(format!(
                        "a 200 carried {} bytes of y, expected {}",
                        body.len(),
                        w.expect_len.unwrap_or(0)
                    ));
                }
                let server_ms = headers
                    .get("x-server-ms")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok());
                Outcome::Answered { status, server_ms }
            }
        }
    }
}

/// The generated matrix, about `nnz` nonzeros.
fn matrix(args: &Args) -> Result<sparse::Csr<f64>> {
    let nnz = args.matrix_nnz.unwrap_or(match args.target {
        Target::Predict => 10_000,
        Target::Spmv => 100_000,
    });
    Ok(match args.matrix {
        Generator::Laplace2d => {
            let side = ((nnz as f64 / 5.0).sqrt().ceil() as usize).max(2);
            sparse::gen::stencil_2d(side, side)?
        }
        Generator::Uniform => {
            let n = (nnz / 10).max(10);
            sparse::gen::uniform_random(n, n, 10, 1)?
        }
        Generator::PowerLaw => sparse::gen::power_law((nnz / 8).max(16), 8.0, 1)?,
    })
}

/// Builds the request under load; for /spmv, uploads the matrix first.
async fn prepare(svc: &Service, args: &Args) -> Result<Workload> {
    let a = matrix(args)?;
    let mut mm = Vec::new();
    sparse::mm::write(&a, &mut mm)?;
    let p = args.precision.name();
    let text = (header::CONTENT_TYPE, "text/plain".to_string());
    if let Target::Predict = args.target {
        return Ok(Workload {
            path: format!("/predict?precision={p}"),
            headers: vec![text],
            body: mm.into(),
            expect_len: None,
        });
    }
    let (status, _, body) = svc
        .call(
            Method::POST,
            &format!("/matrices?precision={p}"),
            &[text],
            mm.into(),
        )
        .await
        .context("uploading the /spmv matrix (is the server running?)")?;
    if !(200..300).contains(&status) {
        bail!(
            "POST /matrices answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let up: serde_json::Value = serde_json::from_slice(&body)?;
    let id = up["id"].as_str().context("no id in the upload answer")?;
    let width = match args.precision {
        Precision::F32 => 4,
        Precision::F64 => 8,
    };
    let x: Vec<u8> = (0..a.ncols())
        .flat_map(|i| {
            let v = ((i % 17) as f64 - 8.0) / 8.0;
            match args.precision {
                Precision::F32 => (v as f32).to_le_bytes().to_vec(),
                Precision::F64 => v.to_le_bytes().to_vec(),
            }
        })
        .collect();
    let binary = "application/octet-stream".to_string();
    Ok(Workload {
        path: format!("/spmv?matrix_id={id}&precision={p}"),
        headers: vec![
            (header::CONTENT_TYPE, binary.clone()),
            (header::ACCEPT, binary),
        ],
        body: x.into(),
        expect_len: Some(a.nrows() * width),
    })
}

/// Sequential unmeasured requests; each must be answered 200.
async fn warm_up(svc: &Service, w: &Workload, n: usize) -> Result<()> {
    for _ in 0..n {
        match svc.send(w).await {
            Outcome::Answered { status: 200, .. } => {}
            Outcome::Answered { status, .. } => bail!("warm-up request answered {status}"),
            Outcome::Error(e) => bail!("warm-up request failed: {e}"),
            Outcome::Timeout => bail!("warm-up request timed out"),
        }
    }
    Ok(())
}

/// One finished request: how it ended, its latency from its scheduled send,
/// and its time from the actual send (the two differ by the generator's lag).
struct Sample {
    outcome: Outcome,
    latency: Duration,
    service: Duration,
}

/// Everything one phase saw.
struct Tally {
    all: Histogram<u64>,
    ok: Histogram<u64>,
    /// 503s, timed from their actual send: the server's shedding speed.
    shed: Histogram<u64>,
    /// How late requests left (a slot wait or a generator short of CPU).
    lag: Histogram<u64>,
    server: Histogram<u64>,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
    timeouts: u64,
    first_error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    // Microseconds, 1 us to 1 h, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl Tally {
    fn new() -> Tally {
        Tally {
            all: histogram(),
            ok: histogram(),
            shed: histogram(),
            lag: histogram(),
            server: histogram(),
            statuses: BTreeMap::new(),
            errors: 0,
            timeouts: 0,
            first_error: None,
        }
    }

    fn add(&mut self, s: Sample) {
        let us = |d: Duration| d.as_micros().max(1) as u64;
        self.lag
            .saturating_record(us(s.latency.saturating_sub(s.service)));
        match s.outcome {
            Outcome::Answered { status, server_ms } => {
                self.all.saturating_record(us(s.latency));
                match status {
                    200 => self.ok.saturating_record(us(s.latency)),
                    503 => self.shed.saturating_record(us(s.service)),
                    _ => {}
                }
                if let Some(ms) = server_ms {
                    self.server.saturating_record((ms * 1e3).max(1.0) as u64);
                }
                *self.statuses.entry(status).or_default() += 1;
            }
            Outcome::Error(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
            Outcome::Timeout => self.timeouts += 1,
        }
    }
}

/// Runs `rate` requests a second for `seconds`, open loop, and waits for the
/// last answer (each is bounded by the client time-out).
async fn run_phase(
    svc: &Arc<Service>,
    w: &Arc<Workload>,
    slots: &Arc<Semaphore>,
    rate: f64,
    seconds: f64,
) -> Tally {
    let n = (rate * seconds).round().max(1.0) as u64;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(async move {
        let mut t = Tally::new();
        while let Some(sample) = rx.recv().await {
            t.add(sample);
        }
        t
    });
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    for _ in 0..n {
        let scheduled: Instant = tick.tick().await;
        let (svc, w, tx, slots) = (svc.clone(), w.clone(), tx.clone(), slots.clone());
        tokio::spawn(async move {
            let _slot = slots.acquire_owned().await;
            let sent = Instant::now();
            let outcome = svc.send(&w).await;
            let _ = tx.send(Sample {
                outcome,
                latency: scheduled.elapsed(),
                service: sent.elapsed(),
            });
        });
    }
    drop(tx);
    collector.await.expect("the collector task does not panic")
}

/// Milliseconds from a histogram of microseconds.
fn q_ms(h: &Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
}

/// The machine-readable summary of one phase.
#[derive(Serialize)]
struct Summary {
    target: Target,
    rate: f64,
    seconds: f64,
    sent: u64,
    /// Latency of every answered request (any status), from its scheduled send.
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    p999_ms: Option<f64>,
    max_ms: Option<f64>,
    ok_p99_ms: Option<f64>,
    /// Latency of the 503s from their actual send: shedding should be quick.
    shed_p99_ms: Option<f64>,
    shed_max_ms: Option<f64>,
    /// How late requests left their schedule (p99).
    lag_p99_ms: Option<f64>,
    /// Median of the server's own `X-Server-Ms` (when it sends one).
    server_p50_ms: Option<f64>,
    ok: u64,
    s503: u64,
    other_5xx: u64,
    other: u64,
    errors: u64,
    timeouts: u64,
    statuses: BTreeMap<u16, u64>,
    first_error: Option<String>,
}

impl Summary {
    fn of(t: Tally, target: Target, rate: f64, seconds: f64) -> Summary {
        let count = |f: &dyn Fn(u16) -> bool| -> u64 {
            t.statuses
                .iter()
                .filter(|(s, _)| f(**s))
                .map(|(_, n)| n)
                .sum()
        };
        Summary {
            target,
            rate,
            seconds,
            sent: t.all.len() + t.errors + t.timeouts,
            p50_ms: q_ms(&t.all, 0.5),
            p90_ms: q_ms(&t.all, 0.9),
            p99_ms: q_ms(&t.all, 0.99),
            p999_ms: q_ms(&t.all, 0.999),
            max_ms: q_ms(&t.all, 1.0),
            ok_p99_ms: q_ms(&t.ok, 0.99),
            shed_p99_ms: q_ms(&t.shed, 0.99),
            shed_max_ms: q_ms(&t.shed, 1.0),
            lag_p99_ms: q_ms(&t.lag, 0.99),
            server_p50_ms: q_ms(&t.server, 0.5),
            ok: count(&|s| s == 200),
            s503: count(&|s| s == 503),
            other_5xx: count(&|s| (500..600).contains(&s) && s != 503),
            other: count(&|s| s != 200 && !(500..600).contains(&s)),
            errors: t.errors,
            timeouts: t.timeouts,
            statuses: t.statuses,
            first_error: t.first_error,
        }
    }

    /// Every request answered 200 and p99 within `bound_ms`.
    fn sustainable(&self, bound_ms: f64) -> bool {
        self.ok == self.sent && self.p99_ms.is_some_and(|p| p <= bound_ms)
    }

    fn print(&self) {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{:?} at {:.0} req/s for {:.0} s: {} sent",
            self.target, self.rate, self.seconds, self.sent
        );
        println!(
            "  latency ms from scheduled send: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            f(self.p50_ms),
            f(self.p90_ms),
            f(self.p99_ms),
            f(self.p999_ms),
            f(self.max_ms)
        );
        println!(
            "  200 p99 {} ms; 503 from send p99 {} ms, max {} ms; send lag p99 {} ms; server-reported p50 {} ms",
            f(self.ok_p99_ms),
            f(self.shed_p99_ms),
            f(self.shed_max_ms),
            f(self.lag_p99_ms),
            f(self.server_p50_ms)
        );
        println!(
            "  200: {}  503: {}  other 5xx: {}  other: {}  errors: {}  time-outs: {}",
            self.ok, self.s503, self.other_5xx, self.other, self.errors, self.timeouts
        );
        if let Some(e) = &self.first_error {
            println!("  first error: {e}");
        }
    }
}

/// One probe of the search at `rate`; a failure is retried once so that a
/// passing hiccup (another process taking the CPU) does not end the search.
async fn probe(
    svc: &Arc<Service>,
    w: &Arc<Workload>,
    slots: &Arc<Semaphore>,
    args: &Args,
    rate: f64,
    probes: &mut Vec<Summary>,
) -> bool {
    for attempt in 0..2 {
        if attempt > 0 {
            // Let the backlog of the failed probe drain first.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let t = run_phase(svc, w, slots, rate, args.probe_seconds).await;
        let s = Summary::of(t, args.target, rate, args.probe_seconds);
        let pass = s.sustainable(args.p99_ms);
        eprintln!(
            "probe {rate:.0} req/s: p99 {:?} ms, 200s {}/{} -> {}",
            s.p99_ms,
            s.ok,
            s.sent,
            if pass { "pass" } else { "fail" }
        );
        probes.push(s);
        if pass {
            return true;
        }
    }
    false
}

/// Doubles the rate until a probe fails (twice), then bisects; returns the
/// highest rate that passed (0 if even the first failed) and every probe.
async fn find_sustainable(
    svc: &Arc<Service>,
    w: &Arc<Workload>,
    slots: &Arc<Semaphore>,
    args: &Args,
) -> (f64, Vec<Summary>) {
    let mut probes = Vec::new();
    let (mut good, mut bad): (f64, Option<f64>) = (0.0, None);
    let mut rate = args.rate.min(args.max_rate);
    let mut steps_left = args.steps;
    loop {
        if probe(svc, w, slots, args, rate, &mut probes).await {
            good = rate;
        } else {
            bad = Some(rate);
        }
        // Let a backlog left by a failed probe drain before the next one.
        tokio::time::sleep(Duration::from_secs(1)).await;
        rate = match bad {
            None if rate >= args.max_rate => break,
            None => (rate * 2.0).min(args.max_rate),
            Some(b) => {
                if steps_left == 0 {
                    break;
                }
                steps_left -= 1;
                (good + b) / 2.0
            }
        };
    }
    (good, probes)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if !(args.rate > 0.0 && args.seconds > 0.0 && args.probe_seconds > 0.0) {
        bail!("--rate, --seconds and --probe-seconds must be positive");
    }
    let svc = Arc::new(Service::new(&args));
    let w = Arc::new(prepare(&svc, &args).await?);
    warm_up(&svc, &w, args.warmup).await?;
    let slots = Arc::new(Semaphore::new(args.max_in_flight.max(1)));
    if args.find_sustainable {
        let (rate, probes) = find_sustainable(&svc, &w, &slots, &args).await;
        if args.json {
            let out = serde_json::json!({
                "target": args.target, "p99_bound_ms": args.p99_ms,
                "sustainable_rate": rate, "probes": probes,
            });
            println!("{out}");
        } else {
            println!(
                "sustainable rate for {:?}: {rate:.0} req/s (p99 <= {} ms, only 200s)",
                args.target, args.p99_ms
            );
        }
        return Ok(());
    }
    let t = run_phase(&svc, &w, &slots, args.rate, args.seconds).await;
    let s = Summary::of(t, args.target, args.rate, args.seconds);
    if args.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        s.print();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{http::StatusCode, routing::post, Router};

    /// A stub service on loopback: `/slow` answers 200 after `delay`, `/shed` 503.
    async fn stub(delay: Duration) -> String {
        let app = Router::new()
            .route(
                "/slow",
                post(move || async move {
                    tokio::time::sleep(delay).await;
                    "ok"
                }),
            )
            .route("/shed", post(|| async { StatusCode::SERVICE_UNAVAILABLE }))
            .route("/boom", post(|| async { StatusCode::BAD_GATEWAY }));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        addr
    }

    fn service(addr: &str) -> Arc<Service> {
        let args = Args::parse_from(["loadgen", "--addr", addr, "--timeout-ms", "2000"]);
        Arc::new(Service::new(&args))
    }

    fn workload(path: &str) -> Arc<Workload> {
        Arc::new(Workload {
            path: path.into(),
            headers: vec![],
            body: Bytes::from_static(b"x"),
            expect_len: None,
        })
    }

    /// A closed-loop client with 4 slots against a 200 ms server could send
    /// about 20 requests a second; the open loop sends every scheduled one, on
    /// time, and each waits at least the server's 200 ms.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sends_at_the_scheduled_rate_whatever_the_server_does() {
        let addr = stub(Duration::from_millis(200)).await;
        let slots = Arc::new(Semaphore::new(256));
        let t0 = Instant::now();
        let t = run_phase(&service(&addr), &workload("/slow"), &slots, 100.0, 1.0).await;
        let s = Summary::of(t, Target::Predict, 100.0, 1.0);
        assert_eq!((s.sent, s.ok), (100, 100), "{:?}", s.statuses);
        assert!(s.p50_ms.unwrap() >= 200.0, "p50 {:?}", s.p50_ms);
        // 1 s of sending plus one 200 ms answer, not 100 x 200 ms / 4.
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    }

    /// Too few slots for the rate: the wait for a slot shows in the latency.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_for_a_slot_counts_in_the_latency() {
        let addr = stub(Duration::from_millis(100)).await;
        let slots = Arc::new(Semaphore::new(1));
        let t = run_phase(&service(&addr), &workload("/slow"), &slots, 50.0, 0.2).await;
        let s = Summary::of(t, Target::Predict, 50.0, 0.2);
        assert_eq!(s.ok, 10);
        // The last of 10 requests through one slot waits for the 9 before it.
        assert!(s.max_ms.unwrap() >= 800.0, "max {:?}", s.max_ms);
        assert!(!s.sustainable(50.0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_answers_by_class() {
        let addr = stub(Duration::ZERO).await;
        let (svc, slots) = (service(&addr), Arc::new(Semaphore::new(8)));
        let shed = run_phase(&svc, &workload("/shed"), &slots, 50.0, 0.2).await;
        let s = Summary::of(shed, Target::Spmv, 50.0, 0.2);
        assert_eq!((s.s503, s.ok, s.other_5xx), (10, 0, 0));
        assert!(s.shed_p99_ms.is_some() && !s.sustainable(1e9));
        let boom = run_phase(&svc, &workload("/boom"), &slots, 50.0, 0.2).await;
        let s = Summary::of(boom, Target::Spmv, 50.0, 0.2);
        assert_eq!((s.other_5xx, s.s503), (10, 0));
        let missing = run_phase(&svc, &workload("/nope"), &slots, 50.0, 0.2).await;
        assert_eq!(Summary::of(missing, Target::Spmv, 50.0, 0.2).other, 10);
        let ok = run_phase(&svc, &workload("/slow"), &slots, 50.0, 0.2).await;
        assert!(Summary::of(ok, Target::Spmv, 50.0, 0.2).sustainable(1e3));
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_error_not_an_answer() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let slots = Arc::new(Semaphore::new(8));
        let t = run_phase(&service(&addr), &workload("/slow"), &slots, 50.0, 0.1).await;
        let s = Summary::of(t, Target::Predict, 50.0, 0.1);
        assert_eq!((s.errors, s.ok, s.sent), (5, 0, 5));
        assert!(s.first_error.is_some());
    }
}
