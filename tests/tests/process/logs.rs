//! The logs of `gantry-provisioner` and `gantry-storage` are plain text, without colour codes,
//! when stderr is not a terminal (a file, a pipe, a log collector).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use gantry_tests::binary;

/// Starts `command` with stderr on a pipe and returns its first log line holding `INFO`.
fn first_info_line(mut command: Command) -> String {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the binary");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("INFO") && tx.send(line).is_err() {
                break;
            }
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    line.expect("an INFO log line within 60s")
}

#[test]
fn logs_are_plain_text_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let mut storage = Command::new(binary("gantry-storage", "gantry-storage"));
    storage
        .arg("--root")
        .arg(&root)
        .args(["--listen", "127.0.0.1:0", "--insecure-no-auth"])
        .env_remove("NO_COLOR");

    // The provisioner logs before it reaches the API server: an unreachable one will do.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t\ncurrent-context: c\n",
    )
    .unwrap();
    let mut provisioner = Command::new(binary("gantry-provisioner", "gantry-provisioner"));
    provisioner
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--storage-url=http://127.0.0.1:9",
            "--metrics-address=127.0.0.1:0",
        ])
        .arg("--scratch-dir")
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR");

    for command in [storage, provisioner] {
        let program = command.get_program().to_string_lossy().into_owned();
        let line = first_info_line(command);
        assert!(
            !line.contains('\u{1b}'),
            "{program} logs colour codes into a pipe: {line:?}"
        );
    }
}
