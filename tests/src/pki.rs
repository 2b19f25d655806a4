//! Certificates for the control plane and the registry, generated per test binary.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::HarnessError;

/// A certificate authority that issues loopback serving certificates and client certificates.
pub struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its private key, both PEM.
pub struct IssuedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    /// A new CA named `common_name`.
    pub fn new(common_name: &str) -> Result<Self, HarnessError> {
        let mut params = CertificateParams::new(Vec::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let ca_pem = params.self_signed(&key)?.pem();
        Ok(Self {
            ca_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A serving certificate for `127.0.0.1` and `localhost`.
    pub fn loopback_server(&self) -> Result<IssuedCert, HarnessError> {
        self.server(&["localhost"], &[])
    }

    /// A serving certificate for `127.0.0.1`, `localhost`, the DNS `names` and the `addresses`.
    pub fn server(&self, names: &[&str], addresses: &[IpAddr]) -> Result<IssuedCert, HarnessError> {
        let mut dns: Vec<String> = vec!["localhost".to_string()];
        dns.extend(names.iter().map(|n| n.to_string()));
        dns.dedup();
        let mut params = CertificateParams::new(dns)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        for address in addresses {
            params.subject_alt_names.push(SanType::IpAddress(*address));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        self.issue(params)
    }

    /// A client certificate for user `common_name`, in group `organization` if given
    /// (Kubernetes reads the user from CN and the group from O).
    pub fn client(
        &self,
        common_name: &str,
        organization: Option<&str>,
    ) -> Result<IssuedCert, HarnessError> {
        let mut params = CertificateParams::new(Vec::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        if let Some(organization) = organization {
            params
                .distinguished_name
                .push(DnType::OrganizationName, organization);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Result<IssuedCert, HarnessError> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A key pair for signing ServiceAccount tokens: (private key PEM, public key PEM).
pub(crate) fn service_account_keys() -> Result<(String, String), HarnessError> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
