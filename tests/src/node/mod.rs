//! A real single-node Kubernetes cluster made of processes on this machine, as Kubernetes'
//! `hack/local-up-cluster.sh` starts one: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler, containerd, the kubelet, kube-proxy and CoreDNS, with a registry the node
//! pulls from.
//!
//! Addresses: loopback, plus the pod range and the Service range on a bridge the harness
//! creates. Whatever pods send elsewhere is dropped, nothing is masqueraded, CoreDNS forwards
//! nothing: no packet leaves the machine. Only one node cluster can run on a machine (the
//! bridge, the ranges and the iptables chain are fixed); a lock under [`HOST_STATE`] says so.
//!
//! Needs root and the Debian packages `.ci/run` installs (containerd, runc,
//! containernetworking-plugins, iptables, conntrack, umoci, skopeo, docker-registry,
//! busybox-static, gcc), and builds the Kubernetes components and CoreDNS from their Go modules
//! on first use (cached under `~/.cache/gantry`).

mod components;
mod host;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gantry_rules::conditions::ConditionStatus;
use k8s_openapi::api::core::v1::{Namespace, Node, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::control_plane::{
    CONTROL_PLANE_DIR_ENV, ControlPlane, ControlPlaneOptions, NodeServing, built_tools,
};
use crate::error::{HarnessError, IoContext, KubeContext};
use crate::oci_image::{ImageConfig, push_busybox_image, push_pause_image, push_rootfs};
use crate::process::{Lifetime, require_program, stop_groups};
use crate::registry::{Registry, RegistryOptions};
use components::{Kubeconfigs, Layout};
pub use host::{HOST_STATE, KEEP_LOGS_ENV};

/// The pod range; the bridge holds its first address.
pub const POD_CIDR: &str = "10.213.0.0/24";
const POD_PREFIX: &str = "24";
/// The bridge's address: the pods' gateway, the node's InternalIP, and where the API server,
/// the registry, the kubelet and CoreDNS listen.
pub const BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
/// The Service range (routed to the bridge, served by kube-proxy).
pub const SERVICE_CIDR: &str = "10.213.128.0/24";
/// The `kubernetes` Service's ClusterIP.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 128, 1);
/// The cluster DNS Service's ClusterIP (`kube-system/kube-dns`).
pub const DNS_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 128, 10);
/// The cluster's DNS domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The name of the one node.
pub const NODE_NAME: &str = "gantry-node";
/// The Linux bridge the harness creates for the pods.
pub const BRIDGE: &str = "gantry0";
const CNI_NETWORK: &str = "gantry-node";
/// The iptables chain (filter table) that drops pod traffic to anything off the bridge.
pub const DROP_CHAIN: &str = "GANTRY-NODE";

/// Environment variable naming a directory holding a `coredns` binary to use instead of
/// building it with `tools/coredns/build.sh`.
pub const COREDNS_DIR_ENV: &str = "GANTRY_COREDNS_DIR";

const NODE_BINARIES: [&str; 6] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
];

/// How long the node gets to register and become Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running single-node cluster.
pub struct NodeCluster {
    plane: ControlPlane,
    registry: Registry,
    node_dir: PathBuf,
    busybox: String,
    pause: String,
}

/// The node cluster shared by every test of this test binary; started on first use (about
/// half a minute once the binaries are built) and torn down when the test binary exits.
///
/// Blocks while starting, which is fine from async tests. Panics when the cluster cannot
/// start (not root, a package missing, another cluster running on the machine).
pub fn node_cluster() -> &'static NodeCluster {
    // A failed start is kept too: every test of the binary fails at once with its reason.
    static SHARED: OnceLock<Result<NodeCluster, String>> = OnceLock::new();
    crate::init_crypto();
    SHARED
        .get_or_init(|| {
            // A runtime of its own: the callers' runtimes end with their tests.
            std::thread::spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("building a runtime to start the node cluster");
                runtime.block_on(NodeCluster::start(&Lifetime::TestBinary))
            })
            .join()
            .map_err(|_| "the node-cluster starter panicked".to_string())?
            .map_err(|e| e.to_string())
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("starting the node cluster: {e}"))
}

impl NodeCluster {
    /// Starts a node cluster that lives as long as `lifetime` says (the tests use
    /// [`node_cluster`]; `gantry-dev up --node` a detached one, stopped by
    /// [`NodeCluster::stop_detached`]). Removes what a crashed earlier cluster left first.
    pub async fn start(lifetime: &Lifetime) -> Result<Self, HarnessError> {
        check_prerequisites()?;
        let binaries = built_tools(
            CONTROL_PLANE_DIR_ENV,
            "tools/control-plane/build.sh",
            &["node"],
            &NODE_BINARIES,
        )?;
        let coredns = built_tools(COREDNS_DIR_ENV, "tools/coredns/build.sh", &[], &["coredns"])?;

        let (node_dir, owner) = match lifetime {
            Lifetime::TestBinary => {
                // Not registered with the watchdog's directory removal: the clean-up script
                // removes it once everything mounted below it is unmounted.
                let dir = tempfile::Builder::new()
                    .prefix("gantry-node-")
                    .tempdir()
                    .context(|| "creating the node's directory".into())?
                    .keep();
                (dir, format!("test binary, process {}", std::process::id()))
            }
            Lifetime::Detached(root) => (
                root.join("node"),
                format!("{}, state in {}", host::DETACHED_OWNER, root.display()),
            ),
        };
        let layout = Layout {
            dir: node_dir.clone(),
        };
        layout.create()?;
        if let Err(e) = host::take_machine(lifetime, &owner, &layout.logs()) {
            // Nothing of this cluster exists yet but its directory.
            let _ = std::fs::remove_dir_all(&node_dir);
            return Err(e);
        }
        let run_id = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        host::install_cleanup(
            &host::CleanupPlan {
                run_id: &run_id,
                node_dir: &node_dir,
                kube_proxy: &binaries.join("kube-proxy"),
            },
            lifetime,
        )?;
        host::create_network()?;

        let plane = ControlPlane::start_with(
            &ControlPlaneOptions {
                node: Some(NodeServing {
                    address: BRIDGE_IP.into(),
                    service_cidr: SERVICE_CIDR.into(),
                    kubernetes_service_ip: KUBERNETES_SERVICE_IP.into(),
                }),
            },
            lifetime,
        )
        .await?;
        let registry = Registry::start_on(RegistryOptions::default(), BRIDGE_IP.into(), lifetime)?;
        let images = node_dir.join("images");
        std::fs::create_dir_all(&images).context(|| format!("creating {}", images.display()))?;
        let pause = push_pause_image(registry.host(), &images)?;
        let busybox = push_busybox_image(registry.host(), &images)?;

        components::start_containerd(&layout, lifetime, registry.host(), &pause)?;
        let kubeconfigs = Kubeconfigs::write(&layout, &plane)?;
        let started = [
            components::start_controller_manager(
                &layout,
                lifetime,
                &binaries,
                &plane,
                &kubeconfigs.controller_manager,
            )?,
            components::start_scheduler(&layout, lifetime, &binaries, &kubeconfigs.scheduler)?,
            components::start_kubelet(&layout, lifetime, &binaries, &plane, &kubeconfigs.kubelet)?,
            components::start_proxy(&layout, lifetime, &binaries, &kubeconfigs.proxy)?,
        ];
        let (dns, dns_port) =
            components::start_coredns(&layout, lifetime, &coredns, &kubeconfigs.coredns)?;
        for component in started {
            component.wait()?;
        }
        dns.wait()?;

        let cluster = Self {
            plane,
            registry,
            node_dir,
            busybox,
            pause,
        };
        let client = cluster.plane.client().await;
        create_dns_service(&client, dns_port).await?;
        cluster.try_wait_ready(READY_TIMEOUT).await?;
        // Pods need their namespace's default ServiceAccount (ServiceAccount admission).
        wait_for_service_account(&client, "default", READY_TIMEOUT).await?;
        Ok(cluster)
    }

    /// Stops a detached cluster started in `root` (by `gantry-dev up --node`) and removes
    /// everything it put on the machine, then `root` itself. Returns how many process groups
    /// were still running.
    pub fn stop_detached(root: &Path, grace: Duration) -> Result<usize, HarnessError> {
        let running = stop_groups(root, grace)?;
        host::run_cleanup_for(&root.join("node"))?;
        if root.exists() {
            std::fs::remove_dir_all(root).context(|| format!("removing {}", root.display()))?;
        }
        Ok(running)
    }

    /// The admin kubeconfig (user in `system:masters`; the server is on the bridge address).
    pub fn kubeconfig(&self) -> &Path {
        self.plane.kubeconfig()
    }

    /// An admin client. Make one per test: a client belongs to the runtime it was made on.
    pub async fn client(&self) -> Client {
        self.plane.client().await
    }

    /// `kubectl` pointed at this cluster as admin.
    pub fn kubectl(&self) -> Command {
        self.plane.kubectl()
    }

    /// The control plane (API server URL, CA, ServiceAccount tokens, token kubeconfigs).
    pub fn control_plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// The cluster's registry, `BRIDGE_IP:PORT`, plain HTTP: reachable from this machine,
    /// from the kubelet (containerd's hosts.toml names it) and from inside pods.
    pub fn registry(&self) -> &str {
        self.registry.host()
    }

    /// Makes the node's container runtime reach `registry` (`host:port`, e.g. another
    /// [`Registry`] on 127.0.0.1: containerd pulls from the machine's network namespace) over
    /// plain HTTP, as the cluster's own registry is. Takes effect at the next pull.
    pub fn allow_plain_http_registry(&self, registry: &str) -> Result<(), HarnessError> {
        let layout = Layout {
            dir: self.node_dir.clone(),
        };
        components::write_plain_http_host(&layout.containerd_hosts(), registry)
    }

    /// The registry as a [`Registry`] (its storage, skopeo references).
    pub fn registry_server(&self) -> &Registry {
        &self.registry
    }

    /// The pod range, [`POD_CIDR`].
    pub fn pod_cidr(&self) -> &'static str {
        POD_CIDR
    }

    /// The Service range, [`SERVICE_CIDR`].
    pub fn service_cidr(&self) -> &'static str {
        SERVICE_CIDR
    }

    /// The bridge's address, [`BRIDGE_IP`].
    pub fn bridge_ip(&self) -> IpAddr {
        BRIDGE_IP.into()
    }

    /// The cluster DNS Service's address, [`DNS_IP`].
    pub fn dns_ip(&self) -> IpAddr {
        DNS_IP.into()
    }

    /// The node's name, [`NODE_NAME`].
    pub fn node_name(&self) -> &'static str {
        NODE_NAME
    }

    /// A busybox image in the cluster's registry (Debian's `busybox-static`, every applet
    /// linked in `/bin`: `sh`, `httpd`, `wget`, `nslookup`, `sleep`, ...).
    pub fn busybox_image(&self) -> &str {
        &self.busybox
    }

    /// The sandbox ("pause") image containerd runs for every pod.
    pub fn pause_image(&self) -> &str {
        &self.pause
    }

    /// The directory holding the node's files; `logs/` has each component's log.
    pub fn node_dir(&self) -> &Path {
        &self.node_dir
    }

    /// Packs `rootfs` into an image with `config` and pushes it to the cluster's registry as
    /// `repository:tag`; returns the reference pods use (`BRIDGE_IP:PORT/repository:tag`).
    /// See [`push_rootfs`].
    pub fn push_image(
        &self,
        rootfs: &Path,
        config: &ImageConfig,
        repository_and_tag: &str,
    ) -> Result<String, HarnessError> {
        let work = tempfile::tempdir().context(|| "creating a temporary directory".into())?;
        push_rootfs(
            rootfs,
            config,
            self.registry(),
            repository_and_tag,
            work.path(),
        )
    }

    /// What to print when something on the node did not happen in time: the pods and events
    /// of `namespace` (`kubectl describe`), and the last lines of the kubelet's and
    /// containerd's logs.
    pub fn diagnostics(&self, namespace: &str) -> String {
        let kubectl = |args: &[&str]| {
            self.kubectl()
                .args(args)
                .args(["--namespace", namespace])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("(kubectl: {e})"))
        };
        let describe = kubectl(&["describe", "pods"]);
        let events = kubectl(&["get", "events"]);
        // A taint (disk or memory pressure on a crowded machine) keeps every pod Pending.
        let node = kubectl(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} taints={.spec.taints} {range .status.conditions[?(@.status==\"True\")]}{.type} {end}{\"\\n\"}{end}",
        ]);
        let logs = self.node_dir.join("logs");
        format!(
            "node:\n{node}\npods of {namespace}:\n{describe}\nevents of {namespace}:\n{events}\nkubelet log:\n{}\ncontainerd log:\n{}",
            crate::process::tail(&logs.join("kubelet.log"), 30),
            crate::process::tail(&logs.join("containerd.log"), 20)
        )
    }

    /// Waits until the node is registered and Ready, panicking after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) {
        self.try_wait_ready(timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    async fn try_wait_ready(&self, timeout: Duration) -> Result<(), HarnessError> {
        let nodes: Api<Node> = Api::all(self.plane.client().await);
        let deadline = Instant::now() + timeout;
        loop {
            let node = nodes.get_opt(NODE_NAME).await.ok().flatten();
            if node.as_ref().is_some_and(node_ready) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = self.node_dir.join("logs/kubelet.log");
                return Err(HarnessError::NotReady {
                    what: format!("node {NODE_NAME}"),
                    seconds: timeout.as_secs(),
                    log: crate::process::tail(&log, 40),
                    log_path: log,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates namespace `name` (if missing) and waits until its `default` ServiceAccount
    /// exists, so that pods can be created in it right away.
    pub async fn create_namespace(&self, name: &str) {
        let client = self.client().await;
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name }
        }))
        .expect("a namespace object");
        Api::<Namespace>::all(client.clone())
            .patch(
                name,
                &PatchParams::apply("gantry-tests"),
                &Patch::Apply(&namespace),
            )
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        wait_for_service_account(&client, name, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Waits until the `default` ServiceAccount of `namespace` exists (the controller-manager
/// creates it).
async fn wait_for_service_account(
    client: &Client,
    namespace: &str,
    timeout: Duration,
) -> Result<(), HarnessError> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + timeout;
    while accounts.get_opt("default").await.ok().flatten().is_none() {
        if Instant::now() >= deadline {
            return Err(HarnessError::Other(format!(
                "the default ServiceAccount of namespace {namespace} did not appear within {}s (see kube-controller-manager.log)",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
        })
}

/// The `kube-system/kube-dns` Service at [`DNS_IP`], backed by CoreDNS on the bridge address
/// (a process of this machine, so a selector-less Service with an EndpointSlice of its own).
async fn create_dns_service(client: &Client, port: u16) -> Result<(), HarnessError> {
    let apply = PatchParams::apply("gantry-tests").force();
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "kube-dns", "namespace": "kube-system",
                      "labels": { "k8s-app": "kube-dns" } },
        "spec": {
            "clusterIP": DNS_IP.to_string(),
            "ports": [
                { "name": "dns", "port": 53, "protocol": "UDP", "targetPort": port },
                { "name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port }
            ]
        }
    }))
    .map_err(|e| HarnessError::Other(e.to_string()))?;
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .patch("kube-dns", &apply, &Patch::Apply(&service))
        .await
        .context(|| "creating Service kube-system/kube-dns".into())?;
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": "kube-dns-coredns", "namespace": "kube-system",
                      "labels": { "kubernetes.io/service-name": "kube-dns",
                                  "endpointslice.kubernetes.io/managed-by": "gantry-tests" } },
        "addressType": "IPv4",
        "endpoints": [ { "addresses": [BRIDGE_IP.to_string()], "conditions": { "ready": true } } ],
        "ports": [
            { "name": "dns", "port": port, "protocol": "UDP" },
            { "name": "dns-tcp", "port": port, "protocol": "TCP" }
        ]
    }))
    .map_err(|e| HarnessError::Other(e.to_string()))?;
    Api::<EndpointSlice>::namespaced(client.clone(), "kube-system")
        .patch("kube-dns-coredns", &apply, &Patch::Apply(&slice))
        .await
        .context(|| "creating EndpointSlice kube-system/kube-dns-coredns".into())?;
    Ok(())
}

/// Root, and the programs of the Debian packages the node needs.
fn check_prerequisites() -> Result<(), HarnessError> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_string))
        });
    if uid.as_deref() != Some("0") {
        return Err(HarnessError::Other(
            "a node cluster needs root (it creates a bridge, iptables rules and mounts)".into(),
        ));
    }
    for (program, package) in [
        ("containerd", "containerd"),
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("iptables-save", "iptables"),
        ("conntrack", "conntrack"),
        ("ip", "iproute2"),
        ("flock", "util-linux"),
        ("umoci", "umoci"),
        ("skopeo", "skopeo"),
        ("docker-registry", "docker-registry"),
        ("gcc", "gcc"),
    ] {
        require_program(program, package)?;
    }
    for plugin in ["bridge", "host-local", "portmap", "loopback"] {
        let path = Path::new("/usr/lib/cni").join(plugin);
        if !path.is_file() {
            return Err(HarnessError::Other(format!(
                "{} is missing; install the Debian package `containernetworking-plugins` (`.ci/run` does)",
                path.display()
            )));
        }
    }
    Ok(())
}
