//! The release server binary as a child process: started on a free loopback
//! port, stopped with SIGTERM when the test ends, the address it prints once
//! it listens, and plain HTTP/1.1 requests to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A started server, stopped (SIGTERM, so that it drains and flushes its
/// request log) when the test ends, also on failure.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

/// SIGTERM, then wait (nothing when the process has already exited).
pub fn stop(child: &mut Child) {
    if child.try_wait().ok().flatten().is_none() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
}

/// Reads the server's stdout until it prints `listening on http://ADDR` and
/// gives ADDR; what it prints later is drained on a thread, so that the server
/// never writes to a closed pipe.
pub fn listening(out: ChildStdout) -> SocketAddr {
    let mut lines = BufReader::new(out).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server exited before listening")
            .unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    addr
}

/// Starts the release server on a free loopback port with `database_url` and
/// the extra environment `env`; its stdout is piped, for [`listening`].
pub fn spawn(database_url: &str, env: &[(&str, String)]) -> (Server, ChildStdout) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .env("DATABASE_URL", database_url)
        .env_remove("SPMV_NO_DATABASE")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the server");
    let out = child.stdout.take().unwrap();
    (Server(child), out)
}

/// One HTTP/1.1 request on a new connection; `headers` are extra header
/// lines, each ending in CRLF. Gives the status and the body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    headers: &str,
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}
