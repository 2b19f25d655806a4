//! Sub-commands. Each lives in its own module; shared code belongs in the libraries.

mod image;
mod review;

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
    /// List bundles with their class, phase, readiness, digest and approval.
    List(review::ListArgs),
    /// Show a bundle: conditions, digests, requested permissions, inventory, recent Events.
    Status(review::StatusArgs),
    /// Approve the digest a bundle resolves to, after showing what it will create.
    Approve(review::ApproveArgs),
    /// Deny the digest a bundle resolves to: nothing of it is installed.
    Deny(review::DenyArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Push(args) => image::push(args).await,
        Command::Pull(args) => image::pull(args).await,
        Command::List(args) => review::list(args).await,
        Command::Status(args) => review::status(args).await,
        Command::Approve(args) => review::approve(args).await,
        Command::Deny(args) => review::deny(args).await,
    }
}
