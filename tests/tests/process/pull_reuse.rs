//! Bundles of one image share its pull: the provisioner keeps the canonical tarball of a pull
//! for a while, and another bundle of the same image digest, platform, limits and credentials
//! stores it without asking the registry for its blobs. A bundle with other credentials pulls
//! for itself.

use std::collections::BTreeMap;

use gantry_api::Bundle;
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::json;

const PULLED: &str = "gantry_provisioner_bytes_pulled_total";
const REUSED: &str = "gantry_provisioner_pulls_reused_total";

#[tokio::test]
async fn bundles_of_one_image_share_its_pull_unless_their_credentials_differ() {
    const ID: &str = "gantry.dev/plain-pull-reuse";
    let client = shared_gantry_client().await;
    let installation = start_installation(&client, ID, &[]).await;
    let (provisioner, class) = (&installation.provisioner, installation.class.clone());
    let prefix = unique_name("reuse");
    let image = push_config_map(&format!("{prefix}/app:v1"), "shared", None, "one image").await;
    let install = |name: String, pull_secret: Option<String>| {
        let (client, image, class) = (client.clone(), image.clone(), class.clone());
        async move {
            ensure_namespace(&client, &name).await;
            let mut spec = spec_of_class(&image, Some(&name), &class);
            spec.pull_secret = pull_secret;
            create_bundle(&client, &name, spec).await;
            wait_bundle(&client, &name, "Ready", is_ready).await
        }
    };

    let first = install(format!("{prefix}-0"), None).await;
    let pulled_once = provisioner.counter(PULLED).await;
    assert!(pulled_once > 0.0, "the first bundle pulled the image");
    assert_eq!(provisioner.counter(REUSED).await, 0.0);

    let mut others: Vec<Bundle> = Vec::new();
    for i in 1..=2 {
        others.push(install(format!("{prefix}-{i}"), None).await);
    }
    assert_eq!(
        provisioner.counter(PULLED).await,
        pulled_once,
        "no layer was pulled again for bundles of the same image"
    );
    assert_eq!(provisioner.counter(REUSED).await, 2.0);
    let first_status = first.status.clone().unwrap();
    for bundle in &others {
        let name = bundle.metadata.name.as_deref().unwrap();
        let status = bundle.status.clone().unwrap();
        // Status says what a pull of its own would have said.
        assert_eq!(status.content_digest, first_status.content_digest, "{name}");
        assert_eq!(
            status.manifest_digest, first_status.manifest_digest,
            "{name}"
        );
        assert_eq!(status.platform, first_status.platform, "{name}");
        // Its content is stored under its own name, as the storage server serves it.
        let url = status.content_url.expect("a content URL");
        assert!(url.contains(&format!("/bundles/{name}/")), "{url}");
        let body = reqwest::get(&url)
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .bytes()
            .await
            .unwrap();
        use sha2::Digest;
        let digest: String = sha2::Sha256::digest(&body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let digest = format!("sha256:{digest}");
        assert_eq!(Some(digest), status.content_digest, "{name}");
        assert_config_map(&client, name, "shared", Some("one image")).await;
    }

    // Other credentials (a pull secret, here for a registry this image is not on): a pull of
    // its own.
    let secret = unique_name("other-credentials");
    let mut data = BTreeMap::new();
    data.insert(
        ".dockerconfigjson".to_string(),
        json!({ "auths": { "registry.test": { "auth": "dXNlcjpwYXNz" } } }).to_string(),
    );
    Api::<Secret>::namespaced(client.clone(), &installation.namespace)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(secret.clone()),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/dockerconfigjson".into()),
                string_data: Some(data),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    install(format!("{prefix}-other"), Some(secret)).await;
    assert_eq!(
        provisioner.counter(PULLED).await,
        2.0 * pulled_once,
        "a bundle with other credentials pulled the image itself"
    );
    assert_eq!(provisioner.counter(REUSED).await, 2.0);
}
