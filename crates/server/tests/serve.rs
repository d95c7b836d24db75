//! The service on a real socket: slow clients are cut off by the header
//! deadline and do not keep a normal client waiting, a trickled body gets a
//! JSON 408, a request past its deadline a JSON 503, the connection cap holds,
//! and a graceful shutdown answers the request in flight before returning.

use crate::common;

use common::*;
use server::serve::{serve, ServeOptions, ServeReport};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// Serves a test app built with `flags` on an ephemeral port.
async fn start(
    flags: &[&str],
    opts: ServeOptions,
) -> (
    SocketAddr,
    server::AppState,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<ServeReport>,
) {
    let (app, state) = test_app(flags).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app, opts, async {
        let _ = stopped.await;
    }));
    (addr, state, stop, task)
}

fn opts(header_s: u64, max_connections: usize) -> ServeOptions {
    ServeOptions {
        header_timeout: Duration::from_secs(header_s),
        max_connections,
        shutdown_grace: Duration::from_secs(10),
    }
}

/// One raw HTTP/1.1 exchange; returns the status line and the body text.
async fn exchange(addr: SocketAddr, raw: &[u8]) -> (String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    read_answer(&mut s).await
}

async fn read_answer(s: &mut TcpStream) -> (String, String) {
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_are_cut_off_and_do_not_delay_others() {
    let (addr, _state, stop, task) = start(&["--no-device"], opts(1, 1024)).await;
    // 300 clients that send half a request line and then nothing.
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    let t0 = Instant::now();
    let (status, body) = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let waited = t0.elapsed();
    assert!(status.contains("200"), "{status} {body}");
    assert!(
        waited < Duration::from_secs(1),
        "a normal client waited {waited:?} behind 300 slow ones"
    );
    // After the header deadline every slow connection has been closed by the server.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (i, s) in slow.iter_mut().enumerate() {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!("slow client {i} still held open after the header deadline")
            });
        // Closed: EOF, a reset, or a 408 answer followed by EOF.
        if let Ok(n) = n {
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
        }
    }
    stop.send(()).unwrap();
    assert!(task.await.unwrap().drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_gets_a_json_408() {
    let (addr, _state, stop, task) =
        start(&["--no-device", "--body-timeout-s", "1"], opts(5, 64)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n%%MatrixMarket",
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let (status, body) = read_answer(&mut s).await;
    assert!(status.contains("408"), "{status} {body}");
    assert!(body.contains("\"body_timeout\""), "{body}");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_and_frees_up() {
    let (addr, _state, stop, task) = start(&["--no-device"], opts(2, 2)).await;
    // Two idle connections take both slots.
    let a = TcpStream::connect(addr).await.unwrap();
    let b = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A third client is not served while both are open ...
    let third = tokio::spawn(exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!third.is_finished(), "served past the connection cap");
    // ... and is served once one closes.
    drop(a);
    let (status, _) = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("served once a slot freed")
        .unwrap();
    assert!(status.contains("200"), "{status}");
    drop(b);
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_the_request_in_flight_then_returns_drained() {
    let (addr, _state, stop, task) = start(&["--no-device"], opts(5, 64)).await;
    let a = random_matrix(300, 300, 5);
    let text = mm_text(&a);
    let head = format!(
        "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    );
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&text.as_bytes()[..100]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Shutdown starts while the body is still coming.
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // New clients are refused ...
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown began"
    );
    // ... while the one in flight finishes and is answered.
    s.write_all(&text.as_bytes()[100..]).await.unwrap();
    let (status, body) = read_answer(&mut s).await;
    assert!(status.contains("200"), "{status} {body}");
    assert!(body.contains("\"plan\""), "{body}");
    let report = task.await.unwrap();
    assert!(report.drained);
    assert_eq!(report.connections, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_deadline_is_a_json_503_and_its_device_job_is_dropped() {
    if !have_device("request_past_its_deadline") {
        return;
    }
    let (addr, state, stop, task) = start(&["--request-timeout-s", "1"], opts(5, 64)).await;
    // Occupy the device worker for 3 s.
    let q = state.clone();
    let busy = tokio::spawn(async move {
        q.queue()
            .run(|_| std::thread::sleep(Duration::from_secs(3)))
            .await
    });
    while state.queue().in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    let body = r#"{"nrows":1,"ncols":1,"row_ptr":[0,1],"col_idx":[0],"values":[2],"x":[1]}"#;
    let raw = format!(
        "POST /spmv HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let t0 = Instant::now();
    let (status, answer) = exchange(addr, raw.as_bytes()).await;
    assert!(status.contains("503"), "{status} {answer}");
    assert!(answer.contains("\"device_deadline\""), "{answer}");
    assert!(answer.contains("dropped without running"), "{answer}");
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t0.elapsed()
    );
    busy.await.unwrap().unwrap();
    // The abandoned job is dropped by the worker without running (a job that
    // ran would have to finish first); the queue empties and the next call works.
    let stuck = "the abandoned job still holds its slot";
    queue_empties(&state, Duration::from_secs(2), stuck).await;
    let (status, answer) = exchange(addr, raw.as_bytes()).await;
    assert!(status.contains("200"), "{status} {answer}");
    stop.send(()).unwrap();
    task.await.unwrap();
}
