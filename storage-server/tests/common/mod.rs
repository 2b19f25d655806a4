//! Helpers shared by the integration tests: the real `gantry-storage` binary as
//! a child process, and an HTTP client that sends paths exactly as written.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const START_TIMEOUT: Duration = Duration::from_secs(30);

pub type Body = BoxBody<Bytes, std::io::Error>;

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Deterministic, incompressible-looking test content.
pub fn content(len: usize, seed: u8) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(seed);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

pub fn tarball_path(bundle: &str, data: &[u8]) -> String {
    format!("/bundles/{bundle}/{}.tar.gz", sha256_hex(data))
}

/// A running `gantry-storage` process; killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub root: PathBuf,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts the server without authentication on a free loopback port.
    pub fn start(root: &Path, extra: &[&str]) -> Self {
        let mut args = vec!["--insecure-no-auth"];
        args.extend_from_slice(extra);
        Self::start_with(root, &args)
    }

    /// Starts the server with exactly `args` besides `--root` and `--listen`.
    pub fn start_with(root: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gantry-storage"))
            .arg("--root")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting gantry-storage");
        let stderr = child.stderr.take().expect("stderr is piped");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let logs = logs.clone();
            // Keeps draining stderr for the life of the process so it never blocks on a full pipe.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        let _ = tx.send(addr.to_owned());
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let addr = match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => addr.parse().expect("a socket address after 'listening on'"),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "gantry-storage did not log 'listening on' ({status:?}); logs:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        Self {
            child,
            addr,
            root: root.to_owned(),
            logs,
        }
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Waits until the server's log holds `text`: its standard error is read by another
    /// thread, so a line written before an answer may arrive after it.
    pub async fn wait_log(&self, text: &str) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.logs().contains(text) {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9` and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Polls `/readyz` until it answers 200.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(r) = try_send(self.addr, Method::GET, "/readyz", &[], empty()).await
                && r.status == StatusCode::OK
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "gantry-storage at {} not ready after {START_TIMEOUT:?}; logs:\n{}",
                self.addr,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        send(self.addr, Method::GET, path, &[], empty()).await
    }

    pub async fn put(&self, path: &str, data: &[u8]) -> Resp {
        send(self.addr, Method::PUT, path, &[], full(data)).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        send(self.addr, Method::DELETE, path, &[], empty()).await
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> Resp {
        send(self.addr, method, path, headers, body).await
    }

    /// The value of a metric line, e.g. `gantry_storage_stored_tarballs`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.get("/metrics").await.text();
        text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.text()))
    }
}

pub fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|e| match e {}).boxed()
}

pub fn full(data: &[u8]) -> Body {
    Full::new(Bytes::copy_from_slice(data))
        .map_err(|e| match e {})
        .boxed()
}

/// A body fed through a channel, sent chunked (no Content-Length).
pub fn channel_body() -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(Frame::data(chunk)), rx))
    });
    (tx, BodyExt::boxed(StreamBody::new(stream)))
}

fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub async fn try_send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Result<Resp, String> {
    // http::Uri keeps the path as written: no dot-segment removal, no decoding.
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(body).map_err(|e| e.to_string())?;
    let resp = client().request(req).await.map_err(|e| format!("{e:?}"))?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Resp {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

pub async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Resp {
    let what = format!("{method} {path}");
    try_send(addr, method, path, headers, body)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Sends raw bytes as a request and returns the status code of the answer
/// (for request lines no HTTP client would produce).
pub async fn raw_status(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connecting");
    stream.write_all(request).await.expect("writing request");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.expect("reading response");
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok());
    status.unwrap_or_else(|| panic!("no HTTP status in answer {text:?}"))
}

/// Every file and directory under `dir` (relative paths, sorted), not following symlinks.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            out.push(
                path.strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(base, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
