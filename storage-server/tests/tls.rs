//! TLS with a certificate and key from files.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn serves_https_with_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = gantry_tests::Pki::new("storage-test-ca").unwrap();
    let issued = pki.loopback_server().unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    let root = dir.path().join("root");
    let server = Server::start(
        &root,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let data = content(2048, 50);
    std::fs::create_dir_all(root.join("demo")).unwrap();
    std::fs::write(
        root.join("demo")
            .join(format!("{}.tar.gz", sha256_hex(&data))),
        &data,
    )
    .unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));

    let get = |path: String| {
        let connector = connector.clone();
        let addr = server.addr;
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from("127.0.0.1").unwrap();
            let tls = connector.connect(name, tcp).await.expect("TLS handshake");
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .unwrap();
            tokio::spawn(conn);
            let req = Request::get(path)
                .header("host", "127.0.0.1")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = sender.send_request(req).await.unwrap();
            let status = resp.status();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, body)
        }
    };

    // Poll readiness over TLS: the start-up check runs after the listener is bound.
    gantry_tests::wait_until("readiness over TLS", START_TIMEOUT, || async move {
        (get("/readyz".into()).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    let (status, body) = get(tarball_path("demo", &data)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], &data[..]);

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tcp.read_to_end(&mut buf).await;
    assert!(
        !buf.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
}
