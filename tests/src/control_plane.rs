//! A real kube-apiserver and etcd on loopback: one shared by the tests of a test binary, and
//! private ones for tests that need a cluster to themselves.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine;
use gantry_rules::conditions::ConditionStatus;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::{HarnessError, IoContext, KubeContext};
use crate::pki::{Pki, service_account_keys};
use crate::process::{
    Lifetime, free_port, free_port_on, require_program, spawn_daemon, state_dir, tail,
    wait_for_port,
};

/// Environment variable naming a directory that holds `kube-apiserver` and `etcd` to use
/// instead of building them with `tools/control-plane/build.sh`.
pub const CONTROL_PLANE_DIR_ENV: &str = "GANTRY_CONTROL_PLANE_DIR";

const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The common name of the API server's front-proxy client certificate, the one name
/// aggregated API servers accept forwarded identities from.
const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// The API server's audit log, in the control plane's directory: one JSON event per line.
const AUDIT_LOG: &str = "audit.log";

/// The response stage only, of: writes of ConfigMaps and Bundles, reads of ConfigMaps, lists
/// of Bundles (a list's completion time and, in its `requestURI`, its label selector: when a
/// shard holds the bundles of its slots) and reads by name of Services and Deployments (who
/// reads workloads again, and when) at level Metadata; nothing else. A Bundle's own writes
/// (not its status's) and writes of Leases also log the object they left: the slot table (the
/// Lease `gantry-shard-slots`) tells which shard owned each slot, and so each bundle, from each
/// of its writes on.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted", "Panic"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch"]
  resources:
  - group: "gantry.dev"
    resources: ["bundles"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["configmaps"]
  - group: "gantry.dev"
    resources: ["bundles", "bundles/status"]
- level: Metadata
  verbs: ["get", "list"]
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
  verbs: ["list"]
  resources:
  - group: "gantry.dev"
    resources: ["bundles"]
- level: Metadata
  verbs: ["get"]
  resources:
  - group: ""
    resources: ["services"]
  - group: "apps"
    resources: ["deployments"]
- level: None
"#;

/// How to start a control plane. The default is the loopback control plane of the API tests:
/// no ServiceAccount admission, Service IPs only allocated, nothing reachable off loopback.
#[derive(Clone, Debug, Default)]
pub struct ControlPlaneOptions {
    /// Serve for a node cluster: bind and advertise on this address (the node's bridge),
    /// with this Service range; ServiceAccount admission on, Node authorization, and a client
    /// certificate for talking to kubelets.
    pub node: Option<NodeServing>,
}

/// Where a node cluster's API server serves.
#[derive(Clone, Debug)]
pub struct NodeServing {
    /// The bridge address the API server binds and advertises (the `kubernetes` endpoint).
    pub address: IpAddr,
    /// The Service range, e.g. `10.213.128.0/24`.
    pub service_cidr: String,
    /// The first address of the Service range (the `kubernetes` Service's ClusterIP).
    pub kubernetes_service_ip: IpAddr,
}

/// A running kube-apiserver + etcd with Gantry's CRDs installed.
pub struct ControlPlane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    pki: Pki,
    /// kube-apiserver and etcd of a private control plane, stopped when it is dropped; empty
    /// for one that lives as long as its [`Lifetime`] says.
    processes: Vec<Child>,
}

/// The control plane shared by every test of this test binary; started on first use.
///
/// Blocks while starting (a few seconds), which is fine from async tests.
pub fn control_plane() -> &'static ControlPlane {
    static SHARED: OnceLock<ControlPlane> = OnceLock::new();
    crate::init_crypto();
    SHARED.get_or_init(|| {
        // A runtime of its own: the callers' runtimes end with their tests.
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a runtime to start the control plane");
            runtime.block_on(ControlPlane::start(&Lifetime::TestBinary))
        })
        .join()
        .expect("the control-plane starter panicked")
        .unwrap_or_else(|e| panic!("starting the control plane: {e}"))
    })
}

impl ControlPlane {
    /// Starts a control plane that lives as long as `lifetime` says (the tests use
    /// [`control_plane`]; the local development environment a detached one).
    pub async fn start(lifetime: &Lifetime) -> Result<Self, HarnessError> {
        Self::start_with(&ControlPlaneOptions::default(), lifetime).await
    }

    /// Starts a control plane as `options` say that lives as long as `lifetime` says.
    pub async fn start_with(
        options: &ControlPlaneOptions,
        lifetime: &Lifetime,
    ) -> Result<Self, HarnessError> {
        Self::start_inner(options, lifetime, false).await
    }

    /// Starts a private control plane, for tests that need a cluster to themselves (a
    /// provisioner that must be the only one, one with flags of its own, or none at all):
    /// kube-apiserver and etcd stop and its state is removed when it is dropped, or when the
    /// test binary exits, whichever comes first. Most tests share [`control_plane`] instead.
    pub async fn start_private() -> Result<Self, HarnessError> {
        Self::start_inner(&ControlPlaneOptions::default(), &Lifetime::TestBinary, true).await
    }

    /// Starts a control plane; `own` keeps its processes, to stop them when it is dropped.
    async fn start_inner(
        options: &ControlPlaneOptions,
        lifetime: &Lifetime,
        own: bool,
    ) -> Result<Self, HarnessError> {
        let binaries = binaries()?;
        let dir = state_dir(lifetime, "control-plane")?;
        let pki = Pki::new("gantry-tests-ca")?;

        // etcd: client and peer listeners on loopback; no fsync, the data is thrown away.
        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_log = dir.join("etcd.log");
        let mut etcd = Command::new(binaries.join("etcd"));
        etcd.arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!(
                "--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"
            ))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"
            ))
            .arg(format!(
                "--initial-cluster=default=http://127.0.0.1:{etcd_peer_port}"
            ))
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn");
        let mut etcd = spawn_daemon(lifetime, etcd, &etcd_log)?;
        // Owned from here on: an error below stops it.
        let mut processes = Owned(Vec::new());
        let waited = wait_for_port("etcd", etcd_port, &mut etcd, &etcd_log, START_TIMEOUT);
        processes.0.push(etcd);
        waited?;

        // kube-apiserver with our own serving certificate, client CA and ServiceAccount keys.
        let pki_dir = dir.join("pki");
        std::fs::create_dir_all(&pki_dir).context(|| format!("creating {}", pki_dir.display()))?;
        let serving = match &options.node {
            None => pki.loopback_server()?,
            Some(node) => pki.server(
                &[
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ],
                &[node.address, node.kubernetes_service_ip],
            )?,
        };
        let (sa_key, sa_pub) = service_account_keys()?;
        let write = |name: &str, contents: &str| -> Result<PathBuf, HarnessError> {
            let path = pki_dir.join(name);
            std::fs::write(&path, contents).context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        let ca_file = write("ca.crt", pki.ca_pem())?;
        let serving_cert = write("apiserver.crt", &serving.cert_pem)?;
        let serving_key = write("apiserver.key", &serving.key_pem)?;
        let sa_key_file = write("sa.key", &sa_key)?;
        let sa_pub_file = write("sa.pub", &sa_pub)?;
        // API aggregation: the API server proxies to aggregated API servers (an APIService's
        // backend) as `front-proxy-client`, a certificate of a CA of its own, and they trust the
        // user and groups it forwards in headers only from that certificate.
        let front_proxy = Pki::new("gantry-tests-front-proxy-ca")?;
        let front_proxy_client = front_proxy.client(FRONT_PROXY_CLIENT, None)?;
        let front_proxy_ca_file = write("front-proxy-ca.crt", front_proxy.ca_pem())?;
        let front_proxy_cert = write("front-proxy-client.crt", &front_proxy_client.cert_pem)?;
        let front_proxy_key = write("front-proxy-client.key", &front_proxy_client.key_pem)?;

        let address = options
            .node
            .as_ref()
            .map_or(IpAddr::from(Ipv4Addr::LOCALHOST), |node| node.address);
        let port = free_port_on(address)?;
        let server = format!("https://{address}:{port}");
        let apiserver_log = dir.join("kube-apiserver.log");
        // Writes are audited (who, with which User-Agent, what, when; Bundles and Leases as
        // written), so a test can tell which provisioner replica wrote what, and whose shard it
        // was then.
        let audit_policy = write("audit-policy.yaml", AUDIT_POLICY)?;
        let mut apiserver = Command::new(binaries.join("kube-apiserver"));
        apiserver
            .arg(format!("--etcd-servers={etcd_url}"))
            .arg(format!(
                "--cert-dir={}",
                dir.join("apiserver-certs").display()
            ))
            .arg(format!("--tls-cert-file={}", serving_cert.display()))
            .arg(format!("--tls-private-key-file={}", serving_key.display()))
            .arg(format!("--client-ca-file={}", ca_file.display()))
            .arg(format!("--secure-port={port}"))
            .arg(format!("--bind-address={address}"))
            .arg(format!("--advertise-address={address}"))
            .arg("--allow-privileged=true")
            .arg(format!(
                "--requestheader-client-ca-file={}",
                front_proxy_ca_file.display()
            ))
            .arg(format!(
                "--requestheader-allowed-names={FRONT_PROXY_CLIENT}"
            ))
            .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
            .arg("--requestheader-group-headers=X-Remote-Group")
            .arg("--requestheader-username-headers=X-Remote-User")
            .arg(format!(
                "--proxy-client-cert-file={}",
                front_proxy_cert.display()
            ))
            .arg(format!(
                "--proxy-client-key-file={}",
                front_proxy_key.display()
            ))
            // An APIService's Service is reached at its endpoint's address (a Pod's, on a node
            // cluster's bridge) rather than at its ClusterIP, which only kube-proxy's rules
            // route: it works with or without kube-proxy on the host.
            .arg("--enable-aggregator-routing=true");
        match &options.node {
            None => {
                apiserver
                    // With a loopback advertise address the endpoint reconciler must stay off.
                    .arg("--endpoint-reconciler-type=none")
                    // Service IPs are only allocated, never routed: no kube-proxy runs here.
                    .arg("--service-cluster-ip-range=127.16.0.0/16")
                    .arg("--authorization-mode=RBAC")
                    .arg("--disable-admission-plugins=ServiceAccount");
            }
            Some(node) => {
                // The API server reaches kubelets (logs, exec, port-forward) by the node's
                // InternalIP with a client certificate of its own.
                let kubelet_client =
                    pki.client("kube-apiserver-kubelet-client", Some("system:masters"))?;
                let kubelet_cert = write("kubelet-client.crt", &kubelet_client.cert_pem)?;
                let kubelet_key = write("kubelet-client.key", &kubelet_client.key_pem)?;
                apiserver
                    .arg(format!("--service-cluster-ip-range={}", node.service_cidr))
                    .arg("--authorization-mode=Node,RBAC")
                    .arg("--enable-admission-plugins=NodeRestriction")
                    .arg(format!(
                        "--kubelet-client-certificate={}",
                        kubelet_cert.display()
                    ))
                    .arg(format!("--kubelet-client-key={}", kubelet_key.display()))
                    .arg("--kubelet-preferred-address-types=InternalIP");
            }
        }
        apiserver
            .arg(format!("--service-account-issuer={server}"))
            .arg(format!(
                "--service-account-key-file={}",
                sa_pub_file.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key_file.display()
            ))
            .arg("--profiling=false")
            .arg(format!("--audit-policy-file={}", audit_policy.display()))
            .arg(format!(
                "--audit-log-path={}",
                dir.join(AUDIT_LOG).display()
            ))
            .arg("--audit-log-maxsize=0")
            .arg("--v=1");
        let apiserver = spawn_daemon(lifetime, apiserver, &apiserver_log)?;
        processes.0.push(apiserver);

        let admin = pki.client("gantry-tests-admin", Some("system:masters"))?;
        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(
            &kubeconfig,
            &server,
            pki.ca_pem(),
            &admin.cert_pem,
            &admin.key_pem,
        )?;

        let mut plane = Self {
            dir,
            kubeconfig,
            server,
            pki,
            processes: Vec::new(),
        };
        let client = plane.try_client().await?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = client
                .request_text(http_get("/readyz").map_err(|e| HarnessError::Other(e.to_string()))?)
                .await;
            match ready {
                Ok(body) if body.trim() == "ok" => break,
                _ => {}
            }
            if let Ok(Some(status)) = processes.0[1].try_wait() {
                return Err(HarnessError::Other(format!(
                    "kube-apiserver exited with {status}; last lines of {}:\n{}",
                    apiserver_log.display(),
                    tail(&apiserver_log, 40)
                )));
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::NotReady {
                    what: "kube-apiserver /readyz".into(),
                    seconds: START_TIMEOUT.as_secs(),
                    log_path: apiserver_log.clone(),
                    log: tail(&apiserver_log, 40),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let crd_dir = crate::workspace_root().join("manifests/crds");
        install_crds(&client, &crd_dir).await?;
        let processes = std::mem::take(&mut processes.0);
        if own {
            plane.processes = processes;
        } else {
            // They live as long as `lifetime` says: the watchdog or `stop_detached` ends them.
            processes.into_iter().for_each(std::mem::forget);
        }
        Ok(plane)
    }

    /// Starts kube-controller-manager for this (loopback) control plane, living as long as
    /// `lifetime` says: every on-by-default controller but those that need a cloud or a Pod
    /// network, as `system:kube-controller-manager` with a ServiceAccount per controller,
    /// signing tokens with the API server's key; serving on loopback. With it, deleted
    /// namespaces finish terminating, the garbage collector runs, and Deployments get
    /// ReplicaSets and Pods (which stay Pending: no scheduler or kubelet runs). Returns its
    /// log file, once it serves.
    pub fn start_controller_manager(&self, lifetime: &Lifetime) -> Result<PathBuf, HarnessError> {
        let binaries = built_tools(
            CONTROL_PLANE_DIR_ENV,
            "tools/control-plane/build.sh",
            &["kube-controller-manager"],
            &["kube-controller-manager"],
        )?;
        let kubeconfig = self.dir.join("kube-controller-manager.kubeconfig");
        self.write_user_kubeconfig(&kubeconfig, "system:kube-controller-manager", None)?;
        let port = free_port()?;
        let log = self.dir.join("kube-controller-manager.log");
        let mut command = Command::new(binaries.join("kube-controller-manager"));
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(
                "--controllers=*,-cloud-node-lifecycle-controller,-node-route-controller,\
                 -service-lb-controller,-node-ipam-controller",
            )
            .arg(format!(
                "--service-account-private-key-file={}",
                self.pki_file("sa.key").display()
            ))
            .arg(format!(
                "--root-ca-file={}",
                self.pki_file("ca.crt").display()
            ))
            .arg("--use-service-account-credentials=true")
            .arg("--service-cluster-ip-range=127.16.0.0/16")
            .arg("--allocate-node-cidrs=false")
            .arg("--v=1");
        let mut child = spawn_daemon(lifetime, command, &log)?;
        let waited = wait_for_port(
            "kube-controller-manager",
            port,
            &mut child,
            &log,
            START_TIMEOUT,
        );
        if waited.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        waited?;
        // It lives as long as `lifetime` says: the watchdog or `stop_detached` ends it.
        std::mem::forget(child);
        Ok(log)
    }

    /// The admin kubeconfig (user in `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:PORT` (a node cluster's: `https://<bridge address>:PORT`).
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// The CA that signed the API server's certificate and verifies client certificates.
    /// The API server's audit log: ConfigMap and Bundle writes, ConfigMap reads, and reads of
    /// Services and Deployments by name, one JSON event per line.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join(AUDIT_LOG)
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// A directory for files that live as long as the control plane.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A file of the control plane's PKI directory: `ca.crt`, `sa.key` (the ServiceAccount
    /// signing key), `sa.pub`.
    pub fn pki_file(&self, name: &str) -> PathBuf {
        self.dir.join("pki").join(name)
    }

    /// Writes a kubeconfig at `path` for user `user` in group `group` (a client certificate
    /// signed by the cluster CA), pointing at this API server.
    pub fn write_user_kubeconfig(
        &self,
        path: &Path,
        user: &str,
        group: Option<&str>,
    ) -> Result<(), HarnessError> {
        let cert = self.pki.client(user, group)?;
        write_kubeconfig(
            path,
            &self.server,
            self.pki.ca_pem(),
            &cert.cert_pem,
            &cert.key_pem,
        )
    }

    /// An admin client. Make one per test: a client belongs to the runtime it was made on.
    pub async fn client(&self) -> Client {
        self.try_client()
            .await
            .unwrap_or_else(|e| panic!("building a client for {}: {e}", self.server))
    }

    async fn try_client(&self) -> Result<Client, HarnessError> {
        crate::init_crypto();
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// `kubectl` pointed at this control plane as admin.
    pub fn kubectl(&self) -> Command {
        let mut kubectl = Command::new("kubectl");
        kubectl.arg("--kubeconfig").arg(&self.kubeconfig);
        kubectl
    }

    /// A token for ServiceAccount `namespace/name` (TokenRequest, valid one hour), creating the
    /// namespace and the ServiceAccount when missing.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.service_account_token_for(namespace, name, &[]).await
    }

    /// Like [`Self::service_account_token`], for the given audiences (none: the API server's).
    pub async fn service_account_token_for(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[&str],
    ) -> String {
        self.try_service_account_token(namespace, name, audiences)
            .await
            .unwrap_or_else(|e| panic!("issuing a token for {namespace}/{name}: {e}"))
    }

    async fn try_service_account_token(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[&str],
    ) -> Result<String, HarnessError> {
        let client = self.try_client().await?;
        let apply = PatchParams::apply("gantry-tests");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace }
        }))
        .map_err(|e| HarnessError::Other(e.to_string()))?;
        namespaces
            .patch(namespace, &apply, &Patch::Apply(&ns))
            .await
            .context(|| format!("creating namespace {namespace}"))?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
        let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": name, "namespace": namespace }
        }))
        .map_err(|e| HarnessError::Other(e.to_string()))?;
        accounts
            .patch(name, &apply, &Patch::Apply(&sa))
            .await
            .context(|| format!("creating ServiceAccount {namespace}/{name}"))?;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600),
                audiences: audiences.iter().map(|a| a.to_string()).collect(),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let issued = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .context(|| format!("requesting a token for ServiceAccount {namespace}/{name}"))?;
        issued
            .status
            .map(|status| status.token)
            .ok_or_else(|| HarnessError::Other("TokenRequest returned no status".into()))
    }

    /// A kubeconfig that authenticates with `token` (e.g. a ServiceAccount's), written next to
    /// the admin kubeconfig under `name`.
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("kubeconfig-{name}"));
        let ca = base64::engine::general_purpose::STANDARD.encode(self.pki.ca_pem());
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gantry-tests\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: gantry-tests\n    user: {name}\ncurrent-context: {name}\n",
            server = self.server
        );
        std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// A client that authenticates with `token`.
    pub async fn token_client(&self, name: &str, token: &str) -> Client {
        let path = self.token_kubeconfig(name, token);
        client_from_kubeconfig(&path)
            .await
            .unwrap_or_else(|e| panic!("building a client from {}: {e}", path.display()))
    }
}

impl Drop for ControlPlane {
    /// Stops a private control plane (a shared or detached one has no processes here) and
    /// removes its state.
    fn drop(&mut self) {
        if self.processes.is_empty() {
            return;
        }
        // The API server first: it would only complain about etcd going.
        for process in self.processes.iter_mut().rev() {
            let _ = process.kill();
            let _ = process.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Processes of a control plane being started: stopped if it fails to start.
struct Owned(Vec<Child>);

impl Drop for Owned {
    fn drop(&mut self) {
        for process in self.0.iter_mut().rev() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

/// Where the control-plane binaries are: `$GANTRY_CONTROL_PLANE_DIR`, or what
/// `tools/control-plane/build.sh` prints (it builds them once and caches them).
fn binaries() -> Result<PathBuf, HarnessError> {
    built_tools(
        CONTROL_PLANE_DIR_ENV,
        "tools/control-plane/build.sh",
        &[],
        &["kube-apiserver", "etcd"],
    )
}

/// Where the binaries `needed` are: the directory `$env` names (it must hold each of them),
/// or the one `script args...` prints (the script builds them once and caches them).
pub(crate) fn built_tools(
    env: &str,
    script: &str,
    args: &[&str],
    needed: &[&str],
) -> Result<PathBuf, HarnessError> {
    if let Some(dir) = std::env::var_os(env) {
        let dir = PathBuf::from(dir);
        for binary in needed {
            if !dir.join(binary).is_file() {
                return Err(HarnessError::Other(format!(
                    "{env}={} has no {binary} (`{script} {}` builds it)",
                    dir.display(),
                    args.join(" ")
                )));
            }
        }
        return Ok(dir);
    }
    require_program("go", "golang-go")?;
    let script = crate::workspace_root().join(script);
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        return Err(HarnessError::Other(format!(
            "{} failed ({}):\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
    ))
}

pub(crate) fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(), HarnessError> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gantry-tests\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: gantry-tests\n  context:\n    cluster: gantry-tests\n    user: admin\ncurrent-context: gantry-tests\n",
        ca = b64(ca_pem),
        cert = b64(cert_pem),
        key = b64(key_pem),
    );
    std::fs::write(path, yaml).context(|| format!("writing {}", path.display()))
}

pub(crate) async fn client_from_kubeconfig(path: &Path) -> Result<Client, HarnessError> {
    let kubeconfig = Kubeconfig::read_from(path)
        .map_err(|e| HarnessError::Other(format!("reading {}: {e}", path.display())))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| HarnessError::Other(format!("loading {}: {e}", path.display())))?;
    Client::try_from(config).context(|| format!("building a client from {}", path.display()))
}

fn http_get(path: &str) -> Result<http::Request<Vec<u8>>, http::Error> {
    http::Request::get(path).body(Vec::new())
}

/// Applies every CRD under `dir`, then waits until each is established and served.
async fn install_crds(client: &Client, dir: &Path) -> Result<(), HarnessError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let apply = PatchParams::apply("gantry-tests").force();
    for file in files {
        let text =
            std::fs::read_to_string(&file).context(|| format!("reading {}", file.display()))?;
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .map_err(|e| HarnessError::Other(format!("parsing {}: {e}", file.display())))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &apply, &Patch::Apply(&crd))
            .await
            .context(|| format!("applying CRD {name} from {}", file.display()))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if crd_served(client, &crds, &name).await {
                break;
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Other(format!(
                    "CRD {name} was not established and served within {}s",
                    START_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

async fn crd_served(client: &Client, crds: &Api<CustomResourceDefinition>, name: &str) -> bool {
    let Ok(crd) = crds.get(name).await else {
        return false;
    };
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == ConditionStatus::True)
        });
    if !established {
        return false;
    }
    // Established is not yet served everywhere: list every version to be sure.
    for version in crd.spec.versions.iter().filter(|v| v.served) {
        let resource = ApiResource {
            group: crd.spec.group.clone(),
            version: version.name.clone(),
            api_version: format!("{}/{}", crd.spec.group, version.name),
            kind: crd.spec.names.kind.clone(),
            plural: crd.spec.names.plural.clone(),
        };
        let api: Api<DynamicObject> = if crd.spec.scope == "Namespaced" {
            Api::default_namespaced_with(client.clone(), &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        if api.list(&ListParams::default().limit(1)).await.is_err() {
            return false;
        }
    }
    true
}
