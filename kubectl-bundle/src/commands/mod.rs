//! Sub-commands. Each lives in its own module; shared code belongs in the libraries.

mod cluster;
mod complete;
mod control;
mod decision;
mod diff;
mod health;
mod history;
mod image;
mod inspect;
mod install;
mod jsonpath;
mod list;
mod output;
mod pin;
mod plugin;
mod review;
mod rollback;
mod scope;
mod status;
mod system;
#[cfg(test)]
mod testing;
mod ui;

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-bundle",
    bin_name = "kubectl bundle",
    version,
    about = "Author and manage Gantry bundles"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: cluster::GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate a bundle directory and push it as a plain+v0 image; prints `repo@sha256:...`.
    Push(image::push::PushArgs),
    /// Pull a bundle image, verify and validate it, and write its manifests to a directory.
    Pull(image::pull::PullArgs),
    /// Check a bundle directory as push does, without a registry.
    Validate(image::dir::ValidateArgs),
    /// Copy a bundle image pushed with --pin-images, and every image its lock names, to
    /// another registry, and push the bundle naming the copies.
    Relocate(image::relocate::RelocateArgs),
    /// List bundles with their class, phase, readiness, health, digest and approval.
    List(list::ListArgs),
    /// Show bundles: conditions, digests, requested permissions, inventory, recent Events.
    Status(status::StatusArgs),
    /// Show a bundle's Events, and the Warning Events of the objects it manages.
    Events(inspect::EventsArgs),
    /// Show the objects bundles manage, whether they exist and how ready they are.
    Tree(inspect::TreeArgs),
    /// Show the digests a bundle installed, newest first, with when and how they were approved.
    History(history::HistoryArgs),
    /// Pin a bundle to a digest it installed before (`spec.image` becomes `repo@DIGEST`).
    Rollback(rollback::RollbackArgs),
    /// Show what applying a bundle's stored content (awaiting approval, or current), or a bundle
    /// directory (`--dir`), would change: a server-side dry run per object, as a unified diff,
    /// and what would be pruned.
    /// Exit status 0: no changes, 1: changes, 2: an error.
    Diff(diff::DiffArgs),
    /// Approve the digest a bundle resolves to, after showing what it will create.
    Approve(decision::ApproveArgs),
    /// Deny the digest a bundle resolves to: it is not installed, or, when it is installed
    /// already, it stays as it is; a denial removes nothing.
    ///
    /// The objects installed before stay in place, whether of an earlier digest or of this one
    /// (an approved digest can be denied too). The bundle is Denied until the digest is
    /// approved after all or the image resolves to another digest. Deleting the bundle still
    /// uninstalls it.
    Deny(decision::DenyArgs),
    /// Stop reconciling a bundle: nothing is applied, pruned or repaired until it is resumed.
    Suspend(control::SuspendArgs),
    /// Reconcile a suspended bundle again.
    Resume(control::ResumeArgs),
    /// Reconcile a bundle now (skipping its backoff, resolving its tag again) and wait for the
    /// outcome.
    Reconcile(control::ReconcileArgs),
    /// Serve a local web page to review and decide on bundles, with your credentials.
    Ui(ui::UiArgs),
    /// Print the plugin's version, the API server's and the controller's.
    Version(system::VersionArgs),
    /// Check that Gantry can serve bundles: CRDs, provisioner, leader, storage, classes.
    Check(system::check::CheckArgs),
    /// Install Gantry (CRDs, RBAC, storage server, provisioner, default classes) from the
    /// manifests of this plugin's version, and wait until it is ready.
    Install(install::InstallArgs),
    /// Remove what `install` created, in reverse order; refuses while Bundles exist unless
    /// told to delete them.
    Uninstall(install::UninstallArgs),
    /// Check a provisioner plugin against the plugin contract (`plugin check URL`).
    Plugin(plugin::PluginArgs),
    /// Print a shell completion script for kubectl-bundle.
    #[command(
        after_help = "Examples:\n  source <(kubectl bundle completion bash)\n  kubectl bundle completion zsh > \"${fpath[1]}/_kubectl-bundle\"\n  kubectl bundle completion fish > ~/.config/fish/completions/kubectl-bundle.fish"
    )]
    Completion {
        /// The shell.
        shell: Shell,
    },
    /// Completion candidates for kubectl (`kubectl_complete-bundle` runs this).
    #[command(name = "__complete", hide = true)]
    Complete {
        /// The words after `kubectl bundle`, the last one being completed.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
}

pub use output::{causes, exit_code, quiet_broken_pipe_panics};

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = &cli.global;
    global.init_logging();
    let done = match cli.command {
        // Its exit status tells whether anything would change, as `kubectl diff`'s does.
        Command::Diff(args) => return Ok(diff::diff(global, args).await),
        Command::Push(args) => image::push::push(args).await,
        Command::Pull(args) => image::pull::pull(args).await,
        Command::Validate(args) => image::dir::validate(global, args).await,
        Command::Relocate(args) => image::relocate::relocate(args).await,
        Command::List(args) => list::list(global, args).await,
        Command::Status(args) => status::status(global, args).await,
        Command::Events(args) => inspect::events(global, args).await,
        Command::Tree(args) => inspect::tree(global, args).await,
        Command::History(args) => history::history(global, args).await,
        Command::Rollback(args) => rollback::rollback(global, args).await,
        Command::Approve(args) => decision::approve(global, args).await,
        Command::Deny(args) => decision::deny(global, args).await,
        Command::Suspend(args) => control::suspend(global, args).await,
        Command::Resume(args) => control::resume(global, args).await,
        Command::Reconcile(args) => control::reconcile(global, args).await,
        Command::Ui(args) => ui::ui(global, args).await,
        Command::Version(args) => system::version(global, args).await,
        Command::Check(args) => system::check::check(global, args).await,
        Command::Install(args) => install::install(global, args).await,
        Command::Uninstall(args) => install::uninstall(global, args).await,
        Command::Plugin(args) => plugin::plugin(global, args).await,
        Command::Completion { shell } => {
            let mut command = Cli::command();
            // Written at once, so that a closed standard output is an error, not a panic.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "kubectl-bundle", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script).map_err(Into::into)
        }
        Command::Complete { words } => {
            let mut command = Cli::command();
            command.build();
            complete::print(&command, &words).await;
            Ok(())
        }
    };
    done.map(|()| ExitCode::SUCCESS)
        .map_err(cluster::name_the_server)
}
