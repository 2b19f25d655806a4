//! Signature verification (`ProvisionerClass.spec.verify`) end to end: images signed with the
//! real `cosign` CLI (both the Sigstore bundle referrers cosign writes by default and the
//! `.sig` signature images of `--new-bundle-format=false`) in the real registry, verified by the
//! real provisioner before anything is stored or applied.

use std::collections::BTreeMap;

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, SecretReference, Verification, VerificationProvider};
use gantry_tests::e2e::*;
use gantry_tests::{CosignKey, SignatureFormat, registry, unique_name};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// A Secret in the provisioner's namespace holding `keys` as `<name>.pub` entries.
async fn key_secret(client: &Client, keys: &[(&str, &CosignKey)]) -> String {
    let name = unique_name("cosign-keys");
    let data: BTreeMap<String, ByteString> = keys
        .iter()
        .map(|(key, pair)| (format!("{key}.pub"), ByteString(pair.public_pem())))
        .collect();
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            },
        )
        .await
        .expect("creating the keys Secret");
    name
}

/// A class that verifies with the keys of Secret `secret`.
async fn verifying_class(client: &Client, secret: &str) -> String {
    let name = unique_name("signed");
    let mut spec = class_spec(ApprovalPolicy::Automatic);
    spec.verify = Some(Verification {
        provider: VerificationProvider::Cosign,
        secret_ref: SecretReference {
            name: secret.to_string(),
        },
    });
    apply_class(client, &name, spec, false).await;
    name
}

/// A key, a Secret holding it as `team.pub`, and a class that verifies with it: the key, the
/// Secret and the class.
async fn team_key_class(client: &Client) -> (CosignKey, String, String) {
    let key = CosignKey::generate();
    let secret = key_secret(client, &[("team", &key)]).await;
    let class = verifying_class(client, &secret).await;
    (key, secret, class)
}

/// Waits until the bundle's verification fails naming `mention`; the bundle and the message.
async fn verification_refused(client: &Client, name: &str, mention: &str) -> (Bundle, String) {
    let refused = wait_failure(
        client,
        name,
        types::UNPACKED,
        reasons::VERIFICATION_FAILED,
        mention,
    )
    .await;
    let message = condition(&refused, types::UNPACKED)
        .unwrap()
        .message
        .clone();
    (refused, message)
}

/// Pushes an image of one ConfigMap into a namespace of its own; returns the namespace, the
/// tag reference and the pinned reference.
async fn image(client: &Client, prefix: &str, value: &str) -> (String, String, String) {
    let ns = unique_namespace(client, prefix).await;
    let repository_tag = format!("{ns}/app:v1");
    let pinned = push(
        &repository_tag,
        &[("cm.yaml", config_map("cm", None, value))],
    )
    .await;
    (ns, in_registry(&repository_tag), pinned)
}

/// Creates a bundle of `image` under `class`.
async fn bundle(client: &Client, class: &str, image: &str, ns: &str) -> String {
    let name = unique_name("signed");
    create_bundle(client, &name, spec_of_class(image, Some(ns), class)).await;
    name
}

#[tokio::test]
async fn an_image_signed_with_a_class_key_installs() {
    let client = shared_gantry_client().await;
    let (key, _, class) = team_key_class(&client).await;
    for format in [SignatureFormat::Bundle, SignatureFormat::SignatureImage] {
        let (ns, tag, pinned) = image(&client, "signed", "signed").await;
        key.sign(&pinned, format);
        let name = bundle(&client, &class, &tag, &ns).await;
        let installed = wait_bundle(&client, &name, "Ready", is_ready).await;
        assert_eq!(
            installed.status.unwrap().resolved_image.as_deref(),
            Some(pinned.as_str()),
            "{format:?}"
        );
        assert_eq!(
            config_map_data(&client, &ns, "cm").await.as_deref(),
            Some("signed"),
            "{format:?}: the signed content is applied"
        );
    }
}

#[tokio::test]
async fn an_unsigned_image_is_refused_naming_the_digest() {
    let client = shared_gantry_client().await;
    let (key, secret, class) = team_key_class(&client).await;
    let (ns, tag, pinned) = image(&client, "unsigned", "unsigned").await;
    let name = bundle(&client, &class, &tag, &ns).await;
    let (refused, message) = verification_refused(&client, &name, &pinned).await;
    assert!(message.contains("no signature found"), "{message}");
    // No retry brings a signature: the bundle waits for another digest or class.
    assert_stalled(&refused, reasons::VERIFICATION_FAILED);
    assert!(message.contains(&format!("{secret}/team.pub")), "{message}");
    let status = refused.status.unwrap();
    assert_eq!(status.content_digest, None, "nothing was stored");
    assert!(status.inventory.is_empty(), "nothing was applied");
    assert_eq!(config_map_data(&client, &ns, "cm").await, None);

    // Signing it afterwards lets the bundle through on its next attempt.
    key.sign(&pinned, SignatureFormat::Bundle);
    wait_bundle(&client, &name, "Ready once signed", is_ready).await;
}

#[tokio::test]
async fn a_signature_by_another_key_is_refused_naming_the_keys_tried() {
    let client = shared_gantry_client().await;
    let (team, old, intruder) = (
        CosignKey::generate(),
        CosignKey::generate(),
        CosignKey::generate(),
    );
    let secret = key_secret(&client, &[("team", &team), ("old", &old)]).await;
    let class = verifying_class(&client, &secret).await;
    for format in [SignatureFormat::Bundle, SignatureFormat::SignatureImage] {
        let (ns, tag, pinned) = image(&client, "intruder", "intruder").await;
        intruder.sign(&pinned, format);
        let name = bundle(&client, &class, &tag, &ns).await;
        let (_, message) = verification_refused(&client, &name, digest_of(&pinned)).await;
        assert!(
            message.contains(&format!("{secret}/old.pub, {secret}/team.pub")),
            "{format:?}: the keys tried are named: {message}"
        );
        assert!(
            message.contains("signed by none of the keys"),
            "{format:?}: {message}"
        );
        assert_eq!(config_map_data(&client, &ns, "cm").await, None);
    }
}

/// The URL of manifest `reference` (a tag or digest) of `repository` in the shared registry.
fn manifest_url(repository: &str, reference: &str) -> String {
    format!(
        "http://{}/v2/{repository}/manifests/{reference}",
        registry().host()
    )
}

/// The raw manifest `reference` (a tag or digest) of `repository` and its media type.
async fn get_manifest(repository: &str, reference: &str) -> (String, Vec<u8>) {
    let url = manifest_url(repository, reference);
    let response = reqwest::Client::new()
        .get(&url)
        .header(
            "Accept",
            "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
        )
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    let media_type = response
        .headers()
        .get("Content-Type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    (media_type, response.bytes().await.unwrap().to_vec())
}

/// Puts `body` as manifest `reference` of `repository`; returns its digest.
async fn put_manifest(
    repository: &str,
    reference: &str,
    media_type: &str,
    body: Vec<u8>,
) -> String {
    let url = manifest_url(repository, reference);
    let response = reqwest::Client::new()
        .put(&url)
        .header("Content-Type", media_type)
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "PUT {url}: {}",
        response.status()
    );
    response
        .headers()
        .get("Docker-Content-Digest")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_signature_of_another_digest_is_refused() {
    let client = shared_gantry_client().await;
    let (key, secret, class) = team_key_class(&client).await;

    // Two images in one repository: `signed` is signed, `other` carries copies of its
    // signatures, made to look as if they were about `other`.
    let ns = unique_namespace(&client, "copied").await;
    let repository = format!("{ns}/app");
    let signed = push(
        &format!("{repository}:signed"),
        &[("cm.yaml", config_map("cm", None, "signed"))],
    )
    .await;
    key.sign(&signed, SignatureFormat::Bundle);
    key.sign(&signed, SignatureFormat::SignatureImage);
    let (signed_digest, signed_tag) = {
        let digest = digest_of(&signed).to_string();
        let tag = digest.replacen(':', "-", 1);
        (digest, tag)
    };

    // The `.sig` image copied to the other digest's tag (as `cosign copy` of a signature would).
    let other_sig = push(
        &format!("{repository}:other-sig"),
        &[("cm.yaml", config_map("cm", None, "not signed"))],
    )
    .await;
    let other_sig_digest = digest_of(&other_sig).to_string();
    let (media_type, body) = get_manifest(&repository, &format!("{signed_tag}.sig")).await;
    put_manifest(
        &repository,
        &format!("{}.sig", other_sig_digest.replacen(':', "-", 1)),
        &media_type,
        body,
    )
    .await;

    // The Sigstore bundle's referrer re-pointed at the other digest, and listed under its tag.
    let other_bundle = push(
        &format!("{repository}:other-bundle"),
        &[("cm.yaml", config_map("cm", None, "not signed either"))],
    )
    .await;
    let other_bundle_digest = digest_of(&other_bundle).to_string();
    let (index_type, index) = get_manifest(&repository, &signed_tag).await;
    let mut index: serde_json::Value = serde_json::from_slice(&index).unwrap();
    let referrer_digest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let (referrer_type, referrer) = get_manifest(&repository, &referrer_digest).await;
    let mut referrer: serde_json::Value = serde_json::from_slice(&referrer).unwrap();
    assert_eq!(referrer["subject"]["digest"], json!(signed_digest));
    let (_, other_manifest) = get_manifest(&repository, &other_bundle_digest).await;
    referrer["subject"]["digest"] = json!(other_bundle_digest);
    referrer["subject"]["size"] = json!(other_manifest.len());
    let body = serde_json::to_vec(&referrer).unwrap();
    let moved = put_manifest(&repository, "moved-referrer", &referrer_type, body.clone()).await;
    index["manifests"][0]["digest"] = json!(moved);
    index["manifests"][0]["size"] = json!(body.len());
    put_manifest(
        &repository,
        &other_bundle_digest.replacen(':', "-", 1),
        &index_type,
        serde_json::to_vec(&index).unwrap(),
    )
    .await;

    for (pinned, what) in [
        (other_sig, "a copied .sig image"),
        (other_bundle, "a re-pointed bundle"),
    ] {
        let name = bundle(&client, &class, &pinned, &ns).await;
        let (_, message) = verification_refused(&client, &name, digest_of(&pinned)).await;
        assert!(
            message.contains(&format!("signed by {secret}/team.pub over {signed_digest}")),
            "{what}: the signature is valid but about the other digest: {message}"
        );
        assert_eq!(config_map_data(&client, &ns, "cm").await, None, "{what}");
    }
}

#[tokio::test]
async fn a_verified_digest_is_not_verified_again() {
    let client = shared_gantry_client().await;
    let (key, _, class) = team_key_class(&client).await;
    let (ns, tag, pinned) = image(&client, "cached", "cached").await;
    key.sign(&pinned, SignatureFormat::SignatureImage);
    let name = bundle(&client, &class, &tag, &ns).await;
    wait_bundle(&client, &name, "Ready", is_ready).await;

    // The signature goes away. A full pass (the registry asked again, the content read back)
    // does not look for it: the digest verified with these keys before.
    let repository = format!("{ns}/app");
    let sig_tag = format!("{}.sig", digest_of(&pinned).replacen(':', "-", 1));
    let (_, body) = get_manifest(&repository, &sig_tag).await;
    let sig_digest = {
        use sha2::Digest;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)))
    };
    let url = manifest_url(&repository, &sig_digest);
    let deleted = reqwest::Client::new().delete(&url).send().await.unwrap();
    assert!(
        deleted.status().is_success(),
        "DELETE {url}: {}",
        deleted.status()
    );

    let bundle_after = reconcile_handled(&client, &name).await;
    assert!(
        is_ready(&bundle_after),
        "still Ready without asking for the signature again: {:?}",
        bundle_after.status.map(|s| s.conditions)
    );

    // Under another set of keys the same digest is verified again, and the signature is gone.
    let other = CosignKey::generate();
    let wider = key_secret(&client, &[("team", &key), ("other", &other)]).await;
    let wider_class = verifying_class(&client, &wider).await;
    let again = bundle(&client, &wider_class, &tag, &ns).await;
    verification_refused(&client, &again, "no signature found").await;
}

#[tokio::test]
async fn a_missing_keys_secret_is_named() {
    let client = shared_gantry_client().await;
    let class = verifying_class(&client, "no-such-keys").await;
    let (ns, tag, _) = image(&client, "nokeys", "nokeys").await;
    let name = bundle(&client, &class, &tag, &ns).await;
    let mention = format!("{NAMESPACE}/no-such-keys: not found");
    let (refused, message) = verification_refused(&client, &name, &mention).await;
    // The Secret may yet be created: retried, not stalled.
    assert!(condition(&refused, types::STALLED).is_none());
    assert!(message.contains("next retry in"));
}
