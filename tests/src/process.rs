//! Processes started by the harness: one process group per test binary, led by a watchdog.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, IoContext};

/// The watchdog leads the process group every daemon joins. It polls for the test process to
/// be gone, then terminates the group, runs the clean-up commands registered with it and
/// removes the state directories registered with it.
/// Polling is fine here: it is cleanup, not synchronisation of a test.
const WATCHDOG: &str = r#"
trap '' TERM INT HUP
parent="$1"; state="$2"
while kill -0 "$parent" 2>/dev/null; do sleep 0.5; done
kill -TERM 0 2>/dev/null
sleep 1
[ -f "$state.run" ] && while IFS= read -r command; do sh -c "$command" </dev/null >/dev/null 2>&1; done < "$state.run"
rm -f -- "$state.run"
[ -f "$state" ] && while IFS= read -r dir; do rm -rf -- "$dir"; done < "$state"
rm -f -- "$state"
kill -KILL 0
"#;

struct Watchdog {
    pgid: i32,
    state_list: PathBuf,
}

fn watchdog() -> Result<&'static Watchdog, HarnessError> {
    static WATCHDOG_PROCESS: OnceLock<Result<Watchdog, String>> = OnceLock::new();
    WATCHDOG_PROCESS
        .get_or_init(|| {
            let state_list =
                std::env::temp_dir().join(format!("gantry-tests-{}.cleanup", std::process::id()));
            let child = Command::new("sh")
                .arg("-c")
                .arg(WATCHDOG)
                .arg("gantry-tests-watchdog")
                .arg(std::process::id().to_string())
                .arg(&state_list)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(|e| format!("starting the watchdog shell: {e}"))?;
            let pgid = i32::try_from(child.id()).map_err(|e| e.to_string())?;
            // The watchdog outlives every handle to it by design.
            std::mem::forget(child);
            Ok(Watchdog { pgid, state_list })
        })
        .as_ref()
        .map_err(|e| HarnessError::Other(e.clone()))
}

/// Registers a directory for removal when the test binary exits.
pub(crate) fn remove_at_exit(dir: &Path) -> Result<(), HarnessError> {
    append_line(&watchdog()?.state_list, &dir.display().to_string())
}

/// Registers a shell command that the watchdog runs once the test binary has exited and its
/// processes were told to stop, before the state directories are removed.
pub(crate) fn run_at_exit(command: &str) -> Result<(), HarnessError> {
    let mut list = watchdog()?.state_list.clone().into_os_string();
    list.push(".run");
    append_line(Path::new(&list), command)
}

fn append_line(path: &Path, line: &str) -> Result<(), HarnessError> {
    use std::io::Write;
    let mut list = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .context(|| format!("opening {}", path.display()))?;
    writeln!(list, "{line}").context(|| format!("writing {}", path.display()))
}

/// How long what the harness starts lives.
#[derive(Clone, Debug)]
pub enum Lifetime {
    /// Until the test binary exits: temporary state, processes in the watchdog's group.
    TestBinary,
    /// Until stopped by [`stop_detached`]: state under this directory, processes in groups of
    /// their own, their IDs listed in `pids` there.
    Detached(PathBuf),
}

/// A directory for one part's state.
pub(crate) fn state_dir(lifetime: &Lifetime, prefix: &str) -> Result<PathBuf, HarnessError> {
    match lifetime {
        Lifetime::TestBinary => {
            let dir = tempfile::Builder::new()
                .prefix(&format!("gantry-{prefix}-"))
                .tempdir()
                .context(|| "creating a temporary directory".into())?
                .keep();
            remove_at_exit(&dir)?;
            Ok(dir)
        }
        Lifetime::Detached(root) => {
            let dir = root.join(prefix);
            std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
            Ok(dir)
        }
    }
}

/// Starts `command` with its output in `log`, living as long as `lifetime` says.
pub(crate) fn spawn_daemon(
    lifetime: &Lifetime,
    command: Command,
    log: &Path,
) -> Result<Child, HarnessError> {
    spawn_daemon_with_stdin(lifetime, command, log, Stdio::null())
}

/// [`spawn_daemon`] with `stdin` as the daemon's standard input (e.g. a locked file the
/// daemon keeps locked for as long as it runs).
pub(crate) fn spawn_daemon_with_stdin(
    lifetime: &Lifetime,
    mut command: Command,
    log: &Path,
    stdin: Stdio,
) -> Result<Child, HarnessError> {
    let out = File::create(log).context(|| format!("creating {}", log.display()))?;
    let err = out
        .try_clone()
        .context(|| format!("opening {}", log.display()))?;
    let program = command.get_program().to_string_lossy().into_owned();
    command.stdin(stdin).stdout(out).stderr(err);
    match lifetime {
        Lifetime::TestBinary => {
            command.process_group(watchdog()?.pgid);
        }
        Lifetime::Detached(_) => {
            command.process_group(0);
        }
    }
    let child = command.spawn().context(|| format!("starting {program}"))?;
    if let Lifetime::Detached(root) = lifetime {
        use std::io::Write;
        let pids = root.join("pids");
        let mut list = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&pids)
            .context(|| format!("opening {}", pids.display()))?;
        writeln!(list, "{}", child.id()).context(|| format!("writing {}", pids.display()))?;
    }
    Ok(child)
}

/// Stops every process group listed in `root/pids` (TERM, then KILL after `grace`) and
/// removes `root`. Returns how many groups were still running.
pub fn stop_detached(root: &Path, grace: Duration) -> Result<usize, HarnessError> {
    let running = stop_groups(root, grace)?;
    if root.exists() {
        std::fs::remove_dir_all(root).context(|| format!("removing {}", root.display()))?;
    }
    Ok(running)
}

/// Stops every process group listed in `root/pids` (TERM, then KILL after `grace`), leaving
/// `root` in place. Returns how many groups were still running.
pub fn stop_groups(root: &Path, grace: Duration) -> Result<usize, HarnessError> {
    let pids = root.join("pids");
    let listed = match std::fs::read_to_string(&pids) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(HarnessError::Io {
                what: format!("reading {}", pids.display()),
                source: e,
            });
        }
    };
    let groups: Vec<u32> = listed
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let signal = |signal: &str, pid: u32| {
        Command::new("kill")
            .args([signal, "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let running: Vec<u32> = groups
        .into_iter()
        .filter(|&pid| signal("-0", pid))
        .collect();
    for &pid in &running {
        signal("-TERM", pid);
    }
    let deadline = Instant::now() + grace;
    while running.iter().any(|&pid| signal("-0", pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for &pid in &running {
        signal("-KILL", pid);
    }
    Ok(running.len())
}

/// A TCP port on 127.0.0.1 that was free a moment ago, for a daemon to listen on.
pub fn free_port() -> Result<u16, HarnessError> {
    free_port_on(Ipv4Addr::LOCALHOST.into())
}

/// A TCP port on `address` (an address of this machine) that was free a moment ago.
///
/// The port comes from below the kernel's ephemeral range and below the NodePort range: a port
/// the kernel handed out (`bind(0)`) can be taken by any outgoing connection before the daemon
/// binds it, and with many tests connecting at once that happened. A port from below is taken
/// only by another listener, which the bind here sees; the counter keeps the tests of one
/// binary from being handed the same port twice.
pub(crate) fn free_port_on(address: IpAddr) -> Result<u16, HarnessError> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ports = harness_ports();
    let size = u32::from(ports.end - ports.start);
    // Test binaries of other runs on this machine start elsewhere in the range.
    let offset = std::process::id().wrapping_mul(7919) % size;
    for _ in 0..size {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = ports.start + ((offset + step) % size) as u16;
        if TcpListener::bind((address, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(HarnessError::Other(format!(
        "no free port on {address} in {}..{}",
        ports.start, ports.end
    )))
}

/// The ports [`free_port_on`] hands out: up to 15,000 ports below both the kernel's ephemeral
/// range (`net.ipv4.ip_local_port_range`) and Kubernetes' NodePort range (30000-32767).
fn harness_ports() -> Range<u16> {
    static PORTS: OnceLock<Range<u16>> = OnceLock::new();
    PORTS.get_or_init(read_harness_ports).clone()
}

fn read_harness_ports() -> Range<u16> {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let end = ephemeral_start.min(30000);
    let start = end.saturating_sub(15000).max(1024);
    start..end.max(start + 1)
}

/// The last `lines` lines of a log file, for error messages.
pub(crate) fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits until something accepts connections on `127.0.0.1:port`, or the process exits.
pub(crate) fn wait_for_port(
    what: &str,
    port: u16,
    child: &mut Child,
    log: &Path,
    timeout: Duration,
) -> Result<(), HarnessError> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    wait_for_address(what, address, child, log, timeout)
}

/// Waits until something accepts connections on `address`, or the process exits.
pub(crate) fn wait_for_address(
    what: &str,
    address: SocketAddr,
    child: &mut Child,
    log: &Path,
    timeout: Duration,
) -> Result<(), HarnessError> {
    wait_for(what, child, log, timeout, || {
        TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
    })
}

/// Waits until `ready` says so, failing with the end of `log` when the process exits first or
/// `timeout` passes.
pub(crate) fn wait_for(
    what: &str,
    child: &mut Child,
    log: &Path,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), HarnessError> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(HarnessError::Other(format!(
                "{what} exited with {status}; last lines of {}:\n{}",
                log.display(),
                tail(log, 30)
            )));
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::NotReady {
                what: what.into(),
                seconds: timeout.as_secs(),
                log_path: log.into(),
                log: tail(log, 30),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Finds a program on PATH, with an error that says which package provides it.
pub(crate) fn require_program(name: &str, package: &str) -> Result<PathBuf, HarnessError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            HarnessError::Other(format!(
                "`{name}` is not on PATH; install the Debian package `{package}` (`.ci/run` does)"
            ))
        })
}
