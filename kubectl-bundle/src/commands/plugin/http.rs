//! Calling a plugin: HTTPS verified against the given roots only (rustls, no system roots, no
//! proxy), each call bounded in time and in the size of its answer, and all of them by the
//! suite's deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gantry_api::plugin::PATH_PREFIX;
use reqwest::StatusCode;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use gantry_rules::duration::GoDuration;

use crate::commands::output::causes;

/// How long one call may take by default, its answer read to the end (`--call-timeout`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the whole suite may take by default (`--timeout`).
pub const SUITE_TIMEOUT: Duration = Duration::from_secs(300);

/// How long calls may take: each at most `call`, and none after the suite's deadline.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub call: Duration,
    /// The suite's whole time (`--timeout`), for messages.
    pub suite: Duration,
    /// When the suite must be over.
    pub deadline: Instant,
}

/// How long one call may take, as [`Timeouts::budget`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Its own timeout, whole.
    Call(Duration),
    /// What is left before the suite's deadline, less than its own timeout.
    Suite(Duration),
    /// Nothing: the deadline passed, the call is not made.
    Spent,
}

impl Timeouts {
    /// `call` for each call, `suite` for all of them from now.
    pub fn starting_now(call: Duration, suite: Duration) -> Self {
        Self {
            call,
            suite,
            deadline: Instant::now() + suite,
        }
    }

    /// How long a call starting `now` may take.
    pub fn budget(&self, now: Instant) -> Budget {
        match self.deadline.checked_duration_since(now) {
            None => Budget::Spent,
            Some(left) if left.is_zero() => Budget::Spent,
            Some(left) if left < self.call => Budget::Suite(left),
            Some(_) => Budget::Call(self.call),
        }
    }

    /// Why a call was not made, or not answered in time.
    fn deadline_passed(&self) -> String {
        format!(
            "the check's deadline (--timeout {}) passed",
            GoDuration(self.suite)
        )
    }
}

/// The largest answer read; a larger one fails the call.
const MAX_ANSWER_BYTES: usize = 256 << 20;

/// The contract's three calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Identity,
    Probe,
    Render,
}

impl Call {
    pub const ALL: [Call; 3] = [Call::Identity, Call::Probe, Call::Render];

    pub fn name(self) -> &'static str {
        match self {
            Call::Identity => "identity",
            Call::Probe => "probe",
            Call::Render => "render",
        }
    }

    fn method(self) -> reqwest::Method {
        match self {
            Call::Identity | Call::Probe => reqwest::Method::GET,
            Call::Render => reqwest::Method::POST,
        }
    }
}

/// A plugin's answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The start of the body, for messages.
    pub fn excerpt(&self) -> String {
        excerpt(&self.body)
    }
}

/// At most 200 characters of `body`, on one line.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &one_line[..end]),
        None => one_line,
    }
}

/// The certificates of a PEM file.
pub fn read_roots(path: &std::path::Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let roots = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading the PEM certificates of {}", path.display()))?;
    if roots.is_empty() {
        bail!("{} holds no PEM certificate", path.display());
    }
    Ok(roots)
}

/// A plugin at one URL, reached through a client that trusts `roots` and nothing else.
pub struct Plugin {
    http: reqwest::Client,
    base: String,
    timeouts: Timeouts,
}

impl Plugin {
    /// `base`: `https://HOST:PORT` (and a path prefix, if any), without a trailing `/`.
    pub fn new(
        base: &str,
        roots: Vec<CertificateDer<'static>>,
        timeouts: Timeouts,
    ) -> anyhow::Result<Self> {
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store
                .add(root)
                .context("adding a CA certificate to the trusted roots")?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .context("choosing the TLS versions")?
        .with_root_certificates(store)
        .with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .https_only(true)
            .no_proxy()
            .connect_timeout(timeouts.call)
            .build()
            .context("building the HTTPS client")?;
        Ok(Self {
            http,
            base: base.to_string(),
            timeouts,
        })
    }

    /// Starts the suite's deadline again from now: the time before (reading files, making
    /// tokens) is not the plugin's.
    pub fn start_deadline(&mut self) {
        self.timeouts = Timeouts::starting_now(self.timeouts.call, self.timeouts.suite);
    }

    /// The timeouts its calls have.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// `METHOD /gantry.dev/v1/CALL`, for messages.
    pub fn describe(call: Call) -> String {
        format!("{} {PATH_PREFIX}/{}", call.method(), call.name())
    }

    /// Makes `call` with `token` (none: no `Authorization` header) and `body` (a JSON
    /// document, for `render`), within its timeout and the suite's deadline; not at all
    /// once the deadline passed.
    pub async fn call(
        &self,
        call: Call,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> anyhow::Result<Answer> {
        let url = format!("{}{PATH_PREFIX}/{}", self.base, call.name());
        let what = Self::describe(call);
        let budget = self.timeouts.budget(Instant::now());
        let (limit, late) = match budget {
            Budget::Spent => bail!("{what}: not called: {}", self.timeouts.deadline_passed()),
            Budget::Call(limit) => (limit, format!("no answer within {}", GoDuration(limit))),
            Budget::Suite(limit) => (
                limit,
                format!("no answer before {}", self.timeouts.deadline_passed()),
            ),
        };
        let base = &self.base;
        let mut request = self.http.request(call.method(), &url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_vec());
        }
        let exchange =
            async {
                let mut response = request.send().await.map_err(|e| {
                    if e.is_connect() {
                        // The innermost cause says why (refused, a certificate, a name), the
                        // layers above it repeat the URL.
                        let why = std::iter::successors(
                            Some(&e as &(dyn std::error::Error + 'static)),
                            |e| e.source(),
                        )
                        .last()
                        .map(ToString::to_string)
                        .unwrap_or_default();
                        anyhow::anyhow!("{what}: cannot connect to {base}: {why}")
                    } else {
                        anyhow::anyhow!("{what}: {}", causes(&e.into()))
                    }
                })?;
                let status = response.status();
                let content_type = response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let mut body = Vec::new();
                while let Some(chunk) = response.chunk().await.map_err(|e| {
                    anyhow::anyhow!("{what}: reading the answer: {}", causes(&e.into()))
                })? {
                    if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                        bail!("{what}: the answer is larger than {MAX_ANSWER_BYTES} bytes");
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(Answer {
                    status,
                    content_type,
                    body,
                })
            };
        tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("{what}: {late}")))
    }
}

/// A CA made for this check alone, that cannot have signed the plugin's certificate.
pub fn unrelated_ca() -> anyhow::Result<CertificateDer<'static>> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let mut params = CertificateParams::new(Vec::new()).context("an unrelated CA")?;
    params.distinguished_name.push(
        DnType::CommonName,
        "kubectl bundle plugin check: an unrelated CA",
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().context("generating the unrelated CA's key")?;
    let cert = params
        .self_signed(&key)
        .context("signing the unrelated CA")?;
    Ok(cert.der().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(excerpt(b"{\n  \"a\": 1\n}"), "{ \"a\": 1 }");
        let long = "x".repeat(500);
        assert_eq!(excerpt(long.as_bytes()).len(), 203);
        assert_eq!(excerpt("é".repeat(300).as_bytes()).chars().count(), 203);
    }

    #[test]
    fn a_pem_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let error = read_roots(&path).unwrap_err();
        assert!(
            causes(&error).contains("holds no PEM certificate"),
            "{error:#}"
        );
        let ca = rcgen::CertificateParams::new(Vec::new())
            .unwrap()
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap();
        std::fs::write(&path, ca.pem()).unwrap();
        assert_eq!(read_roots(&path).unwrap(), [ca.der().clone()]);
    }

    #[test]
    fn a_call_gets_its_timeout_or_what_is_left_of_the_suite() {
        let start = Instant::now();
        let timeouts = Timeouts {
            call: Duration::from_secs(30),
            suite: Duration::from_secs(60),
            deadline: start + Duration::from_secs(60),
        };
        assert_eq!(
            timeouts.budget(start),
            Budget::Call(Duration::from_secs(30))
        );
        assert_eq!(
            timeouts.budget(start + Duration::from_secs(45)),
            Budget::Suite(Duration::from_secs(15))
        );
        assert_eq!(
            timeouts.budget(start + Duration::from_secs(60)),
            Budget::Spent
        );
        assert_eq!(
            timeouts.budget(start + Duration::from_secs(61)),
            Budget::Spent
        );
        assert_eq!(
            timeouts.deadline_passed(),
            "the check's deadline (--timeout 1m) passed"
        );
    }

    fn roots_of(pem: &str) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    #[tokio::test]
    async fn a_plugin_that_never_answers_fails_each_call_at_its_deadline() {
        use gantry_tests::rogue_plugin::{Mode, RoguePlugin};
        let plugin = RoguePlugin::start("example.dev/hanging", None).unwrap();
        plugin.set_mode(Mode::HangAll);
        let roots = roots_of(plugin.ca_pem());

        // The call's own timeout.
        let timeouts = Timeouts::starting_now(Duration::from_millis(300), Duration::from_secs(60));
        let client = Plugin::new(&plugin.url(), roots.clone(), timeouts).unwrap();
        let started = Instant::now();
        let error = client.call(Call::Identity, None, None).await.unwrap_err();
        assert_eq!(
            causes(&error),
            "GET /gantry.dev/v1/identity: no answer within 300ms"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        // What is left of the suite, when that is less.
        let timeouts = Timeouts::starting_now(Duration::from_secs(30), Duration::from_millis(300));
        let client = Plugin::new(&plugin.url(), roots.clone(), timeouts).unwrap();
        let started = Instant::now();
        let error = client.call(Call::Probe, None, None).await.unwrap_err();
        assert_eq!(
            causes(&error),
            "GET /gantry.dev/v1/probe: no answer before the check's deadline (--timeout 300ms) passed"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        // Once the deadline passed, no call is made at all.
        let timeouts = Timeouts {
            call: Duration::from_secs(30),
            suite: Duration::from_secs(1),
            deadline: Instant::now(),
        };
        let client = Plugin::new(&plugin.url(), roots, timeouts).unwrap();
        let error = client
            .call(Call::Render, None, Some(b"{}"))
            .await
            .unwrap_err();
        assert_eq!(
            causes(&error),
            "POST /gantry.dev/v1/render: not called: the check's deadline (--timeout 1s) passed"
        );
        assert_eq!(plugin.renders(), 0);
    }

    #[tokio::test]
    async fn an_address_nothing_listens_on_is_named() {
        let port = gantry_tests::free_port().unwrap();
        let url = format!("https://127.0.0.1:{port}");
        let timeouts = Timeouts::starting_now(CALL_TIMEOUT, SUITE_TIMEOUT);
        let client = Plugin::new(&url, vec![unrelated_ca().unwrap()], timeouts).unwrap();
        let started = Instant::now();
        let error = causes(&client.call(Call::Identity, None, None).await.unwrap_err());
        assert!(
            error.starts_with(&format!(
                "GET /gantry.dev/v1/identity: cannot connect to {url}: "
            )) && error.contains("Connection refused"),
            "{error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn the_unrelated_ca_is_a_new_one_each_time() {
        assert_ne!(unrelated_ca().unwrap(), unrelated_ca().unwrap());
    }
}
