//! `plugin`: provisioner plugins (docs/plugins.md). `plugin check URL` runs the conformance
//! suite of the plugin contract against a running plugin.

mod check;
mod http;
mod tokens;

use clap::{Args, Subcommand};

use super::cluster::GlobalArgs;

#[derive(Args, Debug)]
pub struct PluginArgs {
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Subcommand, Debug)]
enum PluginCommand {
    /// Run the conformance suite of the provisioner plugin contract v1 (docs/plugins.md)
    /// against the plugin serving at URL; one `PASS`/`FAIL` line per check, exit status 1
    /// when any fails.
    Check(check::CheckArgs),
}

pub async fn plugin(global: &GlobalArgs, args: PluginArgs) -> anyhow::Result<()> {
    match args.command {
        PluginCommand::Check(args) => check::check(global, args).await,
    }
}
