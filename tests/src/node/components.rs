//! The node's processes: containerd, kube-controller-manager, kube-scheduler, kubelet,
//! kube-proxy and CoreDNS, each with its own configuration under the node's directory.

use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::{
    BRIDGE, BRIDGE_IP, CLUSTER_DOMAIN, CNI_NETWORK, DNS_IP, NODE_NAME, POD_CIDR, SERVICE_CIDR,
};
use crate::control_plane::ControlPlane;
use crate::error::{HarnessError, IoContext};
use crate::process::{Lifetime, free_port, free_port_on, spawn_daemon, wait_for, wait_for_address};

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the node's pieces live, all under one directory.
pub(crate) struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    pub fn log(&self, name: &str) -> PathBuf {
        self.logs().join(format!("{name}.log"))
    }
    pub fn config(&self, name: &str) -> PathBuf {
        self.dir.join("config").join(name)
    }
    pub fn containerd(&self) -> PathBuf {
        self.dir.join("containerd")
    }
    /// containerd's registry configuration directory (a `hosts.toml` per registry).
    pub fn containerd_hosts(&self) -> PathBuf {
        self.containerd().join("certs.d")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.containerd().join("containerd.sock")
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }
    pub fn create(&self) -> Result<(), HarnessError> {
        for dir in [
            self.logs(),
            self.dir.join("config"),
            self.containerd(),
            self.kubelet_root(),
        ] {
            std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        }
        Ok(())
    }
}

fn write(path: &Path, contents: &str) -> Result<(), HarnessError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, contents).context(|| format!("writing {}", path.display()))
}

/// Starts containerd with its own root, state, socket and configuration: the CRI plugin uses
/// the bridge CNI configuration written here (pods reach their range on the link and the
/// Service range through the bridge; they get no default route), the sandbox image pushed to the cluster's
/// registry, and a hosts.toml that makes that registry a plain-HTTP host.
pub(crate) fn start_containerd(
    layout: &Layout,
    lifetime: &Lifetime,
    registry: &str,
    sandbox_image: &str,
) -> Result<(), HarnessError> {
    let base = layout.containerd();
    let cni_conf_dir = base.join("cni/net.d");
    write(
        &cni_conf_dir.join("10-gantry.conflist"),
        &format!(
            r#"{{
  "cniVersion": "0.4.0",
  "name": "{CNI_NETWORK}",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "{BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{ "subnet": "{POD_CIDR}", "gateway": "{BRIDGE_IP}" }}]],
        "routes": [{{ "dst": "{SERVICE_CIDR}", "gw": "{BRIDGE_IP}" }}],
        "dataDir": "{ipam}"
      }}
    }},
    {{ "type": "portmap", "capabilities": {{ "portMappings": true }} }}
  ]
}}
"#,
            ipam = base.join("cni/ipam").display()
        ),
    )?;
    let certs = layout.containerd_hosts();
    write_plain_http_host(&certs, registry)?;
    let config = layout.config("containerd.toml");
    write(
        &config,
        &format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc_root}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
"#,
            root = base.join("root").display(),
            state = base.join("state").display(),
            socket = layout.containerd_socket().display(),
            opt = base.join("opt").display(),
            runc_root = base.join("state/runc").display(),
            cni_conf_dir = cni_conf_dir.display(),
            certs = certs.display(),
        ),
    )?;
    let log = layout.log("containerd");
    let mut command = Command::new("containerd");
    command.arg("--config").arg(&config);
    let mut child = spawn_daemon(lifetime, command, &log)?;
    let socket = layout.containerd_socket();
    wait_for("containerd", &mut child, &log, START_TIMEOUT, || {
        UnixStream::connect(&socket).is_ok()
    })?;
    std::mem::forget(child);
    Ok(())
}

/// A hosts.toml in containerd's registry configuration directory `certs` that makes
/// `registry` (`host:port`) a plain-HTTP host. containerd reads it at each pull.
pub(crate) fn write_plain_http_host(certs: &Path, registry: &str) -> Result<(), HarnessError> {
    write(
        &certs.join(registry).join("hosts.toml"),
        &format!(
            "server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n"
        ),
    )
}

/// The kubeconfigs of the node's components, each a client certificate of the user that
/// Kubernetes' default RBAC expects for it.
pub(crate) struct Kubeconfigs {
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
    pub kubelet: PathBuf,
    pub proxy: PathBuf,
    pub coredns: PathBuf,
}

impl Kubeconfigs {
    pub fn write(layout: &Layout, plane: &ControlPlane) -> Result<Self, HarnessError> {
        let make = |name: &str, user: &str, group: Option<&str>| {
            let path = layout.config(&format!("{name}.kubeconfig"));
            plane
                .write_user_kubeconfig(&path, user, group)
                .map(|()| path)
        };
        Ok(Self {
            controller_manager: make(
                "kube-controller-manager",
                "system:kube-controller-manager",
                None,
            )?,
            scheduler: make("kube-scheduler", "system:kube-scheduler", None)?,
            kubelet: make(
                "kubelet",
                &format!("system:node:{NODE_NAME}"),
                Some("system:nodes"),
            )?,
            proxy: make("kube-proxy", "system:kube-proxy", None)?,
            // CoreDNS lists Services, EndpointSlices, Namespaces and Pods everywhere.
            coredns: make("coredns", "coredns", Some("system:masters"))?,
        })
    }
}

/// A started component and how to tell it is serving.
pub(crate) struct Started {
    pub name: &'static str,
    pub child: Child,
    pub address: SocketAddr,
    pub log: PathBuf,
}

impl Started {
    /// Waits until the component accepts connections on its address.
    pub fn wait(mut self) -> Result<(), HarnessError> {
        wait_for_address(
            self.name,
            self.address,
            &mut self.child,
            &self.log,
            START_TIMEOUT,
        )?;
        std::mem::forget(self.child);
        Ok(())
    }
}

fn start(
    name: &'static str,
    layout: &Layout,
    lifetime: &Lifetime,
    command: Command,
    address: SocketAddr,
) -> Result<Started, HarnessError> {
    let log = layout.log(name);
    let child = spawn_daemon(lifetime, command, &log)?;
    Ok(Started {
        name,
        child,
        address,
        log,
    })
}

/// The flags kube-controller-manager and kube-scheduler share: their kubeconfig for the API,
/// for delegated authentication and authorisation, no leader election, serving on loopback.
fn control_loop_command(binary: &Path, kubeconfig: &Path, port: u16) -> Command {
    let mut command = Command::new(binary);
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
        .arg("--v=1");
    command
}

/// kube-controller-manager with every default controller, ServiceAccount tokens signed with
/// the API server's key, and one ServiceAccount per controller.
pub(crate) fn start_controller_manager(
    layout: &Layout,
    lifetime: &Lifetime,
    binaries: &Path,
    plane: &ControlPlane,
    kubeconfig: &Path,
) -> Result<Started, HarnessError> {
    let port = free_port()?;
    let mut command =
        control_loop_command(&binaries.join("kube-controller-manager"), kubeconfig, port);
    command
        .arg("--controllers=*")
        .arg(format!(
            "--service-account-private-key-file={}",
            plane.pki_file("sa.key").display()
        ))
        .arg(format!(
            "--root-ca-file={}",
            plane.pki_file("ca.crt").display()
        ))
        .arg("--use-service-account-credentials=true")
        .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
        .arg(format!("--cluster-cidr={POD_CIDR}"))
        .arg("--allocate-node-cidrs=false");
    start(
        "kube-controller-manager",
        layout,
        lifetime,
        command,
        (std::net::Ipv4Addr::LOCALHOST, port).into(),
    )
}

/// kube-scheduler.
pub(crate) fn start_scheduler(
    layout: &Layout,
    lifetime: &Lifetime,
    binaries: &Path,
    kubeconfig: &Path,
) -> Result<Started, HarnessError> {
    let port = free_port()?;
    let command = control_loop_command(&binaries.join("kube-scheduler"), kubeconfig, port);
    start(
        "kube-scheduler",
        layout,
        lifetime,
        command,
        (std::net::Ipv4Addr::LOCALHOST, port).into(),
    )
}

/// The kubelet: its own root directory, cgroupfs, swap tolerated, the cluster DNS, serving on
/// the bridge address (the node's InternalIP) for the API server's logs and exec.
pub(crate) fn start_kubelet(
    layout: &Layout,
    lifetime: &Lifetime,
    binaries: &Path,
    plane: &ControlPlane,
    kubeconfig: &Path,
) -> Result<Started, HarnessError> {
    let healthz = free_port()?;
    let config = layout.config("kubelet.yaml");
    write(
        &config,
        &format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {BRIDGE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
containerRuntimeEndpoint: unix://{socket}
cgroupDriver: cgroupfs
failSwapOn: false
clusterDNS: [{DNS_IP}]
clusterDomain: {CLUSTER_DOMAIN}
resolvConf: ""
podLogsDir: {pod_logs}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
maxPods: 60
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
"#,
            socket = layout.containerd_socket().display(),
            pod_logs = layout.dir.join("pod-logs").display(),
            ca = plane.pki_file("ca.crt").display(),
        ),
    )?;
    let mut command = Command::new(binaries.join("kubelet"));
    command
        .arg(format!("--config={}", config.display()))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--root-dir={}", layout.kubelet_root().display()))
        .arg(format!(
            "--cert-dir={}",
            layout.kubelet_root().join("pki").display()
        ))
        .arg(format!("--hostname-override={NODE_NAME}"))
        .arg(format!("--node-ip={BRIDGE_IP}"))
        .arg("--v=1");
    start(
        "kubelet",
        layout,
        lifetime,
        command,
        (std::net::Ipv4Addr::LOCALHOST, healthz).into(),
    )
}

/// kube-proxy in iptables mode, NodePorts only on the bridge address, leaving the
/// machine's conntrack settings alone.
pub(crate) fn start_proxy(
    layout: &Layout,
    lifetime: &Lifetime,
    binaries: &Path,
    kubeconfig: &Path,
) -> Result<Started, HarnessError> {
    let healthz = free_port()?;
    let mut command = Command::new(binaries.join("kube-proxy"));
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--hostname-override={NODE_NAME}"))
        .arg("--proxy-mode=iptables")
        .arg(format!("--cluster-cidr={POD_CIDR}"))
        .arg(format!("--nodeport-addresses={BRIDGE_IP}/32"))
        .arg("--iptables-localhost-nodeports=false")
        .arg(format!("--healthz-bind-address=127.0.0.1:{healthz}"))
        .arg("--metrics-bind-address=")
        .arg("--conntrack-max-per-core=0")
        .arg("--conntrack-tcp-timeout-established=0")
        .arg("--conntrack-tcp-timeout-close-wait=0")
        .arg("--v=1");
    start(
        "kube-proxy",
        layout,
        lifetime,
        command,
        (std::net::Ipv4Addr::LOCALHOST, healthz).into(),
    )
}

/// CoreDNS on the bridge address with only the `kubernetes` plugin: cluster names resolve,
/// nothing is forwarded anywhere. Returns the started process and its port (the `kube-dns`
/// Service's target).
pub(crate) fn start_coredns(
    layout: &Layout,
    lifetime: &Lifetime,
    coredns: &Path,
    kubeconfig: &Path,
) -> Result<(Started, u16), HarnessError> {
    let port = free_port_on(BRIDGE_IP.into())?;
    let corefile = layout.config("Corefile");
    write(
        &corefile,
        &format!(
            r#".:{port} {{
    bind {BRIDGE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
}}
"#,
            kubeconfig = kubeconfig.display()
        ),
    )?;
    let mut command = Command::new(coredns.join("coredns"));
    command.arg("-conf").arg(&corefile);
    let started = start(
        "coredns",
        layout,
        lifetime,
        command,
        (BRIDGE_IP, port).into(),
    )?;
    Ok((started, port))
}
