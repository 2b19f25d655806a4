//! The registry client: TLS (with extra CAs), plain HTTP for listed registries, credentials
//! from docker configs, token exchange (by `oci-client`), and errors mapped to [`ImageError`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use oci_client::client::{
    BlobResponse, Certificate, CertificateEncoding, ClientConfig, ClientProtocol,
};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sha2::{Digest, Sha256};

use super::auth::{DockerConfig, normalize_registry};
use super::error::{BlobSize, ImageError, RegistryProtocol};
pub use super::reference::parse_reference;

/// Manifests and indexes larger than this are refused (registries cap them at 4 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Credentials by registry (docker config files, pull secrets).
    pub credentials: DockerConfig,
    /// Registries (`host[:port]`) reached over plain HTTP; all others use TLS.
    pub insecure_registries: Vec<String>,
    /// Extra CA certificates (PEM, one or more per entry) trusted for registry TLS.
    pub ca_pem: Vec<Vec<u8>>,
}

/// A client for one set of credentials. `oci-client` remembers the first credential used for
/// a registry, so make one client per set of pull secrets (for instance one per bundle).
#[derive(Clone)]
pub struct RegistryClient {
    pub(crate) client: Client,
    credentials: DockerConfig,
    /// For manifests, whose size `oci-client` does not bound: same TLS settings.
    pub(crate) http: reqwest::Client,
    insecure: Vec<String>,
    /// `Authorization` headers by registry and repository, for [`AUTHORIZATION_TTL`]: without
    /// them every resolve would first probe `/v2/` (and, where the registry asks for one,
    /// fetch a token), two or three requests where one would do.
    authorizations: Arc<Mutex<HashMap<(String, String), Kept>>>,
}

/// How long an `Authorization` header is used again. Registries' tokens live at least 60 s
/// (the distribution token specification's floor); a header refused meanwhile is forgotten.
pub(crate) const AUTHORIZATION_TTL: Duration = Duration::from_secs(45);

/// A header kept, and when it was obtained.
#[derive(Clone)]
struct Kept {
    header: Option<String>,
    at: Instant,
}

/// What a header is kept by: the token's scope (`repository:NAME:pull`).
fn authorization_key(reference: &Reference) -> (String, String) {
    (
        reference.resolve_registry().to_string(),
        reference.repository().to_string(),
    )
}

/// Splits a PEM bundle into its certificates (reqwest reads one certificate per call).
fn split_pem(pem: &[u8]) -> Result<Vec<Certificate>, ImageError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = std::str::from_utf8(pem)
        .map_err(|_| ImageError::Config("CA certificate bundle is not PEM text".into()))?;
    let mut certificates = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else {
            return Err(ImageError::Config(
                "CA certificate bundle has an unterminated certificate".into(),
            ));
        };
        let stop = start + end + END.len();
        certificates.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data: format!("{}\n", &rest[start..stop]).into_bytes(),
        });
        rest = &rest[stop..];
    }
    if certificates.is_empty() {
        return Err(ImageError::Config(
            "CA certificate bundle holds no certificate".into(),
        ));
    }
    Ok(certificates)
}

impl RegistryClient {
    pub fn new(options: RegistryOptions) -> Result<Self, ImageError> {
        let mut extra_root_certificates = Vec::new();
        for pem in &options.ca_pem {
            extra_root_certificates.extend(split_pem(pem)?);
        }
        let insecure: Vec<String> = options
            .insecure_registries
            .iter()
            .map(|r| normalize_registry(r))
            .collect();
        let mut roots = Vec::new();
        for certificate in &extra_root_certificates {
            roots.push(
                reqwest::Certificate::from_pem(&certificate.data)
                    .map_err(|e| ImageError::Config(format!("invalid CA certificate: {e}")))?,
            );
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(300))
            .tls_certs_merge(roots)
            .build()
            .map_err(|e| ImageError::Config(format!("cannot build the registry client: {e}")))?;
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(insecure.clone()),
            extra_root_certificates,
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(300)),
            ..Default::default()
        };
        let client = Client::try_from(config)
            .map_err(|e| ImageError::Config(format!("cannot build the registry client: {e}")))?;
        Ok(RegistryClient {
            client,
            credentials: options.credentials,
            http,
            insecure,
            authorizations: Arc::default(),
        })
    }

    pub(crate) fn auth_for(&self, reference: &Reference) -> RegistryAuth {
        self.credentials.registry_auth(reference.resolve_registry())
    }

    /// Presents the credentials (token exchange where the registry asks for it).
    pub(crate) async fn authenticate(
        &self,
        reference: &Reference,
        operation: RegistryOperation,
    ) -> Result<(), ImageError> {
        let auth = self.auth_for(reference);
        self.client
            .auth(reference, &auth, operation)
            .await
            .map(|_| ())
            .map_err(|e| map_error(reference, e))
    }

    /// Authenticates for pulling and returns the `Authorization` header for requests made
    /// outside `oci-client` (a bearer token, else basic credentials when there are some).
    /// The header obtained for the same repository within [`AUTHORIZATION_TTL`] is used
    /// again.
    pub(crate) async fn authorization(
        &self,
        reference: &Reference,
    ) -> Result<Option<String>, ImageError> {
        let key = authorization_key(reference);
        if let Some(kept) = self.kept_authorization(&key) {
            return Ok(kept);
        }
        let header = self.fresh_authorization(reference).await?;
        if let Ok(mut kept) = self.authorizations.lock() {
            let now = Instant::now();
            // Expired headers of other repositories go with each new one: the map stays as
            // small as the repositories pulled within the TTL.
            kept.retain(|_, k| now.duration_since(k.at) < AUTHORIZATION_TTL);
            kept.insert(
                key,
                Kept {
                    header: header.clone(),
                    at: now,
                },
            );
        }
        Ok(header)
    }

    fn kept_authorization(&self, key: &(String, String)) -> Option<Option<String>> {
        let kept = self.authorizations.lock().ok()?;
        kept.get(key)
            .filter(|k| k.at.elapsed() < AUTHORIZATION_TTL)
            .map(|k| k.header.clone())
    }

    /// Forgets the header kept for `reference`'s repository: the registry refused it.
    pub(crate) fn forget_authorization(&self, reference: &Reference) {
        if let Ok(mut kept) = self.authorizations.lock() {
            kept.remove(&authorization_key(reference));
        }
    }

    async fn fresh_authorization(
        &self,
        reference: &Reference,
    ) -> Result<Option<String>, ImageError> {
        let auth = self.auth_for(reference);
        let token = self
            .client
            .auth(reference, &auth, RegistryOperation::Pull)
            .await
            .map_err(|e| map_error(reference, e))?;
        Ok(match (token, auth) {
            (Some(token), _) => Some(format!("Bearer {token}")),
            (None, RegistryAuth::Basic(user, password)) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
            (None, _) => None,
        })
    }

    /// The digest a reference designates: the reference's own digest, else the registry's
    /// answer to a HEAD (or GET) of the manifest.
    pub async fn resolve(&self, reference: &str) -> Result<ResolvedReference, ImageError> {
        let parsed = parse_reference(reference)?;
        if let Some(digest) = parsed.digest() {
            return Ok(ResolvedReference {
                digest: digest.to_string(),
                reference: parsed,
            });
        }
        let authorization = self.authorization(&parsed).await?;
        let response = self
            .manifest_request(&parsed, reqwest::Method::HEAD, authorization.as_deref())
            .await?;
        let header = response
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| d.starts_with("sha256:"))
            .map(str::to_string);
        let digest = match header {
            Some(digest) => digest,
            None => {
                self.fetch_manifest(&parsed, authorization.as_deref(), None)
                    .await?
                    .1
            }
        };
        Ok(ResolvedReference {
            digest,
            reference: parsed,
        })
    }

    /// `http` for the registries listed as insecure, else `https`.
    pub(crate) fn scheme(&self, reference: &Reference) -> &'static str {
        let registry = reference.resolve_registry();
        if self.insecure.iter().any(|r| r == registry) {
            "http"
        } else {
            "https"
        }
    }

    fn manifest_url(&self, reference: &Reference) -> String {
        let registry = reference.resolve_registry();
        let scheme = self.scheme(reference);
        let target = reference.digest().or(reference.tag()).unwrap_or("latest");
        format!(
            "{scheme}://{registry}/v2/{}/manifests/{target}",
            reference.repository()
        )
    }

    /// Sends a manifest request and maps failure statuses to errors.
    async fn manifest_request(
        &self,
        reference: &Reference,
        method: reqwest::Method,
        authorization: Option<&str>,
    ) -> Result<reqwest::Response, ImageError> {
        const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
        let url = self.manifest_url(reference);
        let request_with = |method: reqwest::Method| {
            let request = self
                .http
                .request(method, &url)
                .header(reqwest::header::ACCEPT, ACCEPT);
            match authorization {
                Some(authorization) => {
                    request.header(reqwest::header::AUTHORIZATION, authorization)
                }
                None => request,
            }
        };
        let head = method == reqwest::Method::HEAD;
        let response = request_with(method)
            .send()
            .await
            .map_err(|e| registry_failure(reference, chain(&e)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let mut detail = format!("HTTP {status} for {url}");
        if status == reqwest::StatusCode::BAD_REQUEST {
            // A TLS server's answer to plain HTTP says so in its body, which a HEAD lacks.
            let body = if head {
                match request_with(reqwest::Method::GET).send().await {
                    Ok(response) => short_body(response).await,
                    Err(_) => String::new(),
                }
            } else {
                short_body(response).await
            };
            if !body.is_empty() {
                detail = format!("{detail}: {body}");
            }
        }
        Err(self.status_error(reference, status, detail))
    }

    /// The error for a registry's failure `status` answering a request about `reference`
    /// (`detail` says what was asked and answered): refused credentials are forgotten, so that
    /// the next attempt authenticates again.
    pub(crate) fn status_error(
        &self,
        reference: &Reference,
        status: reqwest::StatusCode,
        detail: String,
    ) -> ImageError {
        match status.as_u16() {
            401 | 403 => {
                self.forget_authorization(reference);
                ImageError::AuthRefused {
                    reference: reference.whole(),
                    registry: reference.registry().to_string(),
                    detail,
                }
            }
            404 => ImageError::NotFound {
                reference: reference.whole(),
                detail,
            },
            _ => registry_failure(reference, detail),
        }
    }

    /// Fetches a manifest (or index), at most [`MAX_MANIFEST_BYTES`], and checks its digest:
    /// `sha256` of the body, which must equal the reference's digest when it has one (and the
    /// registry's `Docker-Content-Digest` when it sends one).
    ///
    /// `declared` is the size an index entry gives for this manifest: the body must have
    /// exactly that length, and no more than one byte past it is read.
    pub(crate) async fn fetch_manifest(
        &self,
        reference: &Reference,
        authorization: Option<&str>,
        declared: Option<i64>,
    ) -> Result<(bytes::Bytes, String), ImageError> {
        let mut size = match declared {
            Some(declared) => {
                let what = format!("manifest of {reference}");
                let digest = reference.digest().unwrap_or_default().to_string();
                let check = SizeCheck::new(reference, what, digest, declared)?;
                if check.declared > MAX_MANIFEST_BYTES {
                    return Err(ImageError::InvalidManifest {
                        reference: reference.whole(),
                        reason: format!(
                            "its index entry declares {} bytes (at most {MAX_MANIFEST_BYTES})",
                            check.declared
                        ),
                    });
                }
                Some(check)
            }
            None => None,
        };
        let mut response = self
            .manifest_request(reference, reqwest::Method::GET, authorization)
            .await?;
        let header = response
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if let Some(size) = &size {
            size.announced(response.content_length())?;
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            registry_failure(reference, format!("reading the manifest: {}", chain(&e)))
        })? {
            if let Some(size) = &mut size {
                size.received(chunk.len())?;
            }
            body.extend_from_slice(&chunk);
            if body.len() as u64 > MAX_MANIFEST_BYTES {
                return Err(ImageError::InvalidManifest {
                    reference: reference.whole(),
                    reason: format!("larger than {MAX_MANIFEST_BYTES} bytes"),
                });
            }
        }
        if let Some(size) = &size {
            size.finish()?;
        }
        let body = bytes::Bytes::from(body);
        let actual = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if let Some(header) = header.filter(|h| h.starts_with("sha256:"))
            && header != actual
        {
            return Err(ImageError::DigestMismatch {
                what: format!("manifest of {reference} (as the registry names it)"),
                expected: header,
                actual,
            });
        }
        if let Some(expected) = reference.digest()
            && expected != actual
        {
            return Err(ImageError::DigestMismatch {
                what: format!("manifest of {reference}"),
                expected: expected.to_string(),
                actual,
            });
        }
        Ok((body, actual))
    }

    /// Fetches a small blob (an image config) whole, at most `max` bytes, digest checked.
    pub(crate) async fn fetch_small_blob(
        &self,
        reference: &Reference,
        descriptor: &OciDescriptor,
        max: u64,
    ) -> Result<Vec<u8>, ImageError> {
        let what = format!("blob {} of {reference}", descriptor.digest);
        let mut size = SizeCheck::for_descriptor(reference, what.clone(), descriptor)?;
        if size.declared > max {
            return Err(ImageError::InvalidManifest {
                reference: reference.whole(),
                reason: format!("{what} declares {} bytes (at most {max})", descriptor.size),
            });
        }
        let mut stream = self.blob_stream(reference, descriptor, &size).await?;
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| map_stream_error(reference, &what, e))?;
            size.received(chunk.len())?;
            data.extend_from_slice(&chunk);
        }
        size.finish()?;
        let actual = format!("sha256:{}", hex::encode(Sha256::digest(&data)));
        if actual != descriptor.digest {
            return Err(ImageError::DigestMismatch {
                what,
                expected: descriptor.digest.clone(),
                actual,
            });
        }
        Ok(data)
    }
}

impl RegistryClient {
    /// Opens a blob for streaming, from the image's registry only, after checking the length
    /// the registry announces (`Content-Length`, the whole blob) against the descriptor: a
    /// blob of another size fails here, naming its actual size, before any byte is read.
    /// Asked as the range "from byte 0" so that `oci-client` does not hash the blob a second
    /// time (it verifies whole responses only); callers check the digest.
    pub(crate) async fn blob_stream(
        &self,
        reference: &Reference,
        descriptor: &OciDescriptor,
        size: &SizeCheck,
    ) -> Result<oci_client::client::SizedStream, ImageError> {
        let stream = match self
            .client
            .pull_blob_stream_partial(reference, &registry_only(descriptor), 0, None)
            .await
            .map_err(|e| map_error(reference, e))
            .inspect_err(|e| {
                // `oci-client`'s token may have expired before the header kept for the
                // manifests: the next attempt authenticates again.
                if matches!(e, ImageError::AuthRefused { .. }) {
                    self.forget_authorization(reference);
                }
            })? {
            BlobResponse::Full(stream) | BlobResponse::Partial(stream) => stream,
        };
        size.announced(stream.content_length)?;
        Ok(stream)
    }
}

/// The size a descriptor declares for a blob, checked against what the registry sends: an
/// announced length (`Content-Length`) that differs fails before any byte is read, a body
/// that runs past the declared size fails one byte past it, and one that ends early fails at
/// its end.
#[derive(Debug)]
pub(crate) struct SizeCheck {
    what: String,
    digest: String,
    pub(crate) declared: u64,
    received: u64,
}

impl SizeCheck {
    /// `declared` as a descriptor carries it (a signed number in the JSON).
    pub(crate) fn new(
        reference: &Reference,
        what: String,
        digest: String,
        declared: i64,
    ) -> Result<Self, ImageError> {
        let declared = u64::try_from(declared).map_err(|_| ImageError::InvalidManifest {
            reference: reference.whole(),
            reason: format!("{what} declares a negative size ({declared})"),
        })?;
        Ok(SizeCheck {
            what,
            digest,
            declared,
            received: 0,
        })
    }

    pub(crate) fn for_descriptor(
        reference: &Reference,
        what: String,
        descriptor: &OciDescriptor,
    ) -> Result<Self, ImageError> {
        Self::new(reference, what, descriptor.digest.clone(), descriptor.size)
    }

    fn mismatch(&self, actual: BlobSize) -> ImageError {
        ImageError::SizeMismatch {
            what: self.what.clone(),
            digest: self.digest.clone(),
            declared: self.declared,
            actual,
        }
    }

    /// Checks the length the registry announced for the whole blob, if it did.
    pub(crate) fn announced(&self, length: Option<u64>) -> Result<(), ImageError> {
        match length {
            Some(length) if length != self.declared => {
                Err(self.mismatch(BlobSize::Exactly(length)))
            }
            _ => Ok(()),
        }
    }

    /// Counts `len` more bytes; fails once they run past the declared size.
    pub(crate) fn received(&mut self, len: usize) -> Result<(), ImageError> {
        self.received = self.received.saturating_add(len as u64);
        if self.received > self.declared {
            return Err(self.mismatch(BlobSize::MoreThan(self.declared)));
        }
        Ok(())
    }

    /// At the end of the body: fails if it was shorter than declared.
    pub(crate) fn finish(&self) -> Result<(), ImageError> {
        if self.received < self.declared {
            return Err(self.mismatch(BlobSize::Exactly(self.received)));
        }
        Ok(())
    }
}

/// The descriptor without its `urls`: blobs come from the image's registry only, never from
/// other hosts a manifest names (which the client would otherwise try when the registry fails).
pub(crate) fn registry_only(descriptor: &OciDescriptor) -> OciDescriptor {
    OciDescriptor {
        urls: None,
        ..descriptor.clone()
    }
}

/// A reference and the digest it resolved to.
#[derive(Debug, Clone)]
pub struct ResolvedReference {
    pub reference: Reference,
    /// `sha256:...` of the top-level manifest or index.
    pub digest: String,
}

impl ResolvedReference {
    /// `registry/repository@sha256:...`
    pub fn pinned(&self) -> String {
        pinned(&self.reference, &self.digest)
    }
}

/// `registry/repository@digest` for a reference.
pub fn pinned(reference: &Reference, digest: &str) -> String {
    format!(
        "{}/{}@{}",
        reference.registry(),
        reference.repository(),
        digest
    )
}

/// The message of an error and of its sources, for errors whose top line says too little
/// (connection errors).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let message = inner.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = inner.source();
    }
    text
}

/// Maps an `oci-client` error to what a user can act on.
pub(crate) fn map_error(reference: &Reference, error: OciDistributionError) -> ImageError {
    let whole = reference.whole();
    let registry = reference.registry().to_string();
    let not_found = |detail: String| ImageError::NotFound {
        reference: whole.clone(),
        detail,
    };
    let refused = |detail: String| ImageError::AuthRefused {
        reference: whole.clone(),
        registry: registry.clone(),
        detail,
    };
    match error {
        OciDistributionError::AuthenticationFailure(detail) => refused(detail),
        OciDistributionError::UnauthorizedError { url } => {
            refused(format!("401 Unauthorized for {url}"))
        }
        OciDistributionError::ImageManifestNotFoundError(detail) => not_found(detail),
        OciDistributionError::RegistryError { envelope, url } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            let detail = format!("{envelope} ({url})");
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) {
                not_found(detail)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                refused(detail)
            } else {
                ImageError::Registry {
                    reference: whole,
                    detail,
                }
            }
        }
        OciDistributionError::ServerError { code, url, message } => match code {
            404 => not_found(format!("404 for {url}: {message}")),
            401 | 403 => refused(format!("{code} for {url}: {message}")),
            _ => registry_failure(reference, format!("HTTP {code} for {url}: {message}")),
        },
        OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError {
            expected,
            actual,
        }) => ImageError::DigestMismatch {
            what: format!("content of {whole}"),
            expected,
            actual,
        },
        OciDistributionError::RequestError(e) => match e.status().map(|s| s.as_u16()) {
            Some(401 | 403) => refused(chain(&e)),
            Some(404) => not_found(chain(&e)),
            _ => registry_failure(reference, chain(&e)),
        },
        other => registry_failure(reference, chain(&other)),
    }
}

/// A failed registry request; a registry that answered in the other protocol (plain HTTP to
/// a TLS client, TLS or a TLS server's complaint to a plain-HTTP one) is named as such.
pub(crate) fn registry_failure(reference: &Reference, detail: String) -> ImageError {
    // rustls reads the first byte of an HTTP answer ('H') as a record's content type.
    let speaks = if detail.contains("InvalidContentType") {
        Some(RegistryProtocol::PlainHttp)
    } else if detail.contains("HTTP request to an HTTPS server")
        || detail.contains("invalid HTTP version parsed")
    {
        Some(RegistryProtocol::Tls)
    } else {
        None
    };
    match speaks {
        Some(speaks) => ImageError::ProtocolMismatch {
            reference: reference.whole(),
            registry: reference.resolve_registry().to_string(),
            speaks,
        },
        None => ImageError::Registry {
            reference: reference.whole(),
            detail,
        },
    }
}

/// The start of an error response's body, as one line (at most 256 bytes are read).
pub(crate) async fn short_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < 256 {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(256);
    String::from_utf8_lossy(&body)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Maps an error met while streaming a blob.
pub(crate) fn map_stream_error(
    reference: &Reference,
    what: &str,
    error: std::io::Error,
) -> ImageError {
    if let Some(oci_client::errors::DigestError::VerificationError { expected, actual }) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<oci_client::errors::DigestError>())
    {
        return ImageError::DigestMismatch {
            what: what.to_string(),
            expected: expected.clone(),
            actual: actual.clone(),
        };
    }
    registry_failure(reference, format!("reading {what}: {}", chain(&error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_pins() {
        let r = parse_reference("127.0.0.1:5000/team/app:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "team/app");
        assert_eq!(r.tag(), Some("v1"));
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            pinned(&r, &digest),
            format!("127.0.0.1:5000/team/app@{digest}")
        );
        let hub = parse_reference("nginx").unwrap();
        assert_eq!(pinned(&hub, "sha256:x"), "docker.io/library/nginx@sha256:x");
        assert!(matches!(
            parse_reference("UPPER/Case:tag"),
            Err(ImageError::InvalidReference { .. })
        ));
    }

    #[test]
    fn blob_sizes_are_checked_while_streaming() {
        let r = parse_reference("127.0.0.1:5000/app:v1").unwrap();
        let check = |declared| SizeCheck::new(&r, "layer x".into(), "sha256:x".into(), declared);
        let actual = |e: ImageError| match e {
            ImageError::SizeMismatch {
                declared, actual, ..
            } => (declared, actual),
            other => panic!("{other:?}"),
        };

        // Exactly the declared size, in any chunks, with or without a Content-Length.
        let mut exact = check(10).unwrap();
        exact.announced(Some(10)).unwrap();
        exact.announced(None).unwrap();
        exact.received(4).unwrap();
        exact.received(6).unwrap();
        exact.finish().unwrap();

        // An announced length that differs fails before anything is read.
        assert_eq!(
            actual(check(10).unwrap().announced(Some(11)).unwrap_err()),
            (10, BlobSize::Exactly(11))
        );
        assert_eq!(
            actual(check(10).unwrap().announced(Some(3)).unwrap_err()),
            (10, BlobSize::Exactly(3))
        );

        // A body without a length stops as soon as it runs past the declared size.
        let mut long = check(10).unwrap();
        long.received(10).unwrap();
        assert_eq!(
            actual(long.received(1).unwrap_err()),
            (10, BlobSize::MoreThan(10))
        );
        // One that ends early fails at its end.
        let mut short = check(10).unwrap();
        short.received(9).unwrap();
        assert_eq!(
            actual(short.finish().unwrap_err()),
            (10, BlobSize::Exactly(9))
        );
        // An empty blob declared empty is fine; a negative size is not a size.
        check(0).unwrap().finish().unwrap();
        assert!(matches!(
            check(-1),
            Err(ImageError::InvalidManifest { reason, .. }) if reason.contains("negative")
        ));
    }

    #[test]
    fn pem_bundles_are_split() {
        let one = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let bundle = format!("# comment\n{one}{one}");
        assert_eq!(split_pem(bundle.as_bytes()).unwrap().len(), 2);
        assert!(split_pem(b"nothing here").is_err());
        assert!(split_pem(b"-----BEGIN CERTIFICATE-----\nAAAA").is_err());
    }

    #[test]
    fn registry_errors_are_classified() {
        let r = parse_reference("127.0.0.1:5000/app:v1").unwrap();
        let registry_error = |code: &str| OciDistributionError::RegistryError {
            envelope: serde_json::from_value(
                serde_json::json!({"errors": [{"code": code, "message": "m"}]}),
            )
            .unwrap(),
            url: "u".into(),
        };
        assert!(matches!(
            map_error(&r, registry_error("MANIFEST_UNKNOWN")),
            ImageError::NotFound { .. }
        ));
        assert!(matches!(
            map_error(&r, registry_error("DENIED")),
            ImageError::AuthRefused { .. }
        ));
        assert!(matches!(
            map_error(&r, OciDistributionError::UnauthorizedError { url: "u".into() }),
            ImageError::AuthRefused { registry, .. } if registry == "127.0.0.1:5000"
        ));
    }
}
