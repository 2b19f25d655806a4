//! OLM `registry+v1` bundles as OperatorHub ships them, for the tests of `gantry.dev/registry`:
//! the argocd-operator v0.6.0 bundle of `rules/testdata/registry-v1/` (with OLM v1's rendering
//! of it beside), packed by umoci into one layer holding `manifests/` and `metadata/` (as
//! `opm` and `operator-sdk` build bundle images) and pushed by skopeo.

use std::path::{Path, PathBuf};

use crate::{ImageConfig, push_rootfs, registry, workspace_root};

/// The argocd-operator v0.6.0 bundle's test data: `bundle/` and `expected/` (OLM v1's
/// rendering in each install mode).
pub fn argocd_testdata() -> PathBuf {
    workspace_root().join("rules/testdata/registry-v1/argocd-operator.v0.6.0")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Pushes the argocd-operator bundle, changed by `edit` (given its root directory), to the
/// shared registry as `repository:tag`; the pushed reference.
pub fn push_argocd_bundle(repository_tag: &str, edit: impl FnOnce(&Path)) -> String {
    let work = tempfile::tempdir().unwrap();
    let rootfs = work.path().join("rootfs");
    copy_dir(&argocd_testdata().join("bundle"), &rootfs);
    edit(&rootfs);
    push_rootfs(
        &rootfs,
        &ImageConfig::default(),
        registry().host(),
        repository_tag,
        work.path(),
    )
    .expect("pushing the bundle image")
}

/// Makes the bundle at `root` own its cluster-scoped objects: the API group `argoproj.io`
/// becomes `GROUP.argoproj.io` (the CRDs, the CSV's owned CRDs and permissions), the service
/// account `GROUP-controller-manager` (with the permissions, the hashed names of its roles) and
/// the metrics reader ClusterRole `GROUP-metrics-reader`, so that no other test's
/// argocd-operator bundle owns any of them.
pub fn own_cluster_objects(root: &Path, group: &str) {
    for entry in std::fs::read_dir(root.join("manifests")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("argoproj.io", &format!("{group}.argoproj.io"))
            .replace(
                "argocd-operator-metrics-reader",
                &format!("{group}-metrics-reader"),
            )
            // The hashed names of the roles cover the permissions' service account: rules that
            // name no argoproj.io resource still give names of their own.
            .replace(
                "argocd-operator-controller-manager",
                &format!("{group}-controller-manager"),
            );
        std::fs::write(&path, text).unwrap();
    }
}
