//! Sub-commands. Each lives in its own module; shared code belongs in the libraries.

mod image;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-bundle",
    bin_name = "kubectl bundle",
    version,
    about = "Author and manage Gantry bundles"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate a bundle directory and push it as a plain+v0 image; prints `repo@sha256:...`.
    Push(image::PushArgs),
    /// Pull a bundle image, verify and validate it, and write its manifests to a directory.
    Pull(image::PullArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Push(args) => image::push(args).await,
        Command::Pull(args) => image::pull(args).await,
    }
}
