//! `kubectl-bundle`: the kubectl plugin for Gantry bundles (`kubectl bundle ...` once it is on
//! the PATH).
#![forbid(unsafe_code)]

mod commands;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // kube and the registry client share rustls; one provider for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
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
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", commands::causes(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
