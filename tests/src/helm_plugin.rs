//! The provisioner plugin `gantry.dev/helm` (`plugins/helm`, Go, built by
//! `plugins/helm/build.sh`) as a process on loopback, with a serving certificate of a CA of its
//! own and the control plane to review tokens with; and Helm chart archives built in memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::ControlPlane;
use crate::control_plane::built_tools;
use crate::error::{HarnessError, IoContext, KubeContext};
use crate::pki::Pki;
use crate::process::{Lifetime, free_port, spawn_daemon, state_dir, wait_for_port};

/// Names a directory holding a `gantry-helm-plugin` binary (skips the build).
pub const HELM_PLUGIN_DIR_ENV: &str = "GANTRY_HELM_PLUGIN_DIR";

/// The namespace and the ServiceAccount whose tokens the plugin accepts, as the plugin's
/// defaults (and docs/plugins.md) name them.
pub const CALLER_NAMESPACE: &str = "gantry-system";
pub const CALLER_ACCOUNT: &str = "gantry-provisioner";

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The `gantry-helm-plugin` binary: from `GANTRY_HELM_PLUGIN_DIR`, else built (once, then
/// cached) by `plugins/helm/build.sh`. Fails the test, naming both, when neither gives one.
pub fn helm_plugin_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        built_tools(
            HELM_PLUGIN_DIR_ENV,
            "plugins/helm/build.sh",
            &[],
            &["gantry-helm-plugin"],
        )
        .unwrap_or_else(|e| panic!("the gantry-helm-plugin binary is needed: {e}"))
        .join("gantry-helm-plugin")
    })
}

/// Creates namespace `namespace` and ServiceAccount `namespace/name` when missing.
pub async fn ensure_service_account(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(), HarnessError> {
    let apply = PatchParams::apply("gantry-tests");
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace }
    }))
    .map_err(|e| HarnessError::Other(e.to_string()))?;
    Api::<Namespace>::all(client.clone())
        .patch(namespace, &apply, &Patch::Apply(&ns))
        .await
        .context(|| format!("creating namespace {namespace}"))?;
    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": { "name": name, "namespace": namespace }
    }))
    .map_err(|e| HarnessError::Other(e.to_string()))?;
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(name, &apply, &Patch::Apply(&sa))
        .await
        .context(|| format!("creating ServiceAccount {namespace}/{name}"))?;
    Ok(())
}

/// A running `gantry-helm-plugin` on `127.0.0.1`, accepting the tokens of
/// `gantry-system/gantry-provisioner` for the contract's audience, reviewed by the control
/// plane it was started for. Dropping it stops the process.
pub struct HelmPlugin {
    url: String,
    ca_file: PathBuf,
    log: PathBuf,
    process: Child,
}

impl HelmPlugin {
    /// Starts the plugin for `plane` (its admin kubeconfig sends the TokenReviews), creating
    /// the caller's namespace and ServiceAccount when missing, and waits until it accepts
    /// connections.
    pub async fn start(plane: &ControlPlane) -> Result<Self, HarnessError> {
        let binary = helm_plugin_binary();
        let client = plane.client().await;
        ensure_service_account(&client, CALLER_NAMESPACE, CALLER_ACCOUNT).await?;

        let dir = state_dir(&Lifetime::TestBinary, "helm-plugin")?;
        let pki = Pki::new("gantry-helm-plugin-ca")?;
        let serving = pki.loopback_server()?;
        let write = |name: &str, contents: &str| -> Result<PathBuf, HarnessError> {
            let path = dir.join(name);
            std::fs::write(&path, contents).context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        let ca_file = write("ca.crt", pki.ca_pem())?;
        let cert_file = write("tls.crt", &serving.cert_pem)?;
        let key_file = write("tls.key", &serving.key_pem)?;

        let port = free_port()?;
        let log = dir.join("gantry-helm-plugin.log");
        let mut command = Command::new(binary);
        command
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--tls-cert-file={}", cert_file.display()))
            .arg(format!("--tls-key-file={}", key_file.display()))
            .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
            .arg(format!("--audience={}", gantry_api::plugin::TOKEN_AUDIENCE))
            .arg(format!(
                "--allowed-user=system:serviceaccount:{CALLER_NAMESPACE}:{CALLER_ACCOUNT}"
            ));
        let mut process = spawn_daemon(&Lifetime::TestBinary, command, &log)?;
        let waited = wait_for_port(
            "gantry-helm-plugin",
            port,
            &mut process,
            &log,
            START_TIMEOUT,
        );
        if waited.is_err() {
            let _ = process.kill();
            let _ = process.wait();
        }
        waited?;
        Ok(Self {
            url: format!("https://127.0.0.1:{port}"),
            ca_file,
            log,
            process,
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA (PEM) that signed the plugin's serving certificate.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// The plugin's log (its standard output and error).
    pub fn log(&self) -> &Path {
        &self.log
    }
}

impl Drop for HelmPlugin {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A Helm chart archive (`.tgz`, as `helm package` makes and `helm push` uploads): the
/// `files` (path in the chart, content) under the directory `chart`, in a ustar archive,
/// gzipped. Deterministic: owner root, mode 0644, mtime 0, the deflate stream stored.
pub fn chart_archive(chart: &str, files: &[(&str, &str)]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (path, content) in files {
        let name = format!("{chart}/{path}");
        tar.extend_from_slice(&ustar_header(&name, content.len()));
        tar.extend_from_slice(content.as_bytes());
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    // The end of the archive: two empty blocks.
    tar.resize(tar.len() + 1024, 0);
    gzip_stored(&tar)
}

/// The 512-byte ustar header of a regular file.
fn ustar_header(name: &str, size: usize) -> [u8; 512] {
    assert!(name.len() <= 100, "{name}: longer than a ustar name can be");
    let mut header = [0u8; 512];
    let mut put = |offset: usize, bytes: &[u8]| {
        header[offset..offset + bytes.len()].copy_from_slice(bytes);
    };
    put(0, name.as_bytes());
    put(100, b"0000644\0");
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    put(136, b"00000000000\0");
    put(156, b"0");
    put(257, b"ustar\0");
    put(263, b"00");
    put(265, b"root");
    put(297, b"root");
    // The checksum is computed with its own field as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    header
}

/// `data` as a gzip member whose deflate stream is made of stored (uncompressed) blocks: valid
/// gzip for every reader, with no compressor needed.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    // ID1 ID2, deflate, no flags, mtime 0, no extra flags, OS unknown.
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let mut chunks = data.chunks(0xffff).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        // BFINAL on the last block, BTYPE 00 (stored); the rest of the byte is padding.
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// CRC-32 (IEEE 802.3, reflected), as gzip's trailer holds it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The provisioner's token for plugins (its ServiceAccount's, for the plugins' audience),
/// written where `--plugin-token-file` reads it.
pub async fn write_plugin_token(client: &Client, path: &Path) {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    ensure_service_account(client, CALLER_NAMESPACE, CALLER_ACCOUNT)
        .await
        .unwrap();
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![gantry_api::plugin::TOKEN_AUDIENCE.into()],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), CALLER_NAMESPACE)
        .create_token_request(CALLER_ACCOUNT, &Default::default(), &request)
        .await
        .expect("a token for plugins")
        .status
        .expect("the token request's status")
        .token;
    std::fs::write(path, token).unwrap();
}

/// Registers `plugin` for `gantry.dev/helm` (a Service in the provisioner's namespace reaching
/// it on localhost, its CA in a Secret) and waits until the class `helm` serving it is
/// Accepted.
pub async fn register_helm(client: &Client, plugin: &HelmPlugin) {
    use crate::e2e::{NAMESPACE, apply_class, apply_object, class_spec};
    use gantry_api::conditions::types;
    use gantry_api::plugin::{CA_ANNOTATION, PLUGIN_LABEL, PROVISIONER_ANNOTATION};
    use gantry_api::{ApprovalPolicy, ProvisionerClass, ProvisionerClassSpec};
    use k8s_openapi::api::core::v1::{Secret, Service};
    use serde_json::json;

    let port: u16 = plugin.url().rsplit(':').next().unwrap().parse().unwrap();
    let ca = std::fs::read_to_string(plugin.ca_file()).unwrap();
    apply_object::<Secret>(
        client,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": "helm-plugin-ca", "namespace": NAMESPACE },
            "stringData": { "ca.crt": ca },
        }),
    )
    .await;
    apply_object::<Service>(
        client,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "helm-plugin", "namespace": NAMESPACE,
                "labels": { PLUGIN_LABEL: "true" },
                "annotations": {
                    PROVISIONER_ANNOTATION: "gantry.dev/helm",
                    CA_ANNOTATION: "helm-plugin-ca",
                },
            },
            "spec": {
                "type": "ExternalName", "externalName": "localhost",
                "ports": [{ "name": "https", "port": port }],
            },
        }),
    )
    .await;
    let spec = ProvisionerClassSpec {
        provisioner: "gantry.dev/helm".into(),
        ..class_spec(ApprovalPolicy::Automatic)
    };
    apply_class(client, "helm", spec, false).await;
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    crate::wait_until("class helm Accepted", Duration::from_secs(60), || {
        let classes = classes.clone();
        async move {
            let class = classes.get("helm").await.ok()?;
            gantry_rules::conditions::is_true(&class.status?.conditions, types::ACCEPTED)
                .then_some(())
        }
    })
    .await;
}

/// A provisioner of its own on `plane` with a token for plugins (kept in `work`), `flags` and
/// short resolve and backoff intervals, and a Helm plugin registered for it (the class `helm`,
/// Accepted): what the tests of rendered charts start with.
pub async fn gantry_with_helm_plugin(
    plane: &ControlPlane,
    work: &Path,
    flags: &[&str],
) -> (crate::e2e::Gantry, HelmPlugin) {
    let client = plane.client().await;
    let token_file = work.join("plugin-token");
    write_plugin_token(&client, &token_file).await;
    let token_flag = format!("--plugin-token-file={}", token_file.display());
    let mut args = vec![
        "--resolve-interval=1s",
        "--backoff-base=200ms",
        "--backoff-cap=2s",
        &token_flag,
    ];
    args.extend_from_slice(flags);
    let gantry = crate::e2e::start_gantry(plane, &args);
    let plugin = HelmPlugin::start(plane)
        .await
        .expect("starting gantry-helm-plugin");
    register_helm(&client, &plugin).await;
    (gantry, plugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_gzip_s() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn archives_are_ustar_in_stored_gzip() {
        let archive = chart_archive("c", &[("Chart.yaml", "name: c\n")]);
        assert_eq!(&archive[..3], &[0x1f, 0x8b, 8]);
        // One final stored block holding the whole tar: header, content block, end blocks.
        assert_eq!(archive[10], 1);
        let len = u16::from_le_bytes([archive[11], archive[12]]) as usize;
        assert_eq!(len, 512 * 4);
        let tar = &archive[15..15 + len];
        assert_eq!(&tar[..12], b"c/Chart.yaml");
        assert_eq!(&tar[257..263], b"ustar\0");
        assert_eq!(&tar[512..520], b"name: c\n");
        let trailer = &archive[15 + len..];
        assert_eq!(trailer[..4], crc32(tar).to_le_bytes());
        assert_eq!(trailer[4..], (len as u32).to_le_bytes());
        // Blocks of at most 65535 bytes.
        let big = "x".repeat(70_000);
        let archive = chart_archive("c", &[("big", &big)]);
        assert_eq!(archive[10], 0, "not the final block");
        assert_eq!(u16::from_le_bytes([archive[11], archive[12]]), 0xffff);
    }
}
