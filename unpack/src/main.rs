//! The unpack program of `pullMode: Node`. `install` (in the provisioner's image) copies this
//! executable into a volume; `run` (in the bundle image, from that volume) validates
//! `/manifests` as a direct pull does, stores the canonical tarball with the Pod's projected
//! ServiceAccount token, and reports through the termination message.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use gantry_api::storage::client::{StorageClient, Token};
use gantry_api::unpack::fit_termination_message;
use gantry_image::EffectiveLimits;
use gantry_unpack::{UnpackFailure, unpack};

#[derive(Parser)]
#[command(
    version,
    about = "Unpacks a bundle image's /manifests to Gantry's storage server"
)]
struct Flags {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Copies this program to `destination` (executable).
    Install { destination: PathBuf },
    /// Validates `<root>/manifests`, stores its canonical tarball and reports.
    Run(RunFlags),
}

#[derive(clap::Args)]
struct RunFlags {
    /// Bundle the content is stored for.
    #[arg(long)]
    bundle: String,
    #[arg(long)]
    storage_url: String,
    /// File holding the projected ServiceAccount token (audience gantry-storage).
    #[arg(long)]
    storage_token_file: PathBuf,
    /// Directory holding `manifests/`.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Writable directory for the tarball.
    #[arg(long)]
    scratch_dir: PathBuf,
    #[arg(long, default_value = "/dev/termination-log")]
    termination_log: PathBuf,
    #[arg(long, default_value_t = EffectiveLimits::DEFAULT_MAX_COMPRESSED_BYTES)]
    max_compressed_bytes: u64,
    #[arg(long, default_value_t = EffectiveLimits::DEFAULT_MAX_UNCOMPRESSED_BYTES)]
    max_uncompressed_bytes: u64,
    #[arg(long, default_value_t = EffectiveLimits::DEFAULT_MAX_FILES)]
    max_files: u64,
    #[arg(long, default_value_t = EffectiveLimits::DEFAULT_MAX_FILE_BYTES)]
    max_file_bytes: u64,
    #[arg(long, default_value_t = EffectiveLimits::DEFAULT_MAX_OBJECTS)]
    max_objects: u64,
}

fn install(destination: &Path) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding this program")?;
    std::fs::copy(&me, destination)
        .with_context(|| format!("copying {} to {}", me.display(), destination.display()))?;
    let mut perms = std::fs::metadata(destination)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(destination, perms)?;
    Ok(())
}

async fn run(flags: RunFlags) -> ExitCode {
    let limits = EffectiveLimits {
        max_compressed_bytes: flags.max_compressed_bytes,
        max_uncompressed_bytes: flags.max_uncompressed_bytes,
        max_files: flags.max_files,
        max_file_bytes: flags.max_file_bytes,
        max_objects: flags.max_objects,
    };
    let storage = StorageClient::new(
        &flags.storage_url,
        Token::File(flags.storage_token_file),
        None,
    )
    .map_err(|e| UnpackFailure::Other(e.to_string()));
    let scratch = tempfile_dir(&flags.scratch_dir);
    let result = match (storage, scratch) {
        (Ok(storage), Ok(scratch)) => {
            let result = unpack(&flags.root, &scratch, &limits, &flags.bundle, &storage).await;
            let _ = std::fs::remove_dir_all(&scratch);
            result
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let (message, code) = match result {
        Ok(report) => match serde_json::to_string(&report) {
            Ok(json) => (json, 0),
            Err(e) => (format!("encoding the report: {e}"), 1),
        },
        Err(failure) => (failure.to_string(), failure.exit_code()),
    };
    if code == 0 {
        println!("{message}");
    } else {
        eprintln!("{message}");
    }
    if let Err(e) = std::fs::write(&flags.termination_log, fit_termination_message(&message)) {
        eprintln!("writing {}: {e}", flags.termination_log.display());
    }
    ExitCode::from(code as u8)
}

fn tempfile_dir(parent: &Path) -> Result<PathBuf, UnpackFailure> {
    let dir = parent.join(format!("scratch-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| UnpackFailure::Other(format!("creating {}: {e}", dir.display())))?;
    Ok(dir)
}

fn main() -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Flags::parse().command {
        Command::Install { destination } => {
            install(&destination)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(flags) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the runtime")?;
            Ok(runtime.block_on(run(flags)))
        }
    }
}
