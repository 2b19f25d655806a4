//! The install manifests work: they pass server-side validation and Pod Security admission,
//! and with them applied, the storage server and the provisioner, running with the tokens of
//! the ServiceAccounts the manifests create (not as admin), install a bundle end to end.
//! A control plane of its own: its provisioner must be the only one, and the manifests install
//! their own namespace, RBAC and classes (the default class `plain` among them).

use std::process::Output;

use gantry_api::Bundle;
use gantry_tests::e2e::*;
use gantry_tests::{
    Provisioner, ProvisionerOptions, StorageOptions, StorageServer, registry, unique_name,
    workspace_root,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// This module's cluster, without a Gantry: the test runs the provisioner as the manifests say.
static CLUSTER: Isolated = Isolated::new();

/// `kubectl ARGS` as admin of this module's cluster (held by the calling test).
fn kubectl(args: &[&str]) -> Output {
    CLUSTER
        .get()
        .kubectl()
        .args(args)
        .output()
        .expect("running kubectl")
}

fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn bind(client: &kube::Client, role: &str, namespace: &str, account: &str) {
    let name = format!("{role}-{account}");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
        "subjects": [{ "kind": "ServiceAccount", "name": account, "namespace": namespace }]
    }))
    .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .patch(
            &name,
            &PatchParams::apply("gantry-tests").force(),
            &Patch::Apply(&binding),
        )
        .await
        .unwrap();
}

/// Whether the client's user may `verb` `resource` cluster-wide (a SelfSubjectAccessReview).
async fn may(client: &kube::Client, verb: &str, group: &str, resource: &str) -> bool {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": { "resourceAttributes": { "verb": verb, "group": group, "resource": resource } }
    }))
    .unwrap();
    reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("a SelfSubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn the_manifests_install_a_working_gantry() {
    let plane = CLUSTER.get();
    let client = plane.client().await;
    let manifests = workspace_root().join("manifests");
    let manifests = manifests.to_str().unwrap();

    // Server-side validation of everything, Pod Security admission included. A dry run
    // creates nothing, so the namespace the other objects live in goes first, for real.
    let namespace = workspace_root().join("manifests/00-namespace.yaml");
    assert_ok(
        &kubectl(&["apply", "--server-side", "-f", namespace.to_str().unwrap()]),
        "applying the namespace",
    );
    let dry_run = kubectl(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        manifests,
    ]);
    assert_ok(&dry_run, "kubectl apply --dry-run=server");
    let applied = kubectl(&["apply", "--server-side", "-f", manifests]);
    assert_ok(&applied, "kubectl apply");

    // Pods of both Deployments are admitted in the restricted namespace (admission checks
    // Pods, not Deployments, so each template is submitted as a Pod).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    for name in ["gantry-storage", "gantry-provisioner"] {
        let deployment = deployments.get(name).await.expect("the Deployment exists");
        let template = deployment.spec.unwrap().template;
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": format!("{name}-admission"), "namespace": NAMESPACE },
            "spec": template.spec,
        });
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), pod.to_string()).unwrap();
        let admitted = kubectl(&[
            "create",
            "--dry-run=server",
            "-f",
            file.path().to_str().unwrap(),
        ]);
        assert_ok(
            &admitted,
            &format!("a Pod of {name} under Pod Security restricted"),
        );
        assert!(
            !String::from_utf8_lossy(&admitted.stderr).contains("violate"),
            "{}",
            String::from_utf8_lossy(&admitted.stderr)
        );
    }

    // The storage server runs with its own ServiceAccount's token, as it would in the cluster.
    let storage_token = plane
        .service_account_token(NAMESPACE, "gantry-storage")
        .await;
    let storage_kubeconfig = plane.token_kubeconfig("gantry-storage", &storage_token);
    let storage = StorageServer::start(StorageOptions {
        kubeconfig: Some(storage_kubeconfig),
        args: vec!["--token-audience=gantry-storage".into()],
    });

    // The provisioner: its ServiceAccount for the API, a token for the storage audience.
    let api_token = plane
        .service_account_token(NAMESPACE, "gantry-provisioner")
        .await;
    let provisioner_kubeconfig = plane.token_kubeconfig("gantry-provisioner", &api_token);
    let content_token = plane
        .service_account_token_for(NAMESPACE, "gantry-provisioner", &["gantry-storage"])
        .await;
    let _provisioner = Provisioner::start(ProvisionerOptions {
        kubeconfig: provisioner_kubeconfig,
        storage_url: storage.url().to_string(),
        storage_token: Some(content_token.clone()),
        namespace: NAMESPACE.into(),
        args: vec!["--backoff-base=200ms".into(), "--backoff-cap=2s".into()],
    });

    // The shipped default class, told that the test registry speaks plain HTTP.
    let classes: Api<gantry_api::ProvisionerClass> = Api::all(client.clone());
    let patch = json!({ "spec": { "insecureRegistries": [registry().host()] } });
    classes
        .patch("plain", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let ns = unique_namespace(&client, "shipped").await;
    push_config_map(
        &format!("{ns}/app:v1"),
        "installed",
        None,
        "by-the-manifests",
    )
    .await;
    let name = unique_name("shipped");
    create_bundle(
        &client,
        &name,
        spec(&in_registry(&format!("{ns}/app:v1")), Some(&ns)),
    )
    .await;
    let bundle = wait_bundle(&client, &name, "Ready with the shipped RBAC", is_ready).await;
    assert_config_map(&client, &ns, "installed", Some("by-the-manifests")).await;
    // Applied as the shipped gantry-applier, not as the provisioner, which may not do it
    // itself: its own permissions are its CRDs, Events and impersonation.
    let applier = bundle
        .status
        .as_ref()
        .and_then(|s| s.requested_permissions.as_ref())
        .and_then(|p| p.service_account.clone())
        .expect("requestedPermissions names the ServiceAccount");
    assert_eq!(
        (applier.namespace.as_str(), applier.name.as_str()),
        (NAMESPACE, "gantry-applier")
    );
    let provisioner = plane.token_client("gantry-provisioner", &api_token).await;
    for (verb, group, resource, allowed) in [
        ("create", "", "configmaps", false),
        (
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            false,
        ),
        ("list", "", "secrets", false),
        ("impersonate", "", "serviceaccounts", true),
        ("patch", "gantry.dev", "bundles", true),
    ] {
        assert_eq!(
            may(&provisioner, verb, group, resource).await,
            allowed,
            "the provisioner's own identity: {verb} {resource}"
        );
    }

    // The stored content reads with the provisioner's token; a reader without the uploader
    // role may read it but not write.
    let url = bundle.status.unwrap().content_url.unwrap();
    let http = reqwest::Client::new();
    // A request of `method` to the stored content, authenticated with `token`.
    let to_content =
        |method: reqwest::Method, token: &str| http.request(method, &url).bearer_auth(token);
    let read = to_content(reqwest::Method::GET, &content_token)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let body = read.bytes().await.unwrap();
    plane.service_account_token(&ns, "reader").await;
    bind(&client, "gantry-bundle-reader", &ns, "reader").await;
    let reader_token = plane
        .service_account_token_for(&ns, "reader", &["gantry-storage"])
        .await;
    let read = to_content(reqwest::Method::GET, &reader_token)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200, "the reader reads");
    let write = to_content(reqwest::Method::PUT, &reader_token)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 403, "the reader may not upload");
    let nobody = http.get(&url).send().await.unwrap();
    assert_eq!(nobody.status(), 401, "no token, no content");

    // The unpack Pods' identity (pullMode Node) uploads content and does nothing else: it
    // reads no content, deletes none, and may do nothing in the Kubernetes API.
    let unpack_token = plane
        .service_account_token_for(NAMESPACE, "gantry-unpack", &["gantry-storage"])
        .await;
    let upload = to_content(reqwest::Method::PUT, &unpack_token)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert!(
        upload.status().is_success(),
        "gantry-unpack uploads: {}",
        upload.status()
    );
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let refused = to_content(method.clone(), &unpack_token)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403, "gantry-unpack may not {method}");
    }
    let unpack_api_token = plane
        .service_account_token(NAMESPACE, "gantry-unpack")
        .await;
    let unpack = plane.token_client("gantry-unpack", &unpack_api_token).await;
    for (verb, group, resource) in [
        ("get", "", "pods"),
        ("list", "", "secrets"),
        ("create", "", "configmaps"),
        ("get", "gantry.dev", "bundles"),
        ("impersonate", "", "serviceaccounts"),
    ] {
        assert!(
            !may(&unpack, verb, group, resource).await,
            "gantry-unpack may not {verb} {resource}"
        );
    }
}

#[tokio::test]
async fn editors_cannot_approve_and_approvers_can() {
    let plane = CLUSTER.get();
    let client = plane.client().await;
    let manifests = workspace_root().join("manifests");
    let roles = kubectl(&[
        "apply",
        "--server-side",
        "-f",
        manifests.join("06-rbac-users.yaml").to_str().unwrap(),
    ]);
    assert_ok(&roles, "applying the user roles");
    let ns = unique_name("people");
    plane.service_account_token(&ns, "editor").await;
    plane.service_account_token(&ns, "approver").await;
    bind(&client, "gantry-bundle-editor", &ns, "editor").await;
    bind(&client, "gantry-bundle-approver", &ns, "approver").await;
    let editor = plane
        .token_client("editor", &plane.service_account_token(&ns, "editor").await)
        .await;
    let approver = plane
        .token_client(
            "approver",
            &plane.service_account_token(&ns, "approver").await,
        )
        .await;

    let name = unique_name("reviewed");
    let editors: Api<Bundle> = Api::all(editor);
    editors
        .create(
            &PostParams::default(),
            &Bundle::new(&name, spec(&in_registry("x/y:v1"), Some(&ns))),
        )
        .await
        .expect("an editor creates bundles");
    let approval = json!({
        "apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle", "metadata": { "name": name },
        "status": { "approval": { "decision": "Approved", "digest": format!("sha256:{}", "a".repeat(64)) } }
    });
    match editors
        .patch_status(
            &name,
            &PatchParams::apply("kubectl-bundle").force(),
            &Patch::Apply(&approval),
        )
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("an editor must not approve, got {other:?}"),
    }
    let approvers: Api<Bundle> = Api::all(approver);
    let approved = approvers
        .patch_status(
            &name,
            &PatchParams::apply("kubectl-bundle").force(),
            &Patch::Apply(&approval),
        )
        .await
        .expect("an approver approves");
    assert_eq!(
        approved.status.and_then(|s| s.approval).map(|a| a.decision),
        Some(gantry_api::ApprovalDecision::Approved)
    );
}
