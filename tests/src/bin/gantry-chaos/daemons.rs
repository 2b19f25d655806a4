//! The environment's processes, found by the process IDs the harness lists in the state
//! directory, and the faults done to them: SIGKILL, then the same command line, environment and
//! working directory started again (what a supervisor or the kubelet would do); with several
//! provisioner replicas, also one replica paused (SIGSTOP) past its shard Lease, then continued.
//! Each replica is a daemon of its own, named by its `--identity`, which a restart keeps.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    KillProvisioner,
    PauseProvisioner,
    KillStorage,
    StopRegistry,
    RestartApiServer,
    RestartEtcd,
}

/// How long a paused replica stays stopped: longer than its shard Lease (15 s), so the sharder
/// counts it gone and hands its bundles to the others while it cannot notice.
pub const PAUSE: Duration = Duration::from_secs(20);

impl Fault {
    pub const ALL: &'static [Fault] = &[
        Fault::KillProvisioner,
        Fault::PauseProvisioner,
        Fault::KillStorage,
        Fault::StopRegistry,
        Fault::RestartApiServer,
        Fault::RestartEtcd,
    ];

    /// The faults of a run with `replicas` provisioners: a pause needs another replica to
    /// hand the paused one's bundles to.
    pub fn available(replicas: usize) -> Vec<Fault> {
        Self::ALL
            .iter()
            .copied()
            .filter(|f| *f != Fault::PauseProvisioner || replicas > 1)
            .collect()
    }

    pub fn describe(self) -> &'static str {
        match self {
            Fault::KillProvisioner => "provisioner SIGKILL",
            Fault::PauseProvisioner => "provisioner SIGSTOP 20 s",
            Fault::KillStorage => "storage server SIGKILL",
            Fault::StopRegistry => "registry stopped, started",
            Fault::RestartApiServer => "kube-apiserver SIGKILL",
            Fault::RestartEtcd => "etcd SIGKILL",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Fault::KillProvisioner | Fault::PauseProvisioner => PROVISIONER,
            Fault::KillStorage => "gantry-storage",
            Fault::StopRegistry => "docker-registry",
            Fault::RestartApiServer => "kube-apiserver",
            Fault::RestartEtcd => "etcd",
        }
    }

    /// How long the part stays down: the registry is an outage, the others crash and are
    /// restarted at once, as a supervisor would.
    fn downtime(self) -> Duration {
        match self {
            Fault::StopRegistry => Duration::from_millis(rand::random_range(2000..6000)),
            _ => Duration::from_millis(rand::random_range(0..1000)),
        }
    }
}

const PROVISIONER: &str = "gantry-provisioner";

/// How to start one process again.
struct Daemon {
    /// The program, and for a provisioner replica its identity: `gantry-provisioner-r1`.
    name: String,
    program: &'static str,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    pid: u32,
    /// Set once this run restarted it: the handle reaps it.
    child: Option<Child>,
}

pub struct Daemons {
    state: PathBuf,
    daemons: Mutex<BTreeMap<String, Daemon>>,
}

fn read_nul_list(path: &Path) -> anyhow::Result<Vec<OsString>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes
        .split(|b| *b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| OsString::from_vec(part.to_vec()))
        .collect())
}

/// Whether `pid` still runs (a zombie does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Sends `signal` (`-KILL`, `-STOP`, `-CONT`) to `pid`.
fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Whether `pid` is stopped (SIGSTOP).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("T")
    })
}

impl Daemons {
    /// Finds the environment's processes by the IDs in `state/pids`; there must be
    /// `replicas` provisioners.
    pub fn discover(state: &Path, replicas: usize) -> anyhow::Result<Self> {
        let pids = std::fs::read_to_string(state.join("pids"))
            .with_context(|| format!("reading {}/pids", state.display()))?;
        let mut daemons = BTreeMap::new();
        for pid in pids.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let argv = read_nul_list(&proc_dir.join("cmdline"))?;
            let Some(program) = argv.first().and_then(|a| Path::new(a).file_name()) else {
                continue;
            };
            let Some(fault) = Fault::ALL
                .iter()
                .find(|f| program == std::ffi::OsStr::new(f.program()))
            else {
                continue;
            };
            let env = read_nul_list(&proc_dir.join("environ"))?
                .into_iter()
                .filter_map(|pair| {
                    let bytes = pair.into_vec();
                    let eq = bytes.iter().position(|b| *b == b'=')?;
                    Some((
                        OsString::from_vec(bytes[..eq].to_vec()),
                        OsString::from_vec(bytes[eq + 1..].to_vec()),
                    ))
                })
                .collect();
            let cwd = std::fs::read_link(proc_dir.join("cwd"))
                .with_context(|| format!("reading the working directory of {pid}"))?;
            let name = match gantry_tests::identity_flag(&argv[1..]) {
                Some(identity) => format!("{}-{identity}", fault.program()),
                None => fault.program().to_string(),
            };
            daemons.insert(
                name.clone(),
                Daemon {
                    name,
                    program: fault.program(),
                    argv,
                    env,
                    cwd,
                    pid,
                    child: None,
                },
            );
        }
        for fault in Fault::ALL {
            if !daemons.values().any(|d| d.program == fault.program()) {
                bail!("no {} among the environment's processes", fault.program());
            }
        }
        let provisioners = daemons
            .values()
            .filter(|d| d.program == PROVISIONER)
            .count();
        if provisioners != replicas {
            bail!(
                "{provisioners} provisioner(s) among the environment's processes, not {replicas}"
            );
        }
        Ok(Self {
            state: state.to_path_buf(),
            daemons: Mutex::new(daemons),
        })
    }

    pub fn describe(&self) -> String {
        let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        daemons
            .values()
            .map(|d| format!("{} (pid {})", d.name, d.pid))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The daemons running `program`, by name.
    fn named(&self, program: &str) -> Vec<String> {
        let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        daemons
            .values()
            .filter(|d| d.program == program)
            .map(|d| d.name.clone())
            .collect()
    }

    fn kill(&self, name: &str) {
        let mut daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        let Some(daemon) = daemons.get_mut(name) else {
            return;
        };
        signal(daemon.pid, "-KILL");
        if let Some(child) = daemon.child.as_mut() {
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(daemon.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` to the daemon `name`'s current process.
    fn signal(&self, name: &str, signal_name: &str) {
        if let Some(pid) = self.pid(name) {
            signal(pid, signal_name);
        }
    }

    fn start(&self, name: &str) -> anyhow::Result<()> {
        let mut daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        let Some(daemon) = daemons.get_mut(name) else {
            bail!("unknown daemon {name}");
        };
        let log_path = self.state.join(format!("chaos-{name}.log"));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let mut command = Command::new(&daemon.argv[0]);
        command
            .args(&daemon.argv[1..])
            .env_clear()
            .envs(daemon.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&daemon.cwd)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} again"))?;
        daemon.pid = child.id();
        daemon.child = Some(child);
        // Listed, so that stopping the environment stops it too.
        use std::io::Write;
        let mut pids = OpenOptions::new()
            .append(true)
            .open(self.state.join("pids"))?;
        writeln!(pids, "{}", daemon.pid)?;
        Ok(())
    }

    /// The current process ID of the daemon `name`.
    pub fn pid(&self, name: &str) -> Option<u32> {
        let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        daemons.get(name).map(|d| d.pid)
    }

    fn running(&self, name: &str) -> bool {
        let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        daemons.get(name).is_some_and(|d| alive(d.pid))
    }

    /// Injects faults, one every `mean` seconds on average, until `churning` is cleared;
    /// returns how many of each kind. A paused replica is continued after [`PAUSE`], or at
    /// once when the churn ends; one replica at most is paused at a time, and it is not
    /// killed meanwhile.
    pub async fn inject_until(
        &self,
        churning: &AtomicBool,
        mean: f64,
        replicas: usize,
    ) -> anyhow::Result<BTreeMap<Fault, usize>> {
        let faults = Fault::available(replicas);
        let mut injected = BTreeMap::new();
        let mut last_provisioner_kill = Instant::now();
        let between = || Duration::from_secs_f64(mean * rand::random_range(0.5..1.5));
        let mut next_fault = Instant::now() + between();
        // The paused replica and when it is to be continued.
        let mut paused: Option<(String, Instant)> = None;
        while churning.load(Ordering::SeqCst) {
            let wake = paused
                .as_ref()
                .map_or(next_fault, |(_, until)| next_fault.min(*until));
            tokio::time::sleep_until(wake.into()).await;
            if let Some((name, until)) = &paused
                && Instant::now() >= *until
            {
                self.signal(name, "-CONT");
                eprintln!("    {name} continued");
                paused = None;
            }
            if !churning.load(Ordering::SeqCst) {
                break;
            }
            if Instant::now() < next_fault {
                continue;
            }
            next_fault = Instant::now() + between();
            // The provisioner, the part most likely to be caught in the middle of work, at
            // least every 20 s; the rest at random.
            let fault = if last_provisioner_kill.elapsed() > Duration::from_secs(20) {
                Fault::KillProvisioner
            } else {
                let choices: Vec<Fault> = faults
                    .iter()
                    .copied()
                    .filter(|f| *f != Fault::PauseProvisioner || paused.is_none())
                    .collect();
                choices[rand::random_range(0..choices.len())]
            };
            if fault == Fault::KillProvisioner {
                last_provisioner_kill = Instant::now();
            }
            // A replica that is not paused.
            let mut targets = self.named(fault.program());
            targets.retain(|name| paused.as_ref().is_none_or(|(p, _)| p != name));
            let target = targets[rand::random_range(0..targets.len())].clone();
            if fault == Fault::PauseProvisioner {
                self.signal(&target, "-STOP");
                paused = Some((target.clone(), Instant::now() + PAUSE));
            } else {
                self.inject(fault, &target).await?;
            }
            if fault.program() == PROVISIONER && replicas > 1 {
                eprintln!("    fault: {} ({target})", fault.describe());
            } else {
                eprintln!("    fault: {}", fault.describe());
            }
            *injected.entry(fault).or_insert(0) += 1;
        }
        if let Some((name, _)) = paused {
            self.signal(&name, "-CONT");
            eprintln!("    {name} continued (the churn ended)");
        }
        Ok(injected)
    }

    async fn inject(&self, fault: Fault, name: &str) -> anyhow::Result<()> {
        tokio::task::block_in_place(|| self.kill(name));
        tokio::time::sleep(fault.downtime()).await;
        tokio::task::block_in_place(|| self.start(name))
    }

    /// Starts whatever is not running (a restart that failed, e.g. on a port briefly taken)
    /// and continues whatever is stopped.
    pub async fn ensure_running(&self) -> anyhow::Result<()> {
        let names: Vec<String> = {
            let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
            daemons.keys().cloned().collect()
        };
        for name in names {
            if self.pid(&name).is_some_and(stopped) {
                self.signal(&name, "-CONT");
            }
            for attempt in 0..5 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if self.running(&name) {
                    break;
                }
                if attempt == 4 {
                    bail!(
                        "{name} does not stay up; see {}",
                        self.state.join(format!("chaos-{name}.log")).display()
                    );
                }
                tokio::task::block_in_place(|| self.start(&name))?;
            }
        }
        Ok(())
    }
}
