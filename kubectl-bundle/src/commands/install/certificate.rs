//! The Helm plugin's serving certificate for `install --with-helm-plugin`: the Secrets the
//! component names, made here when neither exists (a CA of their own, whose key is not kept),
//! left alone when the administrator made them (their own CA, cert-manager).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;

use super::manifests::{HELM_PLUGIN_CA_SECRET, HELM_PLUGIN_SERVICE_NAME, HELM_PLUGIN_TLS_SECRET};

const NAMESPACE: &str = "gantry-system";
/// Marks the Secrets install made, so that an administrator can tell them from their own.
const GENERATED_ANNOTATION: &str = "gantry.dev/generated-by";

/// A CA and a serving certificate it signed, PEM.
pub(super) struct Generated {
    pub(super) ca_pem: String,
    pub(super) cert_pem: String,
    pub(super) key_pem: String,
}

/// A new CA, its key discarded once it signed one serving certificate for the plugin's Service
/// (`gantry-helm-plugin.gantry-system.svc`) and `localhost` (for `kubectl bundle plugin check`
/// through a port-forward).
pub(super) fn generate() -> anyhow::Result<Generated> {
    let mut ca = CertificateParams::new(Vec::new()).context("the plugin's CA")?;
    ca.distinguished_name
        .push(DnType::CommonName, "gantry-helm-plugin-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().context("generating the CA's key")?;
    let ca_pem = ca.self_signed(&ca_key).context("signing the CA")?.pem();
    let issuer = Issuer::new(ca, ca_key);

    let mut serving = CertificateParams::new(vec![
        HELM_PLUGIN_SERVICE_NAME.to_string(),
        "localhost".to_string(),
    ])
    .context("the plugin's serving certificate")?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "gantry-helm-plugin");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().context("generating the serving key")?;
    let cert_pem = serving
        .signed_by(&key, &issuer)
        .context("signing the serving certificate")?
        .pem();
    Ok(Generated {
        ca_pem,
        cert_pem,
        key_pem: key.serialize_pem(),
    })
}

/// Makes the two Secrets when neither exists; what was done, for the progress line.
pub(super) async fn ensure(client: &Client) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let read = |name: &'static str| {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt(name)
                .await
                .with_context(|| format!("reading secret {NAMESPACE}/{name}"))
        }
    };
    let tls = read(HELM_PLUGIN_TLS_SECRET).await?;
    let ca = read(HELM_PLUGIN_CA_SECRET).await?;
    match (tls.is_some(), ca.is_some()) {
        (true, true) => {
            return Ok(format!(
                "secret/{HELM_PLUGIN_TLS_SECRET} and secret/{HELM_PLUGIN_CA_SECRET} exist: kept"
            ));
        }
        (false, false) => {}
        (true, false) | (false, true) => {
            let (present, missing) = if tls.is_some() {
                (HELM_PLUGIN_TLS_SECRET, HELM_PLUGIN_CA_SECRET)
            } else {
                (HELM_PLUGIN_CA_SECRET, HELM_PLUGIN_TLS_SECRET)
            };
            bail!(
                "secret {NAMESPACE}/{present} exists but {NAMESPACE}/{missing} does not: the plugin's serving certificate ({HELM_PLUGIN_TLS_SECRET}, kubernetes.io/tls) and the CA that verifies it ({HELM_PLUGIN_CA_SECRET}, key ca.crt) go together. Create {missing} (docs/install.md), or delete {present} to have install make both"
            );
        }
    }
    let generated = generate()?;
    let metadata = |name: &str| {
        json!({
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "gantry-helm-plugin",
                "app.kubernetes.io/part-of": "gantry",
            },
            "annotations": { GENERATED_ANNOTATION: "kubectl-bundle install" },
        })
    };
    let tls: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": metadata(HELM_PLUGIN_TLS_SECRET),
        "stringData": { "tls.crt": generated.cert_pem, "tls.key": generated.key_pem },
    }))?;
    let ca: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": metadata(HELM_PLUGIN_CA_SECRET),
        "stringData": { "ca.crt": generated.ca_pem },
    }))?;
    // The CA first: a Service naming a CA Secret that is not there yet is only reported.
    for secret in [ca, tls] {
        let name = secret.metadata.name.clone().unwrap_or_default();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .with_context(|| format!("creating secret {NAMESPACE}/{name}"))?;
    }
    Ok(format!(
        "secret/{HELM_PLUGIN_CA_SECRET} created (a CA of its own, its key not kept), secret/{HELM_PLUGIN_TLS_SECRET} created (for {HELM_PLUGIN_SERVICE_NAME})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_certificate_is_for_the_plugins_service_and_verifies_with_the_ca() {
        use rustls::client::danger::ServerCertVerifier;
        let generated = generate().unwrap();
        let pem = |text: &str| -> Vec<rustls::pki_types::CertificateDer<'static>> {
            rustls::pki_types::pem::PemObject::pem_slice_iter(text.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let mut roots = rustls::RootCertStore::empty();
        for ca in pem(&generated.ca_pem) {
            roots.add(ca).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .unwrap();
        let chain = pem(&generated.cert_pem);
        let now = rustls::pki_types::UnixTime::now();
        for name in [HELM_PLUGIN_SERVICE_NAME, "localhost"] {
            let server = rustls::pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&chain[0], &[], &server, &[], now)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("other.gantry-system.svc").unwrap();
        assert!(
            verifier
                .verify_server_cert(&chain[0], &[], &other, &[], now)
                .is_err()
        );
        assert!(generated.key_pem.contains("PRIVATE KEY"));
    }
}
