//! Writes the CRDs under `manifests/` (or the directory given as the only argument):
//! `crds/<group>_<plural>.yaml` and the combined `01-crds.yaml`; without an argument, also the
//! Helm chart's copies, `charts/gantry/crds/<group>_<plural>.yaml`.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let given = std::env::args_os().nth(1).map(PathBuf::from);
    let chart = given.is_none().then(|| root.join("charts/gantry"));
    let dir = given.unwrap_or_else(|| root.join("manifests"));
    let files = gantry_api::crd::files().context("serialising the CRDs")?;
    // The chart's crds/ holds the same files as manifests/crds/ (helm installs them first).
    let chart_files = chart.iter().flat_map(|chart| {
        files
            .iter()
            .filter(|(name, _)| name.starts_with("crds/"))
            .map(move |(name, yaml)| (chart.join(name), yaml.clone()))
    });
    let all: Vec<(PathBuf, String)> = files
        .iter()
        .map(|(name, yaml)| (dir.join(name), yaml.clone()))
        .chain(chart_files)
        .collect();
    for (path, yaml) in all {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
