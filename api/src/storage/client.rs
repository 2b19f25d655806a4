//! Client of the storage server (used by the provisioner and the unpack program): where
//! canonical tarballs are kept. Every error names the method and URL, or the file, at fault.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{self as wire, Listing, Target};

/// A failed request to the storage server, or a name it would refuse.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(pub String);

type Result<T, E = ClientError> = std::result::Result<T, E>;

fn invalid_name(error: wire::NameError) -> ClientError {
    ClientError(error.to_string())
}

/// How the provisioner and the unpack program reach the storage server.
#[derive(Clone, Debug)]
pub struct StorageClient {
    base: String,
    token: Token,
    http: reqwest::Client,
}

/// The bearer token presented to the storage server.
#[derive(Clone, Debug)]
pub enum Token {
    None,
    Static(String),
    /// Read on every request, so a projected ServiceAccount token that rotates keeps working.
    File(PathBuf),
}

impl StorageClient {
    /// `base` is the server's URL (`http://127.0.0.1:8080`); `ca_pem` adds a trusted CA.
    pub fn new(base: &str, token: Token, ca_pem: Option<&[u8]>) -> Result<Self> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600));
        // The unpack program runs inside bundle images, which carry no CA store: the system's
        // roots are loaded only for an https:// server that brings no CA of its own.
        if let Some(pem) = ca_pem {
            let certificate = reqwest::Certificate::from_pem(pem)
                .map_err(|e| ClientError(format!("storage CA: {e}")))?;
            builder = builder.tls_certs_only([certificate]);
        } else if !base.starts_with("https://") {
            builder = builder.tls_certs_only([]);
        }
        let http = builder
            .build()
            .map_err(|e| ClientError(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// URL of a bundle's tarball, for names an upload has already accepted.
    pub fn content_url(&self, bundle: &str, hex: &str) -> String {
        format!("{}{}", self.base, wire::tarball_path(bundle, hex))
    }

    /// URL of one tarball; names the server would refuse fail here, before any request.
    fn tarball_url(&self, bundle: &str, hex: &str) -> Result<String> {
        Ok(self.url(&Target::tarball(bundle, hex).map_err(invalid_name)?))
    }

    /// URL of a bundle (its listing, or all its tarballs for a deletion).
    fn bundle_url(&self, bundle: &str) -> Result<String> {
        Ok(self.url(&Target::bundle_of(bundle).map_err(invalid_name)?))
    }

    fn url(&self, target: &Target) -> String {
        format!("{}{}", self.base, target.path())
    }

    fn request(&self, method: reqwest::Method, url: &str) -> Result<reqwest::RequestBuilder> {
        let builder = self.http.request(method, url);
        Ok(match &self.token {
            Token::None => builder,
            Token::Static(token) => builder.bearer_auth(token),
            Token::File(path) => {
                let token = std::fs::read_to_string(path).map_err(|e| {
                    ClientError(format!("reading the token file {}: {e}", path.display()))
                })?;
                builder.bearer_auth(token.trim())
            }
        })
    }

    /// Sends a request without a body; transport errors name the method and URL.
    async fn send(&self, method: reqwest::Method, url: &str) -> Result<reqwest::Response> {
        self.request(method.clone(), url)?
            .send()
            .await
            .map_err(|e| ClientError(format!("{method} {url}: {e}")))
    }

    /// Whether the tarball is stored.
    pub async fn exists(&self, bundle: &str, hex: &str) -> Result<bool> {
        let url = self.tarball_url(bundle, hex)?;
        let response = self.send(reqwest::Method::HEAD, &url).await?;
        match response.status() {
            s if s.is_success() => Ok(true),
            reqwest::StatusCode::NOT_FOUND => Ok(false),
            s => Err(ClientError(format!("HEAD {url}: {s}"))),
        }
    }

    /// Stores a tarball held in memory as `bundle`'s content `hex`.
    pub async fn upload_bytes(&self, bundle: &str, hex: &str, tarball: Vec<u8>) -> Result<()> {
        let url = self.tarball_url(bundle, hex)?;
        self.put(
            &url,
            self.request(reqwest::Method::PUT, &url)?.body(tarball),
        )
        .await
    }

    /// Uploads the tarball at `path` (streamed from disk).
    pub async fn upload(&self, bundle: &str, hex: &str, path: &Path) -> Result<()> {
        let url = self.tarball_url(bundle, hex)?;
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| ClientError(format!("opening {}: {e}", path.display())))?;
        let length = file
            .metadata()
            .await
            .map_err(|e| ClientError(format!("reading {}: {e}", path.display())))?
            .len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
        let request = self
            .request(reqwest::Method::PUT, &url)?
            .header(reqwest::header::CONTENT_LENGTH, length)
            .body(body);
        self.put(&url, request).await
    }

    /// Sends a PUT of a tarball to `url`; a refusal carries the server's answer.
    async fn put(&self, url: &str, request: reqwest::RequestBuilder) -> Result<()> {
        let response = request
            .send()
            .await
            .map_err(|e| ClientError(format!("PUT {url}: {e}")))?;
        if !response.status().is_success() {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            return Err(ClientError(format!("PUT {url}: {status} {}", text.trim())));
        }
        Ok(())
    }

    /// Downloads a tarball, refusing more than `max_bytes`.
    pub async fn download(&self, bundle: &str, hex: &str, max_bytes: u64) -> Result<Vec<u8>> {
        use futures::StreamExt;
        let url = self.tarball_url(bundle, hex)?;
        let response = self.send(reqwest::Method::GET, &url).await?;
        if !response.status().is_success() {
            return Err(ClientError(format!("GET {url}: {}", response.status())));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ClientError(format!("GET {url}: {e}")))?;
            if (body.len() + chunk.len()) as u64 > max_bytes {
                return Err(ClientError(format!(
                    "GET {url}: larger than the limit of {max_bytes} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The hex digests stored for a bundle (none when nothing is stored).
    pub async fn list(&self, bundle: &str) -> Result<Vec<String>> {
        let url = self.bundle_url(bundle)?;
        let response = self.send(reqwest::Method::GET, &url).await?;
        match response.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(Vec::new()),
            s if s.is_success() => {
                let listing: Listing = response
                    .json()
                    .await
                    .map_err(|e| ClientError(format!("GET {url}: {e}")))?;
                Ok(listing.tarballs.into_iter().map(|t| t.digest).collect())
            }
            s => Err(ClientError(format!("GET {url}: {s}"))),
        }
    }

    /// Deletes one tarball (already gone is fine).
    pub async fn delete(&self, bundle: &str, hex: &str) -> Result<()> {
        let url = self.tarball_url(bundle, hex)?;
        let response = self.send(reqwest::Method::DELETE, &url).await?;
        match response.status() {
            s if s.is_success() || s == reqwest::StatusCode::NOT_FOUND => Ok(()),
            s => Err(ClientError(format!("DELETE {url}: {s}"))),
        }
    }

    /// Deletes everything stored for a bundle (nothing stored is fine).
    pub async fn delete_bundle(&self, bundle: &str) -> Result<()> {
        let url = self.bundle_url(bundle)?;
        let response = self.send(reqwest::Method::DELETE, &url).await?;
        match response.status() {
            s if s.is_success() || s == reqwest::StatusCode::NOT_FOUND => Ok(()),
            s => Err(ClientError(format!("DELETE {url}: {s}"))),
        }
    }
}
