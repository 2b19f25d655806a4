//! Between resolve and unpack: when the class sets `spec.verify`, the resolved digest must carry
//! a valid cosign signature by one of the class's keys before its content is pulled, read back
//! from storage or applied.

use gantry_api::ProvisionerClass;
use gantry_image::PublicKey;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::resolve::Resolved;
use crate::error::{Error, Result};
use crate::reconcile::pass::Pass;
use crate::source::registry::is_digest_reference;
use crate::state::metrics::ResultLabels;

/// Data keys of the keys Secret that hold public keys (as Flux reads its `spec.verify` Secret).
const PUBLIC_KEY_SUFFIX: &str = ".pub";

/// Verifies the resolved image when the class asks for it; returns the resolution with the
/// image pinned to the verified digest (`pullMode: Node` resolves it here, so that the unpack
/// Pod runs exactly the verified digest).
pub(crate) async fn verify(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    mut resolved: Resolved,
) -> Result<Resolved> {
    let Some(verification) = &class.spec.verify else {
        return Ok(resolved);
    };
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    let keys = read_keys(pass, &verification.secret_ref.name).await?;
    let key_set = key_set(&keys);

    if !is_digest_reference(&resolved.image) {
        // `pullMode: Node` leaves a tag to the node's runtime; verifying needs the digest.
        let client = match resolved.registry.take() {
            Some(client) => client,
            None => ctx.registry_client(class, bundle).await?,
        };
        resolved.image = client
            .resolve(&resolved.image)
            .await
            .map_err(|e| Error::from_image(&bundle.spec.image, e))?
            .pinned();
        resolved.registry = Some(client);
    }
    if ctx.verified.contains(&resolved.image, &key_set) {
        return Ok(resolved);
    }
    let client = match resolved.registry.take() {
        Some(client) => client,
        None => ctx.registry_client(class, bundle).await?,
    };
    let outcome = client.verify_signature(&resolved.image, &keys).await;
    let count = |result: &'static str| {
        ctx.metrics
            .signature_verifications
            .get_or_create(&ResultLabels { result })
            .inc()
    };
    match outcome {
        Ok(signature) => {
            count("verified");
            tracing::info!(
                image = %signature.image,
                key = %signature.key,
                source = %signature.source,
                "signature verified"
            );
            ctx.verified.record(&resolved.image, &key_set);
        }
        Err(source) => {
            count("failed");
            return Err(Error::Verification {
                image: resolved.image.clone(),
                source,
            });
        }
    }
    resolved.registry = Some(client);
    Ok(resolved)
}

/// The `*.pub` entries of the Secret `name` in the provisioner's namespace, named
/// `<secret>/<data key>`, in the order of their names.
async fn read_keys(pass: &Pass<'_>, name: &str) -> Result<Vec<PublicKey>> {
    let namespace = &pass.ctx.settings.namespace;
    let secrets: Api<Secret> = Api::namespaced(pass.ctx.client.clone(), namespace);
    let failed = |message: String| Error::VerificationKeys {
        secret: format!("{namespace}/{name}"),
        message,
    };
    let secret = secrets
        .get_opt(name)
        .await?
        .ok_or_else(|| failed("not found".into()))?;
    let mut keys = Vec::new();
    // `data` is a BTreeMap: the keys come sorted by name.
    for (key, value) in secret.data.unwrap_or_default() {
        if !key.ends_with(PUBLIC_KEY_SUFFIX) {
            continue;
        }
        keys.push(
            PublicKey::from_pem(format!("{name}/{key}"), &value.0)
                .map_err(|e| failed(e.to_string()))?,
        );
    }
    if keys.is_empty() {
        return Err(failed(format!(
            "holds no public key (no data key ending in {PUBLIC_KEY_SUFFIX})"
        )));
    }
    Ok(keys)
}

/// The identity of a set of keys: their fingerprints, sorted.
fn key_set(keys: &[PublicKey]) -> String {
    let mut fingerprints: Vec<&str> = keys.iter().map(PublicKey::fingerprint).collect();
    fingerprints.sort_unstable();
    fingerprints.dedup();
    fingerprints.join(",")
}
