//! `kubectl-bundle`: the kubectl plugin for Gantry bundles (`kubectl bundle ...` once it is on
//! the PATH).
#![forbid(unsafe_code)]

mod commands;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // kube and the registry client share rustls; one provider for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    commands::quiet_broken_pipe_panics();
    let cli = commands::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // A `println!` to a closed standard output panics: caught here, it ends the command as a
    // failed write returning an error does.
    commands::exit_code(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || runtime.block_on(commands::run(cli)),
    )))
}
