//! Writes the CRDs under `manifests/` (or the directory given as the only argument):
//! `crds/<group>_<plural>.yaml` and the combined `01-crds.yaml`.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests"));
    for (name, yaml) in gantry_api::crd::files().context("serialising the CRDs")? {
        let path = dir.join(&name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
