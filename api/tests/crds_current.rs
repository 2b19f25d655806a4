//! The committed CRDs must be exactly what `crdgen` generates.

use std::path::PathBuf;

#[test]
fn committed_crds_match_crdgen() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let files = gantry_api::crd::files().expect("CRDs serialise");
    let mut stale = Vec::new();
    for (name, yaml) in &files {
        let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if &committed != yaml {
            stale.push(name.clone());
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    on_disk.sort();
    let mut expected: Vec<String> = files.into_iter().map(|(name, _)| name).collect();
    expected.sort();
    assert!(
        stale.is_empty() && on_disk == expected,
        "manifests/crds is out of date (stale: {stale:?}, on disk: {on_disk:?}, expected: {expected:?}); \
         run `cargo run -p gantry-api --bin crdgen`"
    );
}
