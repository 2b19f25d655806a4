//! Cosign signature verification with public keys: does a digest carry a valid signature by
//! one of the trusted keys?
//!
//! Two ways of storing a signature in the image's repository are read, as `cosign verify` reads
//! them:
//! - a Sigstore bundle attached as an OCI referrer of the digest (what cosign 3 writes by
//!   default): a DSSE envelope over an in-toto statement of type `https://sigstore.dev/cosign/sign/v1`
//!   whose subject is the digest. Referrers are listed through the registry's referrers API, or
//!   through the `sha256-<hex>` tag index where the registry has no such API.
//! - a signature image tagged `sha256-<hex>.sig` (what cosign 2 writes): each layer is a
//!   "simple signing" payload naming the digest in `critical.image.docker-manifest-digest`,
//!   signed in the layer's `dev.cosignproject.cosign/signature` annotation.
//!
//! A signature counts only when it verifies with a key and what it signs names the digest: a
//! signature copied from another digest fails. Keyless signatures (Fulcio certificates, Rekor
//! entries) are not verified: they need Sigstore's public services. Transparency-log entries in
//! a bundle are ignored; the key alone decides.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use oci_client::Reference;
use oci_client::manifest::OciDescriptor;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::client::{MAX_MANIFEST_BYTES, RegistryClient, parse_reference, pinned};
use super::error::ImageError;

/// Media type prefix of Sigstore bundles (`application/vnd.dev.sigstore.bundle.v0.3+json`, ...).
const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
/// The artifact type asked of the referrers API.
const BUNDLE_ARTIFACT_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// DSSE payload type of in-toto statements.
const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The predicate type of a cosign image signature in a bundle (an attestation is not one).
const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// Media type of the layers of a `.sig` signature image.
const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a `.sig` layer holding the base64 signature of the layer's bytes.
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// A bundle or simple-signing payload larger than this is refused (cosign's are about 1 KiB).
pub const MAX_SIGNATURE_BLOB_BYTES: u64 = 1 << 20;
/// At most this many referrers, signature layers and DSSE signatures are examined for one
/// digest: a repository flooded with signatures cannot make verification unbounded.
pub const MAX_SIGNATURES: usize = 64;

/// A trusted public key, named for messages (`<secret>/<data key>`).
#[derive(Clone)]
pub struct PublicKey {
    name: String,
    /// The uncompressed P-256 point, as `ring` takes it.
    point: Vec<u8>,
    /// `sha256:` of the key's SubjectPublicKeyInfo (DER).
    fingerprint: String,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({}, {})", self.name, self.fingerprint)
    }
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo). Cosign's key pairs are ECDSA P-256
    /// (`cosign generate-key-pair`); other key types are refused with a message saying so.
    pub fn from_pem(name: impl Into<String>, pem: &[u8]) -> Result<Self, ImageError> {
        use x509_parser::prelude::FromDer;
        use x509_parser::public_key::PublicKey as Parsed;
        use x509_parser::x509::SubjectPublicKeyInfo;

        let name = name.into();
        let invalid = |reason: String| ImageError::InvalidPublicKey {
            key: name.clone(),
            reason,
        };
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem)
            .map_err(|e| invalid(format!("not a PEM public key: {e}")))?;
        if pem.label != "PUBLIC KEY" {
            return Err(invalid(format!(
                "PEM block is {:?}, not \"PUBLIC KEY\"",
                pem.label
            )));
        }
        let (rest, spki) = SubjectPublicKeyInfo::from_der(&pem.contents)
            .map_err(|e| invalid(format!("not a SubjectPublicKeyInfo: {e}")))?;
        if !rest.is_empty() {
            return Err(invalid("trailing bytes after the key".into()));
        }
        let point = match spki.parsed() {
            Ok(Parsed::EC(point)) => {
                let curve = spki
                    .algorithm
                    .parameters
                    .as_ref()
                    .and_then(|p| p.as_oid().ok());
                if curve.as_ref() != Some(&x509_parser::oid_registry::OID_EC_P256) {
                    return Err(invalid(format!(
                        "an ECDSA key on curve {}; only P-256 keys are supported",
                        curve.map_or_else(|| "(unnamed)".to_string(), |c| c.to_id_string())
                    )));
                }
                point.data().to_vec()
            }
            Ok(Parsed::RSA(_)) => {
                return Err(invalid(
                    "an RSA key; only ECDSA P-256 keys are supported".into(),
                ));
            }
            Ok(_) => {
                return Err(invalid(format!(
                    "a key of algorithm {}; only ECDSA P-256 keys are supported",
                    spki.algorithm.algorithm.to_id_string()
                )));
            }
            Err(e) => return Err(invalid(format!("unreadable key: {e}"))),
        };
        if point.len() != 65 || point[0] != 4 {
            return Err(invalid("not an uncompressed P-256 point".into()));
        }
        Ok(PublicKey {
            name,
            point,
            fingerprint: format!("sha256:{}", hex::encode(Sha256::digest(&pem.contents))),
        })
    }

    /// `<secret>/<data key>`, or whatever name it was read under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:` of the key's DER encoding: equal fingerprints, equal keys.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether `signature` (ASN.1 DER, as cosign writes it) is this key's over `message`.
    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            &self.point,
        )
        .verify(message, signature)
        .is_ok()
    }

    /// The first of `keys` whose signature `signature` is over `message`.
    fn find<'k>(keys: &'k [PublicKey], message: &[u8], signature: &[u8]) -> Option<&'k PublicKey> {
        keys.iter().find(|key| key.verifies(message, signature))
    }
}

/// Where the valid signature was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureSource {
    /// A Sigstore bundle attached as a referrer: the referrer manifest's digest.
    Bundle { manifest: String },
    /// A layer of the `sha256-<hex>.sig` signature image.
    SignatureImage { layer: String },
}

impl fmt::Display for SignatureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureSource::Bundle { manifest } => write!(f, "Sigstore bundle {manifest}"),
            SignatureSource::SignatureImage { layer } => {
                write!(f, "signature image layer {layer}")
            }
        }
    }
}

/// A digest and the signature that verified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSignature {
    /// `registry/repository@sha256:...`
    pub image: String,
    /// The name of the key that verified it.
    pub key: String,
    pub source: SignatureSource,
}

/// The parts of a manifest or index read here.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    manifests: Vec<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    subject: Option<Descriptor>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: i64,
    artifact_type: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl Descriptor {
    fn oci(&self) -> OciDescriptor {
        OciDescriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: self.size,
            ..Default::default()
        }
    }
}

/// A Sigstore bundle, as far as a key-signed DSSE envelope goes.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SigstoreBundle {
    dsse_envelope: Option<DsseEnvelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DsseEnvelope {
    payload: String,
    payload_type: String,
    #[serde(default)]
    signatures: Vec<DsseSignature>,
}

#[derive(Deserialize)]
struct DsseSignature {
    sig: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Statement {
    #[serde(default)]
    subject: Vec<StatementSubject>,
    #[serde(default)]
    predicate_type: String,
}

#[derive(Deserialize)]
struct StatementSubject {
    #[serde(default)]
    digest: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct SimpleSigning {
    critical: SimpleSigningCritical,
}

#[derive(Deserialize)]
struct SimpleSigningCritical {
    image: SimpleSigningImage,
}

#[derive(Deserialize)]
struct SimpleSigningImage {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// DSSE's pre-authentication encoding: what the envelope's signatures sign.
pub(crate) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Standard base64 (what cosign writes), or the URL-safe alphabet DSSE also allows.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let text = text.trim();
    STANDARD
        .decode(text)
        .or_else(|_| URL_SAFE.decode(text))
        .ok()
}

/// What one signature said, for the message when none verifies.
#[derive(Debug, PartialEq, Eq)]
enum Finding {
    /// Verified with a key, and signs the digest.
    Valid(String),
    /// Verified with a key, but signs something else.
    Mismatch(String),
    /// Not by any of the keys, or unreadable.
    Rejected(String),
}

/// Checks a Sigstore bundle's DSSE envelope: a signature by one of `keys` over an in-toto
/// statement of a cosign image signature whose subject is `digest`.
fn check_bundle(body: &[u8], digest: &str, keys: &[PublicKey]) -> Finding {
    let bundle: SigstoreBundle = match serde_json::from_slice(body) {
        Ok(bundle) => bundle,
        Err(e) => return Finding::Rejected(format!("not a Sigstore bundle: {e}")),
    };
    let Some(envelope) = bundle.dsse_envelope else {
        return Finding::Rejected("holds no DSSE envelope (a message signature)".into());
    };
    let Some(payload) = decode_base64(&envelope.payload) else {
        return Finding::Rejected("its DSSE payload is not base64".into());
    };
    let message = pae(&envelope.payload_type, &payload);
    let signer = envelope
        .signatures
        .iter()
        .take(MAX_SIGNATURES)
        .filter_map(|s| decode_base64(&s.sig))
        .find_map(|sig| PublicKey::find(keys, &message, &sig));
    let Some(key) = signer else {
        return Finding::Rejected("signed by none of the keys".into());
    };
    let by = key.name();
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Finding::Mismatch(format!(
            "signed by {by}, but its payload is {:?}, not an in-toto statement",
            envelope.payload_type
        ));
    }
    let statement: Statement = match serde_json::from_slice(&payload) {
        Ok(statement) => statement,
        Err(e) => {
            return Finding::Mismatch(format!(
                "signed by {by}, but its statement is not valid: {e}"
            ));
        }
    };
    if statement.predicate_type != COSIGN_SIGN_PREDICATE {
        return Finding::Mismatch(format!(
            "signed by {by}, but it is an attestation ({}), not an image signature",
            statement.predicate_type
        ));
    }
    let hex = digest.trim_start_matches("sha256:");
    let subjects: Vec<String> = statement
        .subject
        .iter()
        .filter_map(|s| s.digest.get("sha256"))
        .map(|h| format!("sha256:{h}"))
        .collect();
    if statement
        .subject
        .iter()
        .any(|s| s.digest.get("sha256").is_some_and(|h| h == hex))
    {
        Finding::Valid(by.to_string())
    } else {
        Finding::Mismatch(format!(
            "signed by {by} over {}, not {digest}",
            if subjects.is_empty() {
                "no sha256 subject".to_string()
            } else {
                subjects.join(", ")
            }
        ))
    }
}

/// Checks one layer of a `.sig` image: `signature` (base64 from the annotation) by one of
/// `keys` over `payload`, a simple-signing payload naming `digest`.
fn check_simple_signing(
    payload: &[u8],
    signature: &str,
    digest: &str,
    keys: &[PublicKey],
) -> Finding {
    let Some(signature) = decode_base64(signature) else {
        return Finding::Rejected("its signature annotation is not base64".into());
    };
    let Some(key) = PublicKey::find(keys, payload, &signature) else {
        return Finding::Rejected("signed by none of the keys".into());
    };
    let by = key.name();
    match serde_json::from_slice::<SimpleSigning>(payload) {
        Ok(signed) if signed.critical.image.docker_manifest_digest == digest => {
            Finding::Valid(by.to_string())
        }
        Ok(signed) => Finding::Mismatch(format!(
            "signed by {by} over {}, not {digest}",
            signed.critical.image.docker_manifest_digest
        )),
        Err(e) => Finding::Mismatch(format!(
            "signed by {by}, but its payload is not a cosign signature: {e}"
        )),
    }
}

impl RegistryClient {
    /// Verifies that `image` (`registry/repository@sha256:...`) carries a cosign signature by
    /// one of `keys` over its digest, looking for signatures in the image's own repository.
    /// Fails with [`ImageError::VerificationFailed`] naming the image, the keys tried and what
    /// was found; registry failures other than "no signature there" are returned as they are.
    pub async fn verify_signature(
        &self,
        image: &str,
        keys: &[PublicKey],
    ) -> Result<VerifiedSignature, ImageError> {
        let reference = parse_reference(image)?;
        let Some(digest) = reference.digest().map(str::to_string) else {
            return Err(ImageError::InvalidReference {
                reference: image.to_string(),
                reason: "signatures are verified for digests; resolve the tag first".into(),
            });
        };
        let image = pinned(&reference, &digest);
        let failed = |detail: String| ImageError::VerificationFailed {
            image: image.clone(),
            keys: keys.iter().map(|k| k.name().to_string()).collect(),
            detail,
        };
        if keys.is_empty() {
            return Err(failed("no public key to verify with".into()));
        }
        let authorization = self.authorization(&reference).await?;
        let authorization = authorization.as_deref();
        let mut notes = Vec::new();

        let mut examined = 0usize;
        for referrer in self
            .bundle_referrers(&reference, &digest, authorization)
            .await?
        {
            if examined >= MAX_SIGNATURES {
                break;
            }
            let at = reference.clone_with_digest(referrer.digest.clone());
            let (body, _) = self.fetch_manifest(&at, authorization, None).await?;
            let manifest: Manifest = parse(&at, &body)?;
            if manifest.subject.as_ref().map(|s| s.digest.as_str()) != Some(digest.as_str()) {
                notes.push(format!(
                    "referrer {} does not refer to {digest}",
                    referrer.digest
                ));
                continue;
            }
            let bundles = manifest
                .layers
                .iter()
                .filter(|l| l.media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX));
            for layer in bundles {
                examined += 1;
                if examined > MAX_SIGNATURES {
                    break;
                }
                let body = self
                    .fetch_small_blob(&at, &layer.oci(), MAX_SIGNATURE_BLOB_BYTES)
                    .await?;
                match check_bundle(&body, &digest, keys) {
                    Finding::Valid(key) => {
                        return Ok(VerifiedSignature {
                            image,
                            key,
                            source: SignatureSource::Bundle {
                                manifest: referrer.digest.clone(),
                            },
                        });
                    }
                    Finding::Mismatch(note) | Finding::Rejected(note) => {
                        notes.push(format!("Sigstore bundle {}: {note}", referrer.digest));
                    }
                }
            }
        }

        let tag = format!("{}.sig", fallback_tag(&digest));
        let at = Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            tag.clone(),
        );
        match self.fetch_manifest(&at, authorization, None).await {
            Ok((body, _)) => {
                let manifest: Manifest = parse(&at, &body)?;
                let layers = manifest
                    .layers
                    .iter()
                    .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
                    .take(MAX_SIGNATURES);
                for layer in layers {
                    let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
                        notes.push(format!("{tag} layer {}: no signature", layer.digest));
                        continue;
                    };
                    let payload = self
                        .fetch_small_blob(&at, &layer.oci(), MAX_SIGNATURE_BLOB_BYTES)
                        .await?;
                    match check_simple_signing(&payload, signature, &digest, keys) {
                        Finding::Valid(key) => {
                            return Ok(VerifiedSignature {
                                image,
                                key,
                                source: SignatureSource::SignatureImage {
                                    layer: layer.digest.clone(),
                                },
                            });
                        }
                        Finding::Mismatch(note) | Finding::Rejected(note) => {
                            notes.push(format!("{tag} layer {}: {note}", layer.digest));
                        }
                    }
                }
            }
            Err(ImageError::NotFound { .. }) => {}
            Err(other) => return Err(other),
        }

        if notes.is_empty() {
            return Err(failed(format!(
                "no signature found (no Sigstore bundle referrer, no {tag})"
            )));
        }
        const SHOWN: usize = 8;
        let more = notes.len().saturating_sub(SHOWN);
        notes.truncate(SHOWN);
        if more > 0 {
            notes.push(format!("and {more} more"));
        }
        Err(failed(notes.join("; ")))
    }

    /// The referrers of `digest` that are Sigstore bundles: from the referrers API, else from
    /// the `sha256-<hex>` tag index (the OCI 1.1 fallback for registries without the API).
    async fn bundle_referrers(
        &self,
        reference: &Reference,
        digest: &str,
        authorization: Option<&str>,
    ) -> Result<Vec<Descriptor>, ImageError> {
        let index = match self.referrers_api(reference, digest, authorization).await? {
            Some(index) => index,
            None => {
                let at = Reference::with_tag(
                    reference.registry().to_string(),
                    reference.repository().to_string(),
                    fallback_tag(digest),
                );
                match self.fetch_manifest(&at, authorization, None).await {
                    Ok((body, _)) => parse(&at, &body)?,
                    Err(ImageError::NotFound { .. }) => Manifest::default(),
                    Err(other) => return Err(other),
                }
            }
        };
        Ok(index
            .manifests
            .into_iter()
            .filter(|m| {
                m.artifact_type
                    .as_deref()
                    .is_some_and(|t| t.starts_with(BUNDLE_MEDIA_TYPE_PREFIX))
            })
            .take(MAX_SIGNATURES)
            .collect())
    }

    /// `GET /v2/<repository>/referrers/<digest>`: the index, or `None` when the registry has no
    /// referrers API.
    async fn referrers_api(
        &self,
        reference: &Reference,
        digest: &str,
        authorization: Option<&str>,
    ) -> Result<Option<Manifest>, ImageError> {
        let url = format!(
            "{}://{}/v2/{}/referrers/{digest}?artifactType={}",
            self.scheme(reference),
            reference.resolve_registry(),
            reference.repository(),
            BUNDLE_ARTIFACT_TYPE.replace('+', "%2B")
        );
        let mut request = self.http.get(&url).header(
            reqwest::header::ACCEPT,
            oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
        );
        if let Some(authorization) = authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization);
        }
        let registry_error = |detail: String| ImageError::Registry {
            reference: reference.whole(),
            detail,
        };
        let mut response = request
            .send()
            .await
            .map_err(|e| registry_error(format!("listing referrers: {e}")))?;
        let status = response.status();
        // What registries without the API answer (as go-containerregistry reads them).
        if matches!(status.as_u16(), 400 | 404 | 406) {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(registry_error(format!("HTTP {status} for {url}")));
        }
        let is_index = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with(oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE));
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| registry_error(format!("reading the referrers of {digest}: {e}")))?
        {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > MAX_MANIFEST_BYTES {
                return Err(ImageError::InvalidManifest {
                    reference: reference.whole(),
                    reason: format!(
                        "referrers of {digest}: larger than {MAX_MANIFEST_BYTES} bytes"
                    ),
                });
            }
        }
        if !is_index {
            // Some registries answer unknown routes with 200 and a page: not an API.
            return Ok(None);
        }
        parse(reference, &body).map(Some)
    }
}

/// `sha256-<hex>`: the tag under which cosign and the OCI fallback find what refers to a digest.
fn fallback_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

fn parse(reference: &Reference, body: &[u8]) -> Result<Manifest, ImageError> {
    serde_json::from_slice(body).map_err(|e| ImageError::InvalidManifest {
        reference: reference.whole(),
        reason: format!("not a valid manifest or index: {e}"),
    })
}

#[cfg(test)]
mod tests;
