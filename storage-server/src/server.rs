//! Listener, TLS, start-up check and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::auth::Authorizer;
use crate::http::{App, AppState};
use crate::metrics::Metrics;
use crate::stall::WriteTimeout;
use crate::store::{SMALL_TARBALL, Store, StoreError, TransferLimits};

/// How long open connections may take to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers (the default of the flag).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// hyper's per-connection buffer limit (its default is about 400 KiB).
const HTTP1_MAX_BUF: usize = 64 * 1024;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error(
        "--insecure-no-auth is only allowed on a loopback address, not on {0}; \
         configure authentication or listen on 127.0.0.1 / [::1]"
    )]
    InsecureNotLoopback(SocketAddr),
    #[error("storage root: {0}")]
    Store(#[from] StoreError),
    #[error("start-up check of {root}: {source}")]
    Recovery {
        root: PathBuf,
        #[source]
        source: StoreError,
    },
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS {what} {path}: {reason}")]
    Tls {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
}

pub enum AuthConfig {
    /// No authentication: only accepted on a loopback listen address.
    Disabled,
    Kubernetes {
        client: kube::Client,
        cache_ttl: Duration,
        audiences: Vec<String>,
    },
}

pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Config {
    pub root: PathBuf,
    pub listen: SocketAddr,
    pub auth: AuthConfig,
    pub tls: Option<TlsFiles>,
    pub max_body_bytes: u64,
    /// Memory for caching small tarballs (0: no cache).
    pub cache_bytes: u64,
    /// How long a client may take to send a request head or finish a TLS handshake.
    pub header_read_timeout: Duration,
    /// How slow uploads and downloads may be.
    pub transfer: TransferLimits,
}

/// Refuses to serve without authentication anywhere but on loopback.
pub fn check_listen(listen: SocketAddr, auth: &AuthConfig) -> Result<(), ServerError> {
    match auth {
        AuthConfig::Disabled if !listen.ip().is_loopback() => {
            Err(ServerError::InsecureNotLoopback(listen))
        }
        _ => Ok(()),
    }
}

fn tls_err(what: &'static str, path: &Path, e: impl std::fmt::Display) -> ServerError {
    ServerError::Tls {
        what,
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

fn load_tls(files: &TlsFiles) -> Result<TlsAcceptor, ServerError> {
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| tls_err("certificate", &files.cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err("certificate", &files.cert, e))?;
    if certs.is_empty() {
        return Err(tls_err(
            "certificate",
            &files.cert,
            "no certificate in file",
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| tls_err("key", &files.key, e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_err("certificate", &files.cert, e))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| tls_err("key", &files.key, e))?;
    // HTTP/1.1 only: hyper bounds the time a client takes to send an HTTP/1 request head, but
    // has no such limit for HTTP/2, whose slow clients could hold connections forever.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

pub struct Server {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: Arc<AppState>,
    header_read_timeout: Duration,
}

impl Server {
    /// Opens the store and binds the listener. The server answers `/healthz`
    /// at once; `/readyz` and the bundle API wait for the start-up check.
    pub async fn bind(config: Config) -> Result<Self, ServerError> {
        check_listen(config.listen, &config.auth)?;
        let tls = config.tls.as_ref().map(load_tls).transpose()?;
        let store = Arc::new(
            Store::open_with_cache(&config.root, config.cache_bytes, SMALL_TARBALL)?
                .with_transfer_limits(config.transfer),
        );
        let metrics = Arc::new(Metrics::new(
            store.stored_bytes_gauge(),
            store.stored_tarballs_gauge(),
        ));
        let auth = match config.auth {
            AuthConfig::Disabled => None,
            AuthConfig::Kubernetes {
                client,
                cache_ttl,
                audiences,
            } => Some(Authorizer::new(client, cache_ttl, audiences)),
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        Ok(Self {
            listener,
            tls,
            state: Arc::new(AppState {
                store,
                auth,
                metrics,
                ready: AtomicBool::new(false),
                max_body_bytes: config.max_body_bytes,
                transfer: config.transfer,
            }),
            header_read_timeout: config.header_read_timeout,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets open connections finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let Self {
            listener,
            tls,
            state,
            header_read_timeout,
        } = self;
        let write_timeout = state.transfer.idle_timeout;
        let service = App::new(state.clone());
        // HTTP/1 only, without sniffing the version: the sniffing waits for the first bytes
        // with no time limit, while hyper's HTTP/1 header timeout runs from the start of the
        // connection (a client that sends nothing is closed after it too).
        let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
        // Without a timer hyper enforces no header timeout: slow clients could hold
        // connections open forever without sending a request.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            // Bounds what hyper queues per connection (one streamed chunk), which keeps
            // memory flat with many concurrent large downloads; also caps request heads.
            .max_buf_size(HTTP1_MAX_BUF);
        let builder = Arc::new(builder);
        let graceful = GracefulShutdown::new();

        let store = state.store.clone();
        let mut recovery = tokio::spawn(async move { store.recover().await });
        let mut recovering = true;
        tokio::pin!(shutdown);

        loop {
            tokio::select! {
                () = &mut shutdown => break,
                done = &mut recovery, if recovering => {
                    recovering = false;
                    let root = state.store.root().to_owned();
                    let report = done
                        .map_err(|e| StoreError::Task(e.to_string()))
                        .and_then(|r| r)
                        .map_err(|source| ServerError::Recovery { root, source })?;
                    for path in &report.removed_temp {
                        tracing::info!(path = %path.display(), "removed temporary file of an interrupted upload");
                    }
                    for path in &report.removed_trash {
                        tracing::info!(path = %path.display(), "finished an interrupted bundle deletion");
                    }
                    for path in &report.ignored {
                        tracing::warn!(path = %path.display(), "ignoring unexpected entry in the storage root");
                    }
                    for (from, to) in &report.quarantined {
                        tracing::error!(
                            path = %from.display(),
                            moved_to = %to.display(),
                            "corrupt tarball: content does not match its name; moved aside",
                        );
                    }
                    state.metrics.corrupt_tarballs.inc_by(report.quarantined.len() as u64);
                    state.metrics.removed_temp_files.inc_by(report.removed_temp.len() as u64);
                    tracing::info!(
                        verified = report.verified,
                        bytes = report.stored_bytes,
                        corrupt = report.quarantined.len(),
                        "start-up check done; ready",
                    );
                    state.ready.store(true, Ordering::Release);
                }
                accepted = listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Typically out of file descriptors: back off instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    let tcp = WriteTimeout::new(tcp, write_timeout);
                    let service = service.clone();
                    let builder = builder.clone();
                    let watcher = graceful.watcher();
                    match tls.clone() {
                        None => {
                            tokio::spawn(async move {
                                let conn = builder.serve_connection(TokioIo::new(tcp), service);
                                if let Err(e) = watcher.watch(conn.into_owned()).await {
                                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                                }
                            });
                        }
                        Some(acceptor) => {
                            tokio::spawn(async move {
                                let handshake = tokio::time::timeout(header_read_timeout, acceptor.accept(tcp));
                                let stream = match handshake.await {
                                    Ok(Ok(s)) => s,
                                    Ok(Err(e)) => {
                                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                        return;
                                    }
                                    Err(_) => {
                                        tracing::debug!(%peer, "TLS handshake timed out");
                                        return;
                                    }
                                };
                                let conn = builder.serve_connection(TokioIo::new(stream), service);
                                if let Err(e) = watcher.watch(conn.into_owned()).await {
                                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                                }
                            });
                        }
                    }
                }
            }
        }
        drop(listener);
        tracing::info!("shutting down");
        if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the grace period; closing them");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insecure_mode_only_on_loopback() {
        let loopback: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let loopback6: SocketAddr = "[::1]:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(check_listen(loopback, &AuthConfig::Disabled).is_ok());
        assert!(check_listen(loopback6, &AuthConfig::Disabled).is_ok());
        let err = check_listen(any, &AuthConfig::Disabled).unwrap_err();
        assert!(err.to_string().contains("0.0.0.0:8080"), "{err}");
    }
}
