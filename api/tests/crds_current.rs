//! The committed CRDs must be exactly what `crdgen` generates.

use std::path::PathBuf;

#[test]
fn committed_crds_match_crdgen() {
    let manifests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    let files = gantry_api::crd::files().expect("CRDs serialise");
    let stale: Vec<&str> = files
        .iter()
        .filter(|(name, yaml)| {
            std::fs::read_to_string(manifests.join(name)).ok().as_ref() != Some(yaml)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(manifests.join("crds"))
        .map(|entries| {
            entries
                .filter_map(|e| Some(format!("crds/{}", e.ok()?.file_name().into_string().ok()?)))
                .collect()
        })
        .unwrap_or_default();
    on_disk.sort();
    let mut expected: Vec<String> = files
        .iter()
        .map(|(name, _)| name.clone())
        .filter(|name| name.starts_with("crds/"))
        .collect();
    expected.sort();
    assert!(
        stale.is_empty() && on_disk == expected,
        "manifests/ holds stale CRDs (stale: {stale:?}, in crds/: {on_disk:?}, expected: {expected:?}); \
         run `cargo run -p gantry-api --bin crdgen`"
    );
}
