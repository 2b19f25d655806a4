//! A closed standard output (`kubectl bundle ... | head -1`) ends a command quietly, with
//! success, as it ends kubectl: whether the command wrote with `println!` or returned the
//! write's error.

use std::process::{Command, Output};

/// Runs the plugin with a standard output whose reading end is closed already.
fn with_closed_stdout(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_kubectl-bundle"))
        .args(args)
        .stdout(writer)
        .output()
        .expect("running kubectl-bundle")
}

#[test]
fn a_closed_standard_output_is_not_an_error() {
    // `completion` returns the write's error; `__complete` prints with `println!`.
    for args in [&["completion", "bash"][..], &["__complete", ""]] {
        let out = with_closed_stdout(args);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{args:?}: {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
