//! What a node cluster changes on the machine itself: the one-cluster lock, the pod bridge,
//! the rule that keeps pod traffic on the machine, and the script that undoes all of it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{BRIDGE, BRIDGE_IP, CNI_NETWORK, DROP_CHAIN, POD_CIDR, POD_PREFIX, SERVICE_CIDR};
use crate::error::{HarnessError, IoContext};
use crate::oci_image::run;
use crate::process::{Lifetime, run_at_exit, spawn_daemon_with_stdin};

/// Where the machine-wide state of the node cluster lives: the lock, who holds it, and the
/// clean-up script of the cluster that runs (or last ran) here.
pub const HOST_STATE: &str = "/run/gantry-node";

/// How long to wait for another test binary's cluster (tests on one machine queue for the
/// node) or a previous cluster's clean-up to release the lock. A detached cluster
/// (`gantry-dev up --node`) is not waited for.
const LOCK_WAIT: Duration = Duration::from_secs(20 * 60);

/// Environment variable naming a directory where the clean-up copies the components' logs
/// (into a directory per cluster) before it removes the node's files.
pub const KEEP_LOGS_ENV: &str = "GANTRY_NODE_KEEP_LOGS";

/// The `owner` text of a detached cluster starts with this.
pub(crate) const DETACHED_OWNER: &str = "gantry-dev up --node";

fn lock_path() -> PathBuf {
    Path::new(HOST_STATE).join("lock")
}

fn cleanup_path() -> PathBuf {
    Path::new(HOST_STATE).join("cleanup.sh")
}

/// Takes the machine's node-cluster lock for as long as `lifetime` says: a small process
/// started in the cluster's process group keeps the lock file open and locked, so the lock
/// goes when the cluster's processes go, however they go. Then removes what a previous
/// cluster left behind (a crashed run), using the clean-up script it recorded.
pub(crate) fn take_machine(
    lifetime: &Lifetime,
    owner: &str,
    log_dir: &Path,
) -> Result<(), HarnessError> {
    std::fs::create_dir_all(HOST_STATE).context(|| format!("creating {HOST_STATE}"))?;
    let lock = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path())
        .context(|| format!("opening {}", lock_path().display()))?;
    let deadline = Instant::now() + LOCK_WAIT;
    let mut told = false;
    loop {
        let holder = || {
            std::fs::read_to_string(Path::new(HOST_STATE).join("owner"))
                .unwrap_or_else(|_| "unknown".into())
        };
        match lock.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock)
                if Instant::now() < deadline && !holder().starts_with(DETACHED_OWNER) =>
            {
                if !told {
                    eprintln!(
                        "waiting for the node cluster of {} to finish (one per machine)",
                        holder().trim()
                    );
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = holder();
                return Err(HarnessError::Other(format!(
                    "another node cluster runs on this machine (only one can: bridge {BRIDGE}, \
                     {POD_CIDR}, iptables chain {DROP_CHAIN}); its owner: {}; stop it first \
                     (`gantry-dev down` for a detached one)",
                    holder.trim()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(HarnessError::Io {
                    what: format!("locking {}", lock_path().display()),
                    source: e,
                });
            }
        }
    }
    if cleanup_path().exists() {
        let output = Command::new("sh")
            .arg(cleanup_path())
            .output()
            .context(|| format!("running {}", cleanup_path().display()))?;
        if !output.status.success() {
            return Err(HarnessError::Other(format!(
                "removing what a previous node cluster left behind ({}) failed: {}",
                cleanup_path().display(),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
    }
    std::fs::write(Path::new(HOST_STATE).join("owner"), format!("{owner}\n"))
        .context(|| format!("writing {HOST_STATE}/owner"))?;
    // The holder inherits the locked open file as its standard input.
    let mut holder = Command::new("sleep");
    holder.arg("infinity");
    let holder = spawn_daemon_with_stdin(
        lifetime,
        holder,
        &log_dir.join("lock-holder.log"),
        Stdio::from(lock),
    )?;
    std::mem::forget(holder);
    Ok(())
}

/// What the clean-up script must know about one cluster.
pub(crate) struct CleanupPlan<'a> {
    /// A name unique to this cluster, so that a late clean-up never touches a newer cluster.
    pub run_id: &'a str,
    /// The directory holding every file of the node (containerd's root and state, the
    /// kubelet's root, logs). Removed last.
    pub node_dir: &'a Path,
    pub kube_proxy: &'a Path,
}

/// Writes the clean-up script of this cluster and, for a test binary's cluster, has the
/// watchdog run it (holding the lock) once the test binary is gone.
pub(crate) fn install_cleanup(
    plan: &CleanupPlan<'_>,
    lifetime: &Lifetime,
) -> Result<(), HarnessError> {
    let script = cleanup_script(plan);
    std::fs::write(cleanup_path(), script)
        .context(|| format!("writing {}", cleanup_path().display()))?;
    if let Lifetime::TestBinary = lifetime {
        run_at_exit(&format!(
            "flock {lock} sh -c 'grep -qx \"# run {id}\" {script} 2>/dev/null && sh {script}'",
            lock = lock_path().display(),
            id = plan.run_id,
            script = cleanup_path().display(),
        ))?;
    }
    Ok(())
}

/// Runs the recorded clean-up script of the cluster in `node_dir` (holding the lock), if it is
/// still the recorded one. For `gantry-dev down`, once the cluster's processes were stopped.
pub(crate) fn run_cleanup_for(node_dir: &Path) -> Result<bool, HarnessError> {
    let Ok(script) = std::fs::read_to_string(cleanup_path()) else {
        return Ok(false);
    };
    let ours = script
        .lines()
        .any(|line| line == format!("node_dir='{}'", node_dir.display()));
    if !ours {
        return Ok(false);
    }
    run(Command::new("flock")
        .arg(lock_path())
        .arg("sh")
        .arg(cleanup_path()))?;
    Ok(true)
}

/// The clean-up script: idempotent, it ends every process of the node, unmounts everything
/// under the node's directory (container root filesystems, shm, volumes, network
/// namespaces), removes the iptables rules of kube-proxy, of portmap and of the harness, the
/// bridge, the kubelet's cgroups and log links, and the node's directory.
fn cleanup_script(plan: &CleanupPlan<'_>) -> String {
    format!(
        r##"#!/bin/sh
# run {run_id}
# Removes what the node cluster of run {run_id} put on this machine. Safe to run again.
node_dir='{node_dir}'
kube_proxy='{kube_proxy}'
bridge='{BRIDGE}'
chain='{DROP_CHAIN}'
pods='{POD_CIDR}'
network='{CNI_NETWORK}'
keep_logs='{keep_logs}'

# Processes whose command line names the node's directory: the components and the shims.
for proc in /proc/[0-9]*; do
  pid="${{proc#/proc/}}"
  [ "$pid" = "$$" ] || [ "$pid" = "$PPID" ] && continue
  case "$(tr '\0' ' ' < "$proc/cmdline" 2>/dev/null)" in
    *"$node_dir"*) kill -KILL "$pid" 2>/dev/null ;;
  esac
done
# Containers: every process in the kubelet's pod cgroups.
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  procs="$(find /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {{}} + 2>/dev/null | sort -u)"
  [ -z "$procs" ] && break
  kill -KILL $procs 2>/dev/null
  sleep 0.2
done
find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {{}} \; 2>/dev/null
# Shim sockets live outside the node's directory; their addresses are recorded inside it.
for address in "$node_dir"/containerd/state/io.containerd.runtime.v2.task/*/*/address; do
  [ -f "$address" ] && rm -f "$(sed 's|^unix://||' "$address")"
done
# Mounts under the node's directory, deepest first, twice for stacked ones.
for attempt in 1 2; do
  awk -v dir="$node_dir/" 'index($5, dir) == 1 {{ print $5 }}' /proc/self/mountinfo | sort -r |
    while IFS= read -r mount; do umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null; done
done
# iptables: kube-proxy's chains, portmap's rules for this network, the harness's drop rule.
[ -x "$kube_proxy" ] && "$kube_proxy" --cleanup >/dev/null 2>&1
for table in nat filter; do
  iptables-save -t "$table" 2>/dev/null | grep -e "-A " | grep -F -e "$network" | sed 's/^-A/-D/' |
    while IFS= read -r rule; do eval "iptables -t $table $rule" 2>/dev/null; done
done
for dnat in $(iptables-save -t nat 2>/dev/null | sed -n 's/^:\(CNI-DN-[^ ]*\) .*/\1/p'); do
  iptables -t nat -S "$dnat" 2>/dev/null | grep -q -- "-A $dnat" || iptables -t nat -X "$dnat" 2>/dev/null
done
for hook in INPUT FORWARD; do
  while iptables -D "$hook" -s "$pods" -j "$chain" 2>/dev/null; do :; done
done
iptables -F "$chain" 2>/dev/null; iptables -X "$chain" 2>/dev/null
# The kubelet's own chains (its firewall for 127.0.0.0/8 and its canaries), both families.
for command in iptables ip6tables; do
  for hook in INPUT OUTPUT; do
    while "$command" -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
  done
  "$command" -F KUBE-FIREWALL 2>/dev/null; "$command" -X KUBE-FIREWALL 2>/dev/null
  for table in mangle filter nat; do
    for kubelet_chain in KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      "$command" -t "$table" -X "$kubelet_chain" 2>/dev/null
    done
  done
done
ip link del "$bridge" 2>/dev/null
# Files the kubelet and the CNI plugins keep outside the node's directory.
for link in /var/log/containers/*.log; do
  case "$(readlink "$link" 2>/dev/null)" in "$node_dir"/*) rm -f "$link" ;; esac
done
rm -rf /var/lib/cni/results/"$network"-* 2>/dev/null
for sandbox in "$node_dir"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/*; do
  rm -f /var/lib/cni/results/cni-loopback-"${{sandbox##*/}}"-lo
done
rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
rmdir /var/log/containers /var/lib/cni/results /var/lib/cni /var/lib/kubelet/device-plugins \
  /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins /var/lib/kubelet \
  /run/containerd/s /run/containerd 2>/dev/null
[ -n "$keep_logs" ] && mkdir -p "$keep_logs/{run_id}" && cp -r "$node_dir/logs/." "$keep_logs/{run_id}/"
rm -rf "$node_dir"
case "$(sed -n 2p '{cleanup}' 2>/dev/null)" in "# run {run_id}") rm -f '{cleanup}' '{HOST_STATE}/owner' ;; esac
exit 0
"##,
        run_id = plan.run_id,
        node_dir = plan.node_dir.display(),
        kube_proxy = plan.kube_proxy.display(),
        cleanup = cleanup_path().display(),
        keep_logs = std::env::var(KEEP_LOGS_ENV)
            .unwrap_or_default()
            .replace('\'', ""),
    )
}

/// Creates the pod bridge with the gateway address, routes the Service range to it, and
/// drops whatever pods send to an address that is neither a pod's, a Service's nor the
/// bridge's: no pod traffic leaves the machine.
pub(crate) fn create_network() -> Result<(), HarnessError> {
    let ip = |args: &[&str]| run(Command::new("ip").args(args));
    let gateway = format!("{BRIDGE_IP}/{POD_PREFIX}");
    ip(&["link", "add", "name", BRIDGE, "type", "bridge"])?;
    ip(&["addr", "add", &gateway, "dev", BRIDGE])?;
    ip(&["link", "set", BRIDGE, "up"])?;
    ip(&["route", "add", SERVICE_CIDR, "dev", BRIDGE])?;
    let iptables = |args: &[&str]| run(Command::new("iptables").args(args));
    iptables(&["-N", DROP_CHAIN])?;
    iptables(&["-A", DROP_CHAIN, "-d", POD_CIDR, "-j", "RETURN"])?;
    iptables(&["-A", DROP_CHAIN, "-d", SERVICE_CIDR, "-j", "RETURN"])?;
    iptables(&["-A", DROP_CHAIN, "-j", "DROP"])?;
    for hook in ["INPUT", "FORWARD"] {
        iptables(&["-I", hook, "1", "-s", POD_CIDR, "-j", DROP_CHAIN])?;
    }
    Ok(())
}
