use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

use super::*;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// A key pair made here, and its public key as `PublicKey` reads it.
struct TestKey {
    pair: EcdsaKeyPair,
    public: PublicKey,
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// SubjectPublicKeyInfo of a P-256 point: the fixed DER header of id-ecPublicKey + prime256v1.
fn spki_pem(point: &[u8]) -> String {
    let mut der = hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").unwrap();
    der.extend_from_slice(point);
    format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        b64(&der)
    )
}

fn test_key(name: &str) -> TestKey {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let public =
        PublicKey::from_pem(name, spki_pem(pair.public_key().as_ref()).as_bytes()).unwrap();
    TestKey { pair, public }
}

impl TestKey {
    fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .unwrap()
            .as_ref()
            .to_vec()
    }

    /// A Sigstore bundle with a DSSE envelope over `statement`, signed by this key.
    /// A Sigstore bundle of cosign's signature over `digest`.
    fn signature(&self, digest: &str) -> Vec<u8> {
        self.bundle(
            IN_TOTO_PAYLOAD_TYPE,
            &statement(digest, COSIGN_SIGN_PREDICATE),
        )
    }

    fn bundle(&self, payload_type: &str, statement: &serde_json::Value) -> Vec<u8> {
        let payload = serde_json::to_vec(statement).unwrap();
        let sig = self.sign(&pae(payload_type, &payload));
        serde_json::to_vec(&serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": { "publicKey": { "hint": "" } },
            "dsseEnvelope": {
                "payload": b64(&payload),
                "payloadType": payload_type,
                "signatures": [{ "sig": b64(&sig), "keyid": "" }]
            }
        }))
        .unwrap()
    }
}

fn statement(digest: &str, predicate_type: &str) -> serde_json::Value {
    serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{ "digest": { "sha256": digest.trim_start_matches("sha256:") } }],
        "predicateType": predicate_type,
        "predicate": {}
    })
}

fn simple_signing(digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": { "docker-reference": "127.0.0.1:5000/app" },
            "image": { "docker-manifest-digest": digest },
            "type": "cosign container image signature"
        },
        "optional": null
    }))
    .unwrap()
}

#[test]
fn pae_is_dsse_v1() {
    assert_eq!(
        pae("application/example", b"hello world"),
        b"DSSEv1 19 application/example 11 hello world"
    );
}

#[test]
fn a_bundle_signed_over_the_digest_is_valid() {
    let (team, other) = (test_key("keys/team.pub"), test_key("keys/other.pub"));
    let keys = [other.public.clone(), team.public.clone()];
    let bundle = team.signature(DIGEST);
    assert_eq!(
        check_bundle(&bundle, DIGEST, &keys),
        Finding::Valid("keys/team.pub".into())
    );
}

#[test]
fn a_bundle_is_refused_for_another_key_digest_or_predicate() {
    let (team, intruder) = (test_key("keys/team.pub"), test_key("keys/intruder.pub"));
    let keys = [team.public.clone()];
    let by_intruder = intruder.signature(DIGEST);
    assert_eq!(
        check_bundle(&by_intruder, DIGEST, &keys),
        Finding::Rejected("signed by none of the keys".into())
    );
    let over_other = team.signature(OTHER);
    assert_eq!(
        check_bundle(&over_other, DIGEST, &keys),
        Finding::Mismatch(format!(
            "signed by keys/team.pub over {OTHER}, not {DIGEST}"
        ))
    );
    let attestation = team.bundle(
        IN_TOTO_PAYLOAD_TYPE,
        &statement(DIGEST, "https://slsa.dev/provenance/v1"),
    );
    assert!(matches!(
        check_bundle(&attestation, DIGEST, &keys),
        Finding::Mismatch(m) if m.contains("attestation")
    ));
    let other_type = team.bundle("text/plain", &statement(DIGEST, COSIGN_SIGN_PREDICATE));
    assert!(matches!(
        check_bundle(&other_type, DIGEST, &keys),
        Finding::Mismatch(m) if m.contains("not an in-toto statement")
    ));
}

#[test]
fn a_tampered_bundle_payload_is_refused() {
    let team = test_key("keys/team.pub");
    let bundle = team.signature(OTHER);
    let mut value: serde_json::Value = serde_json::from_slice(&bundle).unwrap();
    // The payload swapped for one naming the wanted digest: the signature no longer matches.
    let forged = serde_json::to_vec(&statement(DIGEST, COSIGN_SIGN_PREDICATE)).unwrap();
    value["dsseEnvelope"]["payload"] = serde_json::json!(b64(&forged));
    let tampered = serde_json::to_vec(&value).unwrap();
    assert_eq!(
        check_bundle(&tampered, DIGEST, std::slice::from_ref(&team.public)),
        Finding::Rejected("signed by none of the keys".into())
    );
}

#[test]
fn malformed_bundles_are_refused_without_panicking() {
    let keys = [test_key("k").public];
    for body in [
        &b"not json"[..],
        br#"{"messageSignature": {}}"#,
        br#"{"dsseEnvelope": {"payload": "%%%", "payloadType": "x", "signatures": []}}"#,
        br#"{"dsseEnvelope": {"payload": "", "payloadType": "x", "signatures": [{"sig": "%%%"}]}}"#,
    ] {
        assert!(
            matches!(check_bundle(body, DIGEST, &keys), Finding::Rejected(_)),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn a_simple_signing_layer_over_the_digest_is_valid() {
    let team = test_key("keys/team.pub");
    let keys = [team.public.clone()];
    let payload = simple_signing(DIGEST);
    let signature = b64(&team.sign(&payload));
    assert_eq!(
        check_simple_signing(&payload, &signature, DIGEST, &keys),
        Finding::Valid("keys/team.pub".into())
    );
    // The same layer found under another digest's tag is a signature of the first digest.
    assert_eq!(
        check_simple_signing(&payload, &signature, OTHER, &keys),
        Finding::Mismatch(format!(
            "signed by keys/team.pub over {DIGEST}, not {OTHER}"
        ))
    );
    let intruder = test_key("keys/intruder.pub");
    let forged = b64(&intruder.sign(&payload));
    assert_eq!(
        check_simple_signing(&payload, &forged, DIGEST, &keys),
        Finding::Rejected("signed by none of the keys".into())
    );
    assert!(matches!(
        check_simple_signing(&payload, "%%%", DIGEST, &keys),
        Finding::Rejected(_)
    ));
}

#[test]
fn public_keys_are_read_from_pem_and_other_kinds_are_named() {
    let key = test_key("keys/team.pub");
    assert_eq!(key.public.name(), "keys/team.pub");
    assert!(key.public.fingerprint().starts_with("sha256:"));
    let again =
        PublicKey::from_pem("x", spki_pem(key.pair.public_key().as_ref()).as_bytes()).unwrap();
    assert_eq!(again.fingerprint(), key.public.fingerprint());

    let error = PublicKey::from_pem("keys/bad.pub", b"not a key").unwrap_err();
    assert!(
        matches!(&error, ImageError::InvalidPublicKey { key, .. } if key == "keys/bad.pub"),
        "{error}"
    );
    let certificate = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let error = PublicKey::from_pem("keys/cert.pub", certificate.as_bytes()).unwrap_err();
    assert!(error.to_string().contains("not \"PUBLIC KEY\""), "{error}");
    // An Ed25519 key (RFC 8410's example): named as unsupported.
    let ed25519 = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
    let error = PublicKey::from_pem("keys/ed.pub", ed25519.as_bytes()).unwrap_err();
    assert!(error.to_string().contains("only ECDSA P-256"), "{error}");
}

#[test]
fn fallback_tags_replace_the_colon() {
    assert_eq!(fallback_tag(DIGEST), DIGEST.replace("sha256:", "sha256-"));
}

/// Made with cosign v3.1.3 (`cosign sign --key`, both storage formats) for an image of this
/// digest in a loopback registry.
mod cosign_vectors {
    use super::*;

    const SIGNED: &str = "sha256:c5ccd8881cfeaabc25132fe0dd692797d3653b44ed2c257cfc1b9c6e52bf2087";
    const PUBLIC_KEY: &[u8] = include_bytes!("testdata/cosign.pub");
    const BUNDLE: &[u8] = include_bytes!("testdata/bundle.json");
    const SIMPLE_SIGNING: &[u8] = include_bytes!("testdata/simple-signing.json");
    const SIMPLE_SIGNING_SIG: &str = include_str!("testdata/simple-signing.sig");

    fn cosign_key() -> PublicKey {
        PublicKey::from_pem("keys/cosign.pub", PUBLIC_KEY).unwrap()
    }

    #[test]
    fn a_cosign_bundle_verifies_for_its_digest_only() {
        let keys = [cosign_key()];
        assert_eq!(
            check_bundle(BUNDLE, SIGNED, &keys),
            Finding::Valid("keys/cosign.pub".into())
        );
        assert_eq!(
            check_bundle(BUNDLE, DIGEST, &keys),
            Finding::Mismatch(format!(
                "signed by keys/cosign.pub over {SIGNED}, not {DIGEST}"
            ))
        );
        assert_eq!(
            check_bundle(BUNDLE, SIGNED, &[test_key("keys/other.pub").public]),
            Finding::Rejected("signed by none of the keys".into())
        );
    }

    #[test]
    fn a_cosign_signature_image_layer_verifies_for_its_digest_only() {
        let keys = [test_key("keys/other.pub").public, cosign_key()];
        assert_eq!(
            check_simple_signing(SIMPLE_SIGNING, SIMPLE_SIGNING_SIG, SIGNED, &keys),
            Finding::Valid("keys/cosign.pub".into())
        );
        assert!(matches!(
            check_simple_signing(SIMPLE_SIGNING, SIMPLE_SIGNING_SIG, DIGEST, &keys),
            Finding::Mismatch(_)
        ));
        // One byte of the payload changed: the signature no longer holds.
        let mut tampered = SIMPLE_SIGNING.to_vec();
        let last = tampered.len() - 2;
        tampered[last] ^= 1;
        assert_eq!(
            check_simple_signing(&tampered, SIMPLE_SIGNING_SIG, SIGNED, &keys),
            Finding::Rejected("signed by none of the keys".into())
        );
    }

    #[test]
    fn the_cosign_key_fingerprint_is_its_der_digest() {
        let key = cosign_key();
        let der = base64::engine::general_purpose::STANDARD
            .decode(
                std::str::from_utf8(PUBLIC_KEY)
                    .unwrap()
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<String>(),
            )
            .unwrap();
        assert_eq!(
            key.fingerprint(),
            format!("sha256:{}", hex::encode(Sha256::digest(&der)))
        );
    }
}
