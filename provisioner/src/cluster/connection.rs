//! The HTTP client under the provisioner's Kubernetes clients: it offers HTTP/2 by ALPN, as
//! client-go does, so that every request of a client shares one connection.
//!
//! kube's own client speaks HTTP/1.1 only, where each request in flight holds a TLS connection
//! of its own with its buffers: at 16 passes of 16 applies that was 38 % of a replica's live
//! heap, and it does not divide by the number of replicas (docs/benchmarks.md, "What a
//! replica's memory is made of"). An API server that answers `http/1.1` gets HTTP/1.1, as
//! before; so does a configuration with a proxy, which kube's own stack handles.
//!
//! The layers are kube's, in kube's order (base URI, retries, authentication, extra headers);
//! only the connector and the pool differ.

use std::pin::Pin;
use std::time::Duration;

use http::{Request, Response};

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::Builder;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioTimer;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody, RustlsTlsError};
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// How long an HTTP/2 connection may stay silent before it is pinged, and how long the ping's
/// answer may take before the connection counts as dead (client-go's `ReadIdleTimeout` and
/// `PingTimeout`). Without them a connection cut off without a reset would hold every request
/// of the client, watches included, until the read timeout.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// kube's boxed service stack, which [`ClientBuilder::with_layer`] wraps further.
pub type Stack = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// A client builder for `config` whose connections are spawned on `executor`.
pub fn client_builder<E>(
    config: kube::Config,
    executor: E,
) -> Result<ClientBuilder<Stack>, kube::Error>
where
    E: hyper::rt::Executor<Pin<Box<dyn Future<Output = ()> + Send>>>
        + Send
        + Sync
        + Clone
        + 'static,
{
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from((config, executor));
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut https = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|e| kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(e)))?;
        https = https.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let mut connector = TimeoutConnector::new(https.enable_all_versions().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool: hyper_util::client::legacy::Client<_, Body> = Builder::new(executor)
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(pool)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, body_error)) as Box<DynBody>
            })
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// A response body cut off because its HTTP/2 connection ended (the API server's process
/// died, a proxy dropped it) is reported as the end of the stream, `UnexpectedEof`, as it is
/// over HTTP/1.1. kube ends a watch on that error and resumes it from the last resource
/// version; h2 hides the connection's I/O error from the chain kube inspects, so without this a
/// watch stayed on its dead stream and the store stopped changing.
fn body_error(error: hyper::Error) -> BoxError {
    if connection_ended(&error) {
        Box::new(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            error,
        ))
    } else {
        Box::new(error)
    }
}

fn connection_ended(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(error) = source {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return h2.is_io() || h2.is_go_away();
        }
        source = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use gantry_tests::Pki;
    use http::Version;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::net::TcpListener;
    use tokio::sync::Barrier;

    use crate::sharding::fence::{Fence, ReplicaLayer};

    /// Requests in flight at once: the server answers none of them until all have arrived, so
    /// a client that gives each its own connection (HTTP/1.1) opens this many.
    const IN_FLIGHT: usize = 16;

    /// What the server saw: each request's connection (numbered as accepted) and version.
    /// Connections that carried no request do not count: a client that does not know yet
    /// whether the server speaks HTTP/2 may open several at once, keep the first that
    /// negotiates `h2` and close the others after their handshake.
    struct Seen {
        connections: AtomicUsize,
        requests: Mutex<Vec<(usize, Version)>>,
    }

    impl Seen {
        fn versions(&self) -> Vec<Version> {
            self.requests.lock().unwrap().iter().map(|r| r.1).collect()
        }

        fn connections_used(&self) -> usize {
            let requests = self.requests.lock().unwrap();
            let used: std::collections::BTreeSet<usize> = requests.iter().map(|r| r.0).collect();
            used.len()
        }
    }

    /// A loopback listener, the TLS acceptor for it (offering `alpn`) and its URL.
    async fn listen(pki: &Pki, alpn: &[&[u8]]) -> (TcpListener, tokio_rustls::TlsAcceptor, String) {
        let issued = pki.loopback_server().expect("serving certificate");
        let certs = vec![CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        (listener, acceptor, url)
    }

    /// The provisioner's client for `url`, trusting `pki`'s CA.
    fn client(pki: &Pki, url: &str) -> kube::Client {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![
            CertificateDer::from_pem_slice(pki.ca_pem().as_bytes())
                .unwrap()
                .to_vec(),
        ]);
        ReplicaLayer::new(Fence::open(), "test")
            .client(config)
            .expect("client")
    }

    /// A TLS server on loopback that offers `h2` and `http/1.1` by ALPN, as kube-apiserver does.
    async fn server(pki: &Pki, alpn: &[&[u8]]) -> (String, Arc<Seen>) {
        let (listener, acceptor, url) = listen(pki, alpn).await;
        let seen = Arc::new(Seen {
            connections: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let barrier = Arc::new(Barrier::new(IN_FLIGHT));
        let state = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let connection = state.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, state, barrier) = (acceptor.clone(), state.clone(), barrier.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request: http::Request<_>| {
                        let (state, barrier) = (state.clone(), barrier.clone());
                        async move {
                            let seen = (connection, request.version());
                            state.requests.lock().unwrap().push(seen);
                            barrier.wait().await;
                            Ok::<_, std::convert::Infallible>(http::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(b"{}")),
                            ))
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        (url, seen)
    }

    async fn send_at_once(pki: &Pki, url: &str) {
        let client = client(pki, url);
        let requests = (0..IN_FLIGHT).map(|_| {
            let client = client.clone();
            async move {
                client
                    .request_text(http::Request::get("/version").body(Vec::new()).unwrap())
                    .await
            }
        });
        let answers =
            tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(requests))
                .await
                .expect("all requests answered");
        for answer in answers {
            answer.expect("answer");
        }
    }

    #[tokio::test]
    async fn requests_in_flight_share_one_http2_connection() {
        let pki = Pki::new("connection-test").unwrap();
        let (url, seen) = server(&pki, &[b"h2", b"http/1.1"]).await;
        send_at_once(&pki, &url).await;
        assert_eq!(seen.versions(), vec![Version::HTTP_2; IN_FLIGHT]);
        assert_eq!(seen.connections_used(), 1);
    }

    #[tokio::test]
    async fn a_server_without_http2_gets_http1() {
        let pki = Pki::new("connection-test").unwrap();
        let (url, seen) = server(&pki, &[b"http/1.1"]).await;
        send_at_once(&pki, &url).await;
        assert_eq!(seen.versions(), vec![Version::HTTP_11; IN_FLIGHT]);
        assert_eq!(seen.connections_used(), IN_FLIGHT);
    }
    /// A watch whose HTTP/2 connection is cut (the API server killed: no TLS close_notify) ends
    /// quietly and is resumed from its resource version on a new connection, as over HTTP/1.1.
    #[tokio::test]
    async fn a_watch_cut_with_its_connection_resumes() {
        use futures::StreamExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::{WatchStreamExt, watcher};

        let pki = Pki::new("connection-test").unwrap();
        let (listener, acceptor, url) = listen(&pki, &[b"h2", b"http/1.1"]).await;
        // The resource versions the watches asked for, in order.
        let watches = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = watches.clone();
        tokio::spawn(async move {
            let mut served = 0usize;
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                served += 1;
                // The first connection is cut 300 ms after its first watch began.
                let cut = served == 1;
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                let (cut_tx, cut_rx) = tokio::sync::oneshot::channel::<()>();
                let cut_tx = Arc::new(Mutex::new(Some(cut_tx)));
                let connection = tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request: http::Request<_>| {
                        let (seen, cut_tx) = (seen.clone(), cut_tx.clone());
                        async move {
                            let query = request.uri().query().unwrap_or_default().to_string();
                            let version = query
                                .split('&')
                                .find_map(|p| p.strip_prefix("resourceVersion="))
                                .unwrap_or_default()
                                .to_string();
                            let body = if query.contains("watch=true") {
                                seen.lock().unwrap().push(version.clone());
                                if let Some(tx) = cut_tx.lock().unwrap().take() {
                                    let _ = tx.send(());
                                }
                                let next: u64 = version.parse::<u64>().unwrap_or(0) + 1;
                                let event = format!(
                                    "{{\"type\":\"ADDED\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c{next}\",\"namespace\":\"n\",\"resourceVersion\":\"{next}\"}}}}}}\n"
                                );
                                // One event and the start of another, then the stream
                                // stays open.
                                let partial = event[..event.len() / 2].to_string();
                                let stream = futures::stream::iter([event, partial].map(|chunk| {
                                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                        bytes::Bytes::from(chunk),
                                    ))
                                }))
                                .chain(futures::stream::pending());
                                http_body_util::Either::Left(http_body_util::StreamBody::new(
                                    stream,
                                ))
                            } else {
                                http_body_util::Either::Right(http_body_util::Full::new(
                                    bytes::Bytes::from_static(
                                        br#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":[]}"#,
                                    ),
                                ))
                            };
                            Ok::<_, std::convert::Infallible>(http::Response::new(body))
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
                if cut {
                    tokio::spawn(async move {
                        if cut_rx.await.is_ok() {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            // Dropping the task drops the TLS stream: a TCP close without
                            // close_notify, as when the API server's process dies.
                            connection.abort();
                        }
                    });
                }
            }
        });

        let client = client(&pki, &url);
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "n");
        let errors = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut names = std::pin::pin!(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .filter_map(|r| {
                    let errors = errors.clone();
                    async move {
                        if let Err(e) = &r {
                            errors.lock().unwrap().push(e.to_string());
                        }
                        r.ok()
                    }
                })
        );
        let mut received = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while received.len() < 2 {
            match tokio::time::timeout_at(deadline, names.next()).await {
                Ok(Some(cm)) => received.push(kube::ResourceExt::name_any(&cm)),
                _ => break,
            }
        }
        assert_eq!(
            received,
            ["c2", "c3"],
            "the watch resumes after its connection is cut; watches asked for {:?}",
            watches.lock().unwrap()
        );
        assert_eq!(watches.lock().unwrap()[..2], ["1", "2"]);
        // The cut is the end of the stream, not a read error that leaves the watch on it.
        assert_eq!(*errors.lock().unwrap(), Vec::<String>::new());
    }
}
