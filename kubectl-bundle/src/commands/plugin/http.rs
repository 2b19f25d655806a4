//! Calling a plugin: HTTPS verified against the given roots only (rustls, no system roots, no
//! proxy), each call bounded in time and in the size of its answer.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use gantry_api::plugin::PATH_PREFIX;
use reqwest::StatusCode;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::commands::output::causes;

/// How long one call may take, its answer read to the end.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

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
}

impl Plugin {
    /// `base`: `https://HOST:PORT` (and a path prefix, if any), without a trailing `/`.
    pub fn new(base: &str, roots: Vec<CertificateDer<'static>>) -> anyhow::Result<Self> {
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
            .connect_timeout(CALL_TIMEOUT)
            .build()
            .context("building the HTTPS client")?;
        Ok(Self {
            http,
            base: base.to_string(),
        })
    }

    /// `METHOD /gantry.dev/v1/CALL`, for messages.
    pub fn describe(call: Call) -> String {
        format!("{} {PATH_PREFIX}/{}", call.method(), call.name())
    }

    /// Makes `call` with `token` (none: no `Authorization` header) and `body` (a JSON
    /// document, for `render`), within [`CALL_TIMEOUT`].
    pub async fn call(
        &self,
        call: Call,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> anyhow::Result<Answer> {
        let url = format!("{}{PATH_PREFIX}/{}", self.base, call.name());
        let what = Self::describe(call);
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
                let mut response = request
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("{what}: {}", causes(&e.into())))?;
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
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "{what}: no answer within {}s",
                    CALL_TIMEOUT.as_secs()
                ))
            })
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
    fn the_unrelated_ca_is_a_new_one_each_time() {
        assert_ne!(unrelated_ca().unwrap(), unrelated_ca().unwrap());
    }
}
