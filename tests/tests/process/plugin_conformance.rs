//! `kubectl bundle plugin check`, the provisioner plugin contract's conformance suite
//! (docs/plugins.md), run as a process: the real `gantry.dev/helm` plugin (plugins/helm) passes
//! every check, and a rogue plugin written here (its render counts, and it takes any token)
//! fails them, so the suite is seen to fail too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use gantry_api::plugin::{CONTRACT, Cluster, Content, Layer, PATH_PREFIX, Release, RenderRequest};
use gantry_tests::e2e::kubectl::{plugin_check, stdout_lines, text};
use gantry_tests::helm_plugin::{
    CALLER_ACCOUNT, CALLER_NAMESPACE, HelmPlugin, chart_archive, ensure_service_account,
};
use gantry_tests::{Pki, control_plane, unique_name};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

const HELM_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";
const HELM_CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";

/// Every check of the suite, in the order it prints them.
const CHECKS: [&str; 10] = [
    "identity",
    "probe",
    "render",
    "render is deterministic",
    "errors have the contract's shape",
    "auth: no token",
    "auth: another audience",
    "auth: another ServiceAccount",
    "auth: garbage token",
    "TLS: verified",
];

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// A chart's files: `Chart.yaml`, `values.yaml` and one ConfigMap template using a value;
/// `template` replaces the template when given.
fn chart_files(name: &str, template: Option<&str>) -> Vec<(&'static str, String)> {
    let configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  chart: {{ .Chart.Name }}\n";
    vec![
        (
            "Chart.yaml",
            format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
        ),
        ("values.yaml", "greeting: hello\n".to_string()),
        (
            "templates/configmap.yaml",
            template.unwrap_or(configmap).to_string(),
        ),
    ]
}

/// A render request for the chart `name` (as `helm push` stores it: a Helm config and one
/// chart layer, with its real digest), with `config` as the values.
fn render_request(name: &str, files: &[(&str, String)], config: serde_json::Value) -> Vec<u8> {
    let b64 = |data: &[u8]| base64::engine::general_purpose::STANDARD.encode(data);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let archive = chart_archive(name, &files);
    let config_blob = serde_json::to_vec(&serde_json::json!({
        "name": name, "version": "0.1.0", "apiVersion": "v2"
    }))
    .unwrap();
    let layer_digest = sha256(&archive);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": { "mediaType": HELM_CONFIG, "digest": sha256(&config_blob), "size": config_blob.len() },
        "layers": [{ "mediaType": HELM_CHART_LAYER, "digest": layer_digest, "size": archive.len() }],
    }))
    .unwrap();
    let request = RenderRequest {
        contract: CONTRACT.into(),
        content: Content {
            media_type: HELM_CONFIG.into(),
            digest: sha256(&manifest),
            layers: vec![Layer {
                media_type: HELM_CHART_LAYER.into(),
                digest: layer_digest,
                data: b64(&archive),
            }],
            config: b64(&config_blob),
        },
        config: config.as_object().cloned().unwrap_or_default(),
        release: Release {
            name: "conformance".into(),
            namespace: "default".into(),
        },
        cluster: Cluster {
            version: "v1.34.1".into(),
            api_versions: vec!["v1".into(), "apps/v1".into(), "apps/v1/Deployment".into()],
        },
    };
    serde_json::to_vec_pretty(&request).unwrap()
}

#[tokio::test]
async fn the_helm_plugin_passes_the_conformance_suite() {
    let plane = control_plane();
    let plugin = HelmPlugin::start(plane)
        .await
        .unwrap_or_else(|e| panic!("starting gantry-helm-plugin: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("render.json");
    let config = serde_json::json!({ "greeting": "hello from the conformance suite" });
    std::fs::write(
        &request,
        render_request("conformance", &chart_files("conformance", None), config),
    )
    .unwrap();
    // A template that does not parse: 422, not retryable.
    let bad = dir.path().join("bad-render.json");
    let broken = chart_files(
        "broken",
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name \ndata: {}\n"),
    );
    std::fs::write(
        &bad,
        render_request("broken", &broken, serde_json::json!({})),
    )
    .unwrap();
    let (request, bad) = (request.display().to_string(), bad.display().to_string());

    let (output, took) = plugin_check(
        plugin.url(),
        plugin.ca_file(),
        &["--request", &request, "--bad-request", &bad],
    );
    let plugin_log = std::fs::read_to_string(plugin.log()).unwrap_or_default();
    assert!(
        output.status.success(),
        "the check failed ({:?}):\n{}\nthe plugin's log:\n{plugin_log}",
        output.status,
        text(&output)
    );
    let lines = stdout_lines(&output);
    let expected: Vec<String> = CHECKS.iter().map(|c| format!("PASS {c}")).collect();
    assert_eq!(lines, expected, "{}", text(&output));
    assert!(
        output.stderr.is_empty(),
        "nothing on stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "kubectl bundle plugin check against gantry-helm-plugin took {took:?}:\n{}",
        text(&output)
    );

    // The ServiceAccount the check made is gone.
    let accounts: Api<ServiceAccount> = Api::namespaced(plane.client().await, CALLER_NAMESPACE);
    assert!(
        accounts
            .get_opt("gantry-plugin-check")
            .await
            .unwrap()
            .is_none(),
        "the check's ServiceAccount is deleted afterwards"
    );

    // A CA that did not sign the plugin's certificate: nothing passes, TLS: verified fails.
    let other = Pki::new("not-the-plugin-s-ca").unwrap();
    let other_ca = dir.path().join("other-ca.crt");
    std::fs::write(&other_ca, other.ca_pem()).unwrap();
    let (output, _) = plugin_check(plugin.url(), &other_ca, &["--request", &request]);
    eprintln!(
        "with a CA that did not sign the plugin's certificate:\n{}",
        text(&output)
    );
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let lines = stdout_lines(&output);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("FAIL TLS: verified: ") && l.contains("certificate")),
        "{}",
        text(&output)
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("PASS ")),
        "{}",
        text(&output)
    );
}

/// What the rogue plugin answers: valid documents, but its render counts the calls, and it
/// never looks at the token.
fn rogue_answer(method: &str, path: &str, renders: &AtomicU64) -> (&'static str, String) {
    let call = path.strip_prefix(PATH_PREFIX).unwrap_or_default();
    match (method, call) {
        ("GET", "/identity") => (
            "200 OK",
            serde_json::json!({
                "contract": "v1", "id": "example.com/rogue", "version": "0.0.1",
                "mediaTypes": [HELM_CONFIG],
            })
            .to_string(),
        ),
        ("GET", "/probe") => ("200 OK", r#"{"ready":true}"#.to_string()),
        ("POST", "/render") => {
            let n = renders.fetch_add(1, Ordering::Relaxed) + 1;
            (
                "200 OK",
                serde_json::json!({ "objects": [{ "object": {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": "rogue" }, "data": { "render": n.to_string() },
                }}]})
                .to_string(),
            )
        }
        _ => (
            "404 Not Found",
            r#"{"error":{"message":"no such call","retryable":false}}"#.to_string(),
        ),
    }
}

/// Serves one connection: one HTTP/1.1 request, answered, then the connection closed.
fn serve_rogue(
    config: Arc<rustls::ServerConfig>,
    tcp: TcpStream,
    renders: &AtomicU64,
) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let connection = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let mut reader = BufReader::new(&mut tls);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let (status, answer) = rogue_answer(&method, &path, renders);
    write!(
        tls,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    )?;
    tls.conn.send_close_notify();
    tls.flush()
}

/// Starts the rogue plugin on `127.0.0.1`: its URL, and its CA (PEM).
fn start_rogue() -> (String, String, Arc<AtomicU64>) {
    gantry_tests::init_crypto();
    let pki = Pki::new("rogue-plugin-ca").unwrap();
    let serving = pki.loopback_server().unwrap();
    let chain = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let renders = Arc::new(AtomicU64::new(0));
    let counted = renders.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming().map_while(Result::ok) {
            let (config, counted) = (config.clone(), counted.clone());
            // A failed connection (the check's one with an unrelated CA) ends its thread.
            std::thread::spawn(move || serve_rogue(config, tcp, &counted));
        }
    });
    (
        format!("https://127.0.0.1:{port}"),
        pki.ca_pem().to_string(),
        renders,
    )
}

#[tokio::test]
async fn a_rogue_plugin_fails_the_conformance_suite() {
    let plane = control_plane();
    // An account of its own: the rogue takes any token, and this test shares no ServiceAccount
    // (nor the check's gantry-plugin-check) with the test of the real plugin.
    let namespace = unique_name("plugin-rogue");
    ensure_service_account(&plane.client().await, &namespace, CALLER_ACCOUNT)
        .await
        .unwrap();
    let (url, ca, renders) = start_rogue();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca).unwrap();
    let request = dir.path().join("render.json");
    std::fs::write(
        &request,
        render_request("rogue", &chart_files("rogue", None), serde_json::json!({})),
    )
    .unwrap();
    let request = request.display().to_string();
    let account = format!("{namespace}/{CALLER_ACCOUNT}");

    let (output, _) = plugin_check(
        &url,
        &ca_file,
        &["--request", &request, "--service-account", &account],
    );
    eprintln!("against the rogue plugin:\n{}", text(&output));
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), CHECKS.len(), "{}", text(&output));
    // Its documents are valid, and it serves TLS with the certificate its CA signed.
    for passed in ["identity", "probe", "render", "TLS: verified"] {
        assert!(
            lines.contains(&format!("PASS {passed}")),
            "{passed}: {}",
            text(&output)
        );
    }
    // Its render counts: the second answer differs from the first.
    let deterministic = lines
        .iter()
        .find(|l| l.starts_with("FAIL render is deterministic: "))
        .unwrap_or_else(|| panic!("no FAIL for determinism: {}", text(&output)));
    assert!(deterministic.contains("different bytes"), "{deterministic}");
    assert!(renders.load(Ordering::Relaxed) >= 2);
    // It takes any token, or none, and answers 200 where an error is due.
    for failed in [
        "errors have the contract's shape",
        "auth: no token",
        "auth: another audience",
        "auth: another ServiceAccount",
        "auth: garbage token",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("FAIL {failed}: "))),
            "{failed}: {}",
            text(&output)
        );
    }
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("6 of 10 checks failed"),
        "{}",
        text(&output)
    );
}
