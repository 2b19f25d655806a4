//! A provisioner plugin that misbehaves on demand: it speaks the contract `v1` of
//! docs/plugins.md over HTTPS on `127.0.0.1` (a serving certificate of a CA of its own, for
//! `localhost` and `127.0.0.1`) while it is [`Mode::Healthy`], and hangs, breaks the connection,
//! answers garbage or answers too much in the other modes. The mode can be switched while it
//! runs, and [`RoguePlugin::kill`] makes it gone (its listener closed, its connections cut) until
//! [`RoguePlugin::revive`] listens on the same port again.
//!
//! It is plain threads and blocking sockets, one thread per connection and one HTTP/1.1
//! request per connection (answered with `Connection: close`), so it runs the same whatever
//! runtime its caller has, including one that blocks on a child process.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gantry_api::plugin::{CONTRACT, PATH_PREFIX};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use crate::error::{HarnessError, IoContext};
use crate::pki::Pki;
use crate::process::free_port;

/// The config media type of the images `gantry_tests::e2e::push` makes: the content the rogue
/// plugin accepts (it renders the same whatever the content).
pub const ROGUE_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// The version its identity gives.
pub const ROGUE_VERSION: &str = "0.1.0";

/// The ConfigMap a healthy render gives; its `data.value` is the configuration's `value`
/// (a string), or `default` without one.
pub const ROGUE_CONFIG_MAP: &str = "rogue";

/// How long the connection of a client that sends nothing is kept.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of an endless answer is written at most, should a client read on and on.
const ENDLESS_CAP: u64 = 64 << 20;

/// What the plugin does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every call answered as the contract says: `render` gives the ConfigMap
    /// [`ROGUE_CONFIG_MAP`].
    Healthy,
    /// `render` is read and never answered (until the plugin is killed or dropped);
    /// `identity` and `probe` are answered.
    HangRender,
    /// No call is ever answered, whatever its token.
    HangAll,
    /// `render`: `200`, a `Content-Length` of the whole answer, half of it, then the
    /// connection cut.
    CloseMidAnswer,
    /// `render`: `200` with a body that is not JSON.
    NotJson,
    /// `render`: `200` with JSON that is not a render answer (`objects` is a string).
    WrongShape,
    /// `render`: `200`, a chunked answer that does not end (an object whose value grows), cut
    /// only when the client stops reading.
    Endless,
    /// `render`: a valid answer of this many ConfigMaps (`rogue-0`, `rogue-1`, ...).
    Objects(usize),
    /// `probe` answers `ready: false`, saying why; `render` is as healthy.
    NotReady,
}

/// What the connections share.
struct Shared {
    id: String,
    /// The bearer token to accept; `None`: any, or none.
    token: Option<String>,
    tls: Arc<rustls::ServerConfig>,
    mode: Mutex<Mode>,
    /// Render calls received, in any mode.
    renders: AtomicU64,
    /// Calls being held without an answer now.
    hanging: AtomicU64,
    /// Bumped to end every held call (the plugin killed or dropped).
    released: (Mutex<u64>, Condvar),
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the calling connection until the plugin is killed or dropped.
    fn hang(&self) {
        self.hanging.fetch_add(1, Ordering::SeqCst);
        let (lock, wake) = &self.released;
        let mut generation = lock.lock().unwrap_or_else(|e| e.into_inner());
        let start = *generation;
        while *generation == start {
            generation = wake.wait(generation).unwrap_or_else(|e| e.into_inner());
        }
        drop(generation);
        self.hanging.fetch_sub(1, Ordering::SeqCst);
    }

    fn release(&self) {
        let (lock, wake) = &self.released;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        wake.notify_all();
    }
}

/// The accepting thread of one life of the plugin.
struct Listening {
    stopping: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// A running rogue plugin. Dropping it stops it.
pub struct RoguePlugin {
    address: SocketAddr,
    ca_pem: String,
    shared: Arc<Shared>,
    listening: Option<Listening>,
}

impl RoguePlugin {
    /// Starts a plugin that says it is `id`, in [`Mode::Healthy`], on a free port of
    /// `127.0.0.1`. It answers `401` to a call without `Authorization: Bearer <token>` when
    /// `token` is given, and takes any token (or none) otherwise.
    pub fn start(id: &str, token: Option<&str>) -> Result<Self, HarnessError> {
        crate::init_crypto();
        let pki = Pki::new("rogue-plugin-ca")?;
        let serving = pki.loopback_server()?;
        let tls_error =
            |e: rustls::Error| HarnessError::Other(format!("the rogue plugin's TLS: {e}"));
        let chain = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| HarnessError::Other(format!("the rogue plugin's certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
            .map_err(|e| HarnessError::Other(format!("the rogue plugin's key: {e}")))?;
        let tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(tls_error)?;
        let shared = Arc::new(Shared {
            id: id.to_string(),
            token: token.map(str::to_string),
            tls: Arc::new(tls),
            mode: Mutex::new(Mode::Healthy),
            renders: AtomicU64::new(0),
            hanging: AtomicU64::new(0),
            released: (Mutex::new(0), Condvar::new()),
        });
        let port = free_port()?;
        let mut plugin = Self {
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            ca_pem: pki.ca_pem().to_string(),
            shared,
            listening: None,
        };
        plugin.revive()?;
        Ok(plugin)
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The CA (PEM) that signed its serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// What it does from now on; calls being held stay held.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// Render calls received so far, answered or not.
    pub fn renders(&self) -> u64 {
        self.shared.renders.load(Ordering::SeqCst)
    }

    /// Calls held without an answer now.
    pub fn hanging(&self) -> u64 {
        self.shared.hanging.load(Ordering::SeqCst)
    }

    /// Whether it accepts connections now.
    pub fn is_alive(&self) -> bool {
        self.listening.is_some()
    }

    /// Gone, as a process that died: the listener is closed (a connection is refused) and
    /// every held call's connection is cut.
    pub fn kill(&mut self) {
        if let Some(listening) = self.listening.take() {
            listening.stopping.store(true, Ordering::SeqCst);
            // Wakes the accepting thread, which sees it must stop and closes the listener.
            let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(5));
            let _ = listening.thread.join();
        }
        self.shared.release();
    }

    /// Listens on the same port again (in the mode it was left in).
    pub fn revive(&mut self) -> Result<(), HarnessError> {
        if self.listening.is_some() {
            return Ok(());
        }
        let listener = TcpListener::bind(self.address)
            .context(|| format!("the rogue plugin listening on {}", self.address))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let (shared, stop) = (self.shared.clone(), stopping.clone());
        let thread = std::thread::spawn(move || {
            for tcp in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(tcp) = tcp else { continue };
                let shared = shared.clone();
                // A connection that fails (a client of another CA) ends its own thread.
                std::thread::spawn(move || serve(&shared, tcp));
            }
        });
        self.listening = Some(Listening { stopping, thread });
        Ok(())
    }
}

impl Drop for RoguePlugin {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One request as read off the connection.
struct Request {
    method: String,
    path: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

fn read_request(reader: &mut impl BufRead) -> std::io::Result<Request> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let (mut length, mut authorization) = (0usize, None);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("authorization") {
                authorization = Some(value.trim().to_string());
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Request {
        method,
        path,
        authorization,
        body,
    })
}

/// Serves one connection: one request, answered as the mode says, then the connection closed.
fn serve(shared: &Shared, tcp: TcpStream) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(READ_TIMEOUT))?;
    let connection =
        rustls::ServerConnection::new(shared.tls.clone()).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let request = read_request(&mut BufReader::new(&mut tls))?;
    let call = request.path.strip_prefix(PATH_PREFIX).unwrap_or_default();
    let render = (request.method.as_str(), call) == ("POST", "/render");
    if render {
        shared.renders.fetch_add(1, Ordering::SeqCst);
    }
    let mode = shared.mode();
    if mode == Mode::HangAll || (mode == Mode::HangRender && render) {
        shared.hang();
        return cut(tls);
    }
    if let Some(token) = &shared.token
        && request.authorization.as_deref() != Some(&format!("Bearer {token}"))
    {
        return answer(
            tls,
            "401 Unauthorized",
            &error("the token is not the one served", true),
        );
    }
    match (request.method.as_str(), call) {
        ("GET", "/identity") => answer(
            tls,
            "200 OK",
            &json!({
                "contract": CONTRACT, "id": shared.id, "version": ROGUE_VERSION,
                "mediaTypes": [ROGUE_MEDIA_TYPE],
            })
            .to_string(),
        ),
        ("GET", "/probe") if mode == Mode::NotReady => answer(
            tls,
            "200 OK",
            &json!({ "ready": false, "message": "the rogue plugin was told not to be ready" })
                .to_string(),
        ),
        ("GET", "/probe") => answer(tls, "200 OK", r#"{"ready":true}"#),
        ("POST", "/render") => render_answer(tls, mode, &request.body),
        _ => answer(tls, "404 Not Found", &error("no such call", false)),
    }
}

fn error(message: &str, retryable: bool) -> String {
    json!({ "error": { "message": message, "retryable": retryable } }).to_string()
}

/// A ConfigMap of the answer.
fn config_map(name: &str, value: &str) -> Value {
    json!({
        "object": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name }, "data": { "value": value },
        },
        "source": { "file": "rogue.yaml", "line": 1 },
    })
}

fn render_answer(
    mut tls: rustls::StreamOwned<rustls::ServerConnection, TcpStream>,
    mode: Mode,
    body: &[u8],
) -> std::io::Result<()> {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return answer(tls, "422 Unprocessable Entity", &error("not JSON", false));
    };
    let value = request["config"]["value"].as_str().unwrap_or("default");
    match mode {
        Mode::NotJson => answer(tls, "200 OK", "<html>this is not JSON</html>"),
        Mode::WrongShape => answer(tls, "200 OK", r#"{"objects":"none, and a field too many"}"#),
        Mode::Objects(n) => {
            let objects: Vec<Value> = (0..n)
                .map(|i| config_map(&format!("{ROGUE_CONFIG_MAP}-{i}"), value))
                .collect();
            answer(tls, "200 OK", &json!({ "objects": objects }).to_string())
        }
        Mode::CloseMidAnswer => {
            let whole = json!({ "objects": [config_map(ROGUE_CONFIG_MAP, value)] }).to_string();
            write!(
                tls,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                whole.len(),
                &whole[..whole.len() / 2]
            )?;
            tls.flush()?;
            cut(tls)
        }
        Mode::Endless => {
            write!(
                tls,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )?;
            let start = format!(
                r#"{{"objects":[{{"object":{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{ROGUE_CONFIG_MAP}"}},"data":{{"value":""#
            );
            write!(tls, "{:x}\r\n{start}\r\n", start.len())?;
            let chunk = "x".repeat(16 << 10);
            let mut written = 0u64;
            // Until the client stops reading (the write fails), or the cap.
            while written < ENDLESS_CAP {
                write!(tls, "{:x}\r\n{chunk}\r\n", chunk.len())?;
                written += chunk.len() as u64;
            }
            write!(tls, "0\r\n\r\n")?;
            tls.flush()?;
            cut(tls)
        }
        Mode::Healthy | Mode::NotReady | Mode::HangRender | Mode::HangAll => answer(
            tls,
            "200 OK",
            &json!({ "objects": [config_map(ROGUE_CONFIG_MAP, value)] }).to_string(),
        ),
    }
}

fn answer(
    mut tls: rustls::StreamOwned<rustls::ServerConnection, TcpStream>,
    status: &str,
    body: &str,
) -> std::io::Result<()> {
    write!(
        tls,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    tls.conn.send_close_notify();
    tls.flush()
}

/// Cuts the connection as a process that died does: no TLS close, no answer.
fn cut(tls: rustls::StreamOwned<rustls::ServerConnection, TcpStream>) -> std::io::Result<()> {
    tls.sock.shutdown(Shutdown::Both)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client of the plugin, trusting its CA alone.
    fn client(plugin: &RoguePlugin) -> reqwest::Client {
        crate::init_crypto();
        reqwest::Client::builder()
            .tls_certs_only(
                reqwest::Certificate::from_pem_bundle(plugin.ca_pem().as_bytes()).unwrap(),
            )
            .https_only(true)
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    }

    async fn render(
        client: &reqwest::Client,
        plugin: &RoguePlugin,
    ) -> Result<(u16, String), reqwest::Error> {
        let response = client
            .post(format!("{}{PATH_PREFIX}/render", plugin.url()))
            .bearer_auth("t")
            .body(r#"{"config":{"value":"v"}}"#)
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    #[tokio::test]
    async fn each_mode_misbehaves_as_it_says_and_a_killed_plugin_is_gone_until_revived() {
        let mut plugin = RoguePlugin::start("example.dev/rogue", Some("t")).unwrap();
        let client = client(&plugin);
        let identity = client
            .get(format!("{}{PATH_PREFIX}/identity", plugin.url()))
            .bearer_auth("t")
            .send()
            .await
            .unwrap();
        assert_eq!(identity.status().as_u16(), 200);
        let identity: gantry_api::plugin::Identity = identity.json().await.unwrap();
        assert_eq!(identity.id, "example.dev/rogue");
        let unauthorized = client
            .get(format!("{}{PATH_PREFIX}/probe", plugin.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(unauthorized.status().as_u16(), 401);

        let (status, body) = render(&client, &plugin).await.unwrap();
        assert_eq!(status, 200);
        let answer: gantry_api::plugin::RenderResponse = serde_json::from_str(&body).unwrap();
        assert_eq!(answer.objects[0].object["data"]["value"], "v");

        plugin.set_mode(Mode::NotJson);
        let (_, body) = render(&client, &plugin).await.unwrap();
        assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");
        plugin.set_mode(Mode::WrongShape);
        let (_, body) = render(&client, &plugin).await.unwrap();
        assert!(serde_json::from_str::<gantry_api::plugin::RenderResponse>(&body).is_err());
        plugin.set_mode(Mode::Objects(3));
        let (_, body) = render(&client, &plugin).await.unwrap();
        let answer: gantry_api::plugin::RenderResponse = serde_json::from_str(&body).unwrap();
        assert_eq!(answer.objects.len(), 3);
        plugin.set_mode(Mode::CloseMidAnswer);
        assert!(render(&client, &plugin).await.is_err(), "cut mid-answer");
        plugin.set_mode(Mode::Endless);
        let endless = client
            .post(format!("{}{PATH_PREFIX}/render", plugin.url()))
            .bearer_auth("t")
            .body("{}")
            .send()
            .await
            .unwrap();
        let mut endless = endless.bytes_stream();
        let mut read = 0;
        while read < 1 << 20 {
            read += futures::StreamExt::next(&mut endless)
                .await
                .unwrap()
                .unwrap()
                .len();
        }
        drop(endless);

        plugin.set_mode(Mode::HangRender);
        let error = render(&client, &plugin).await.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert_eq!(plugin.hanging(), 1);
        assert_eq!(plugin.renders(), 7);

        plugin.kill();
        assert!(!plugin.is_alive());
        crate::wait_until("the held call let go", Duration::from_secs(10), || async {
            (plugin.hanging() == 0).then_some(())
        })
        .await;
        let error = render(&client, &plugin).await.unwrap_err();
        assert!(error.is_connect(), "{error}");
        plugin.set_mode(Mode::Healthy);
        plugin.revive().unwrap();
        assert_eq!(render(&client, &plugin).await.unwrap().0, 200);
    }
}
