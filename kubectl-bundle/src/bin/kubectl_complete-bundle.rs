//! `kubectl_complete-bundle`: what kubectl runs to complete `kubectl bundle ...` (kubectl looks
//! for `kubectl_complete-<plugin>` on the PATH). It asks `kubectl-bundle` beside it (else the
//! one on the PATH) for the candidates: `kubectl-bundle __complete -- ARGS`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn plugin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            // The real file, so that a link to it on the PATH still finds its neighbour.
            let exe = exe.canonicalize().unwrap_or(exe);
            let beside = exe.parent()?.join("kubectl-bundle");
            beside.is_file().then_some(beside)
        })
        .unwrap_or_else(|| PathBuf::from("kubectl-bundle"))
}

fn main() -> ExitCode {
    let plugin = plugin();
    match Command::new(&plugin)
        .arg("__complete")
        .arg("--")
        .args(std::env::args_os().skip(1))
        .status()
    {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!(
                "kubectl_complete-bundle: cannot run {}: {e}",
                plugin.display()
            );
            ExitCode::FAILURE
        }
    }
}
