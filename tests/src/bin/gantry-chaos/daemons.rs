//! The environment's processes, found by the process IDs the harness lists in the state
//! directory, and the faults done to them: SIGKILL, then the same command line, environment and
//! working directory started again (what a supervisor or the kubelet would do).

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
    KillStorage,
    StopRegistry,
    RestartApiServer,
    RestartEtcd,
}

impl Fault {
    pub const ALL: &'static [Fault] = &[
        Fault::KillProvisioner,
        Fault::KillStorage,
        Fault::StopRegistry,
        Fault::RestartApiServer,
        Fault::RestartEtcd,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Fault::KillProvisioner => "provisioner SIGKILL",
            Fault::KillStorage => "storage server SIGKILL",
            Fault::StopRegistry => "registry stopped, started",
            Fault::RestartApiServer => "kube-apiserver SIGKILL",
            Fault::RestartEtcd => "etcd SIGKILL",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Fault::KillProvisioner => "gantry-provisioner",
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

/// How to start one process again.
struct Daemon {
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
    daemons: Mutex<BTreeMap<&'static str, Daemon>>,
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

impl Daemons {
    /// Finds the environment's processes by the IDs in `state/pids`.
    pub fn discover(state: &Path) -> anyhow::Result<Self> {
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
            daemons.insert(
                fault.program(),
                Daemon {
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
            if !daemons.contains_key(fault.program()) {
                bail!("no {} among the environment's processes", fault.program());
            }
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
            .map(|d| format!("{} (pid {})", d.program, d.pid))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn kill(&self, program: &str) {
        let mut daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        let Some(daemon) = daemons.get_mut(program) else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-KILL", &daemon.pid.to_string()])
            .stderr(Stdio::null())
            .status();
        if let Some(child) = daemon.child.as_mut() {
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(daemon.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start(&self, program: &str) -> anyhow::Result<()> {
        let mut daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        let Some(daemon) = daemons.get_mut(program) else {
            bail!("unknown daemon {program}");
        };
        let log_path = self.state.join(format!("chaos-{program}.log"));
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
            .with_context(|| format!("starting {program} again"))?;
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

    /// The current process ID of `program`.
    pub fn pid(&self, program: &str) -> Option<u32> {
        let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        daemons.get(program).map(|d| d.pid)
    }

    fn running(&self, program: &str) -> bool {
        let daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        daemons.get(program).is_some_and(|d| alive(d.pid))
    }

    /// Injects faults, one every `mean` seconds on average, until `churning` is cleared;
    /// returns how many of each kind.
    pub async fn inject_until(
        &self,
        churning: &AtomicBool,
        mean: f64,
    ) -> anyhow::Result<BTreeMap<Fault, usize>> {
        let mut injected = BTreeMap::new();
        let mut last_provisioner_kill = Instant::now();
        while churning.load(Ordering::SeqCst) {
            let pause = Duration::from_secs_f64(mean * rand::random_range(0.5..1.5));
            tokio::time::sleep(pause).await;
            if !churning.load(Ordering::SeqCst) {
                break;
            }
            // The provisioner, the part most likely to be caught in the middle of work, at
            // least every 20 s; the rest at random.
            let fault = if last_provisioner_kill.elapsed() > Duration::from_secs(20) {
                Fault::KillProvisioner
            } else {
                Fault::ALL[rand::random_range(0..Fault::ALL.len())]
            };
            if fault == Fault::KillProvisioner {
                last_provisioner_kill = Instant::now();
            }
            self.inject(fault).await?;
            eprintln!("    fault: {}", fault.describe());
            *injected.entry(fault).or_insert(0) += 1;
        }
        Ok(injected)
    }

    async fn inject(&self, fault: Fault) -> anyhow::Result<()> {
        let program = fault.program();
        tokio::task::block_in_place(|| self.kill(program));
        tokio::time::sleep(fault.downtime()).await;
        tokio::task::block_in_place(|| self.start(program))
    }

    /// Starts whatever is not running (a restart that failed, e.g. on a port briefly taken).
    pub async fn ensure_running(&self) -> anyhow::Result<()> {
        for fault in Fault::ALL {
            let program = fault.program();
            for attempt in 0..5 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if self.running(program) {
                    break;
                }
                if attempt == 4 {
                    bail!(
                        "{program} does not stay up; see {}",
                        self.state.join(format!("chaos-{program}.log")).display()
                    );
                }
                tokio::task::block_in_place(|| self.start(program))?;
            }
        }
        Ok(())
    }
}
