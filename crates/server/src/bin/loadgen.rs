//! `loadgen`: the figures benchmark for the service, a bounded load generator
//! run against a server on loopback (start one with
//! `cargo run --release -p server -- --bind 127.0.0.1:8080`).
//!
//! It prints:
//! - `/predict` requests per second and p50/p99 latency for a ~10K-nonzero matrix,
//!   with a fixed number of client connections (the bound on the load);
//! - `/spmv` on an uploaded ~1M-nonzero matrix: client end-to-end time, server
//!   time, device end-to-end time (x upload, kernels, y download) and device
//!   kernel time, with their ratios;
//! - the first call (upload + analysis: parse, features, plan, device upload,
//!   preparation) in SpMV-equivalents (divided by the median kernel time and by
//!   the median end-to-end time of a repeated call).
//!
//! A deliberately small HTTP/1.1 client over `std::net` (keep-alive, Content-Length
//! bodies) keeps the measurement free of client-library overhead.

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Bounded load generator for the SpMV service (figures benchmark)")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// Client connections for the /predict phase (each sends one request at a time).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Seconds of /predict load.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Rows of the /predict matrix (10 nonzeros per row).
    #[arg(long, default_value_t = 1_000)]
    predict_rows: usize,
    /// Rows of the /spmv matrix (10 nonzeros per row).
    #[arg(long, default_value_t = 100_000)]
    spmv_rows: usize,
    /// Repeated /spmv calls on the uploaded matrix.
    #[arg(long, default_value_t = 50)]
    calls: usize,
    /// Precision of the /spmv phase.
    #[arg(long, default_value = "f32")]
    precision: String,
}

/// One keep-alive connection.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
}

/// A response: status, headers (lower-case names), body.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).context("response is not JSON")
    }
}

impl Conn {
    fn open(addr: &str) -> Result<Conn> {
        let s = TcpStream::connect(addr)
            .with_context(|| format!("connecting to {addr} (is the server running?)"))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            host: addr.to_string(),
        })
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Resp> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body)?;
        self.writer.flush()?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let mut headers = Vec::new();
        let mut len = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let t = line.trim_end();
            if t.is_empty() {
                break;
            }
            if let Some((k, v)) = t.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
                if k == "content-length" {
                    len = v.parse()?;
                }
                if k == "transfer-encoding" {
                    bail!("chunked responses are not supported by this small client");
                }
                headers.push((k, v));
            }
        }
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body)?;
        Ok(Resp {
            status,
            headers,
            body,
        })
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(v, 0.5)
}

fn mm_text(a: &sparse::Csr<f64>) -> Vec<u8> {
    let mut out = Vec::new();
    sparse::mm::write(a, &mut out).expect("writing to memory");
    out
}

fn predict_phase(args: &Args) -> Result<()> {
    let a = sparse::gen::uniform_random(args.predict_rows, args.predict_rows, 10, 1)?;
    let body = mm_text(&a);
    println!(
        "== /predict: {}x{} matrix, {} nonzeros, {} KiB of Matrix Market; {} connections for {:.0} s",
        a.nrows(),
        a.ncols(),
        a.nnz(),
        body.len() / 1024,
        args.connections,
        args.seconds
    );
    // Warm-up (first-touch allocations, connection set-up).
    let mut c = Conn::open(&args.addr)?;
    for _ in 0..5 {
        let r = c.request("POST", "/predict", &[("Content-Type", "text/plain")], &body)?;
        if r.status != 200 {
            bail!(
                "/predict answered {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let t0 = Instant::now();
    let results: Vec<Result<(Vec<f64>, Vec<f64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.connections)
            .map(|_| {
                let body = &body;
                s.spawn(move || -> Result<(Vec<f64>, Vec<f64>)> {
                    let mut c = Conn::open(&args.addr)?;
                    let (mut lat, mut server) = (Vec::new(), Vec::new());
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let r =
                            c.request("POST", "/predict", &[("Content-Type", "text/plain")], body)?;
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                        if r.status != 200 {
                            bail!("/predict answered {}", r.status);
                        }
                        server.push(
                            r.json()?["timings_ms"]["total"]
                                .as_f64()
                                .unwrap_or(f64::NAN),
                        );
                    }
                    Ok((lat, server))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let (mut lat, mut server) = (Vec::new(), Vec::new());
    for r in results {
        let (l, s) = r?;
        lat.extend(l);
        server.extend(s);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let n = lat.len();
    println!(
        "requests: {n} in {wall:.2} s = {:.0} req/s",
        n as f64 / wall
    );
    println!(
        "client latency ms: p50 {:.3}  p99 {:.3}  max {:.3}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "server time ms (parse + features + hash + predict): median {:.3}",
        median(&mut server)
    );
    Ok(())
}

fn spmv_phase(args: &Args) -> Result<()> {
    let p = args.precision.as_str();
    let a = sparse::gen::uniform_random(args.spmv_rows, args.spmv_rows, 10, 2)?;
    let body = mm_text(&a);
    println!(
        "\n== /spmv: {}x{} matrix, {} nonzeros, {} MiB of Matrix Market, precision {p}",
        a.nrows(),
        a.ncols(),
        a.nnz(),
        body.len() >> 20
    );
    let mut c = Conn::open(&args.addr)?;
    // Make sure it is not already cached from an earlier run.
    let id = a.content_hash();
    c.request("DELETE", &format!("/matrices/{id}"), &[], &[])?;

    let t = Instant::now();
    let r = c.request(
        "POST",
        &format!("/matrices?precision={p}"),
        &[("Content-Type", "text/plain")],
        &body,
    )?;
    let upload_client_ms = t.elapsed().as_secs_f64() * 1e3;
    if r.status != 201 {
        bail!(
            "/matrices answered {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    let up = r.json()?;
    let tm = &up["timings_ms"];
    println!(
        "upload: client {upload_client_ms:.1} ms; server: parse {:.1}, features {:.1}, hash {:.1}, plan+upload+prepare {:.1}, total {:.1} ms",
        tm["parse"].as_f64().unwrap_or(f64::NAN),
        tm["features"].as_f64().unwrap_or(f64::NAN),
        tm["hash"].as_f64().unwrap_or(f64::NAN),
        tm["setup"].as_f64().unwrap_or(f64::NAN),
        tm["total"].as_f64().unwrap_or(f64::NAN),
    );
    println!(
        "plan: scheme {} with {} bins, model {}",
        up["plan"]["scheme"],
        up["plan"]["bins"].as_array().map_or(0, |b| b.len()),
        up["model"]["id"]
    );

    let x: Vec<u8> = (0..a.ncols())
        .flat_map(|i| {
            let v = ((i % 17) as f64 - 8.0) / 8.0;
            if p == "f32" {
                (v as f32).to_le_bytes().to_vec()
            } else {
                v.to_le_bytes().to_vec()
            }
        })
        .collect();
    let path = format!("/spmv?matrix_id={id}&precision={p}");
    let hdrs = [
        ("Content-Type", "application/octet-stream"),
        ("Accept", "application/octet-stream"),
    ];
    let num = |r: &Resp, h: &str| {
        r.header(h)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let (mut client, mut server, mut device, mut kernel) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut first = None;
    for i in 0..args.calls + 1 {
        let t = Instant::now();
        let r = c.request("POST", &path, &hdrs, &x)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if r.status != 200 {
            bail!(
                "/spmv answered {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
        if i == 0 {
            first = Some((ms, num(&r, "x-kernel-ms")));
            continue;
        }
        client.push(ms);
        server.push(num(&r, "x-server-ms"));
        device.push(num(&r, "x-device-ms"));
        kernel.push(num(&r, "x-kernel-ms"));
    }
    let (c50, s50, d50, k50) = (
        median(&mut client),
        median(&mut server),
        median(&mut device),
        median(&mut kernel),
    );
    let min_bytes = engine::min_bytes(
        a.nrows(),
        a.ncols(),
        a.nnz(),
        if p == "f32" { 4 } else { 8 },
    );
    println!(
        "repeated calls by id (binary x and y), median of {}:",
        args.calls
    );
    println!(
        "  kernel {k50:.3} ms ({:.1} GB/s of the minimum traffic)",
        min_bytes as f64 / (k50 * 1e6)
    );
    println!("  device end-to-end {d50:.3} ms = {:.2}x kernel", d50 / k50);
    println!("  server {s50:.3} ms = {:.2}x kernel", s50 / k50);
    println!(
        "  client end-to-end {c50:.3} ms = {:.2}x kernel (p99 {:.3} ms)",
        c50 / k50,
        percentile(&client, 0.99)
    );
    if let Some((ms, k)) = first {
        println!("  first call after upload {ms:.3} ms (kernel {k:.3} ms)");
    }
    let setup = tm["setup"].as_f64().unwrap_or(f64::NAN);
    let total = tm["total"].as_f64().unwrap_or(f64::NAN);
    println!("first call cost in SpMV-equivalents:");
    println!(
        "  plan+upload+prepare {setup:.1} ms = {:.0} kernel times = {:.1} client SpMVs",
        setup / k50,
        setup / c50
    );
    println!(
        "  whole upload request (parse included) {total:.1} ms = {:.0} kernel times = {:.1} client SpMVs",
        total / k50,
        total / c50
    );
    if let Some((first_ms, _)) = first {
        println!(
            "  upload request + first call (first launches include the device's kernel compilation) {:.1} ms = {:.0} kernel times = {:.1} client SpMVs",
            upload_client_ms + first_ms,
            (upload_client_ms + first_ms) / k50,
            (upload_client_ms + first_ms) / c50
        );
    }

    // The same matrix inline, for comparison: everything on every call.
    let json = serde_json::json!({
        "matrix": String::from_utf8_lossy(&body),
        "x": (0..a.ncols()).map(|i| ((i % 17) as f64 - 8.0) / 8.0).collect::<Vec<_>>(),
        "precision": p,
    });
    c.request("DELETE", &format!("/matrices/{id}"), &[], &[])?;
    let jb = serde_json::to_vec(&json)?;
    let t = Instant::now();
    let r = c.request(
        "POST",
        "/spmv",
        &[("Content-Type", "application/json")],
        &jb,
    )?;
    let inline_ms = t.elapsed().as_secs_f64() * 1e3;
    if r.status != 200 {
        bail!("inline /spmv answered {}", r.status);
    }
    println!("inline /spmv (JSON, parse + plan + upload + run every time): {inline_ms:.1} ms = {:.1} by-id calls", inline_ms / c50);
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut c = Conn::open(&args.addr)?;
    let d = c.request("GET", "/device", &[], &[])?.json()?;
    println!(
        "device: {} ({}), copy bandwidth {:.1} GB/s",
        d["name"].as_str().unwrap_or("none"),
        d["kind"].as_str().unwrap_or("-"),
        d["copy_bandwidth"]["gbps"].as_f64().unwrap_or(f64::NAN)
    );
    predict_phase(&args)?;
    spmv_phase(&args)?;
    Ok(())
}
