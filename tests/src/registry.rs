//! Debian's `docker-registry` (CNCF distribution) on loopback.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{HarnessError, IoContext};
use crate::pki::Pki;
use crate::process::{
    Lifetime, free_port_on, require_program, spawn_daemon, state_dir, wait_for_address,
};

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start a registry.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// Serve TLS with a certificate from a CA generated for this registry.
    pub tls: bool,
    /// Require these credentials (htpasswd, bcrypt).
    pub auth: Option<(String, String)>,
}

/// A running registry. Dropping it stops the process.
pub struct Registry {
    host: String,
    /// `http://127.0.0.1:PORT/metrics`: the registry's Prometheus metrics (requests served).
    metrics_url: String,
    root: PathBuf,
    dir: PathBuf,
    ca_pem: Option<String>,
    ca_file: Option<PathBuf>,
    credentials: Option<(String, String)>,
    process: Option<Child>,
}

/// A plain-HTTP registry without auth shared by every test of this test binary.
pub fn registry() -> &'static Registry {
    static SHARED: OnceLock<Registry> = OnceLock::new();
    SHARED.get_or_init(|| Registry::start(RegistryOptions::default()))
}

impl Registry {
    /// Starts a registry of its own; it stops when dropped (or when the test binary exits).
    pub fn start(options: RegistryOptions) -> Self {
        Self::start_with(options, &Lifetime::TestBinary)
            .unwrap_or_else(|e| panic!("starting docker-registry: {e}"))
    }

    /// Starts a registry that lives as long as `lifetime` says. A detached registry keeps
    /// running when this value is dropped.
    pub fn start_with(options: RegistryOptions, lifetime: &Lifetime) -> Result<Self, HarnessError> {
        Self::start_on(options, Ipv4Addr::LOCALHOST.into(), lifetime)
    }

    /// Like [`Self::start_with`], listening on `address` (an address of this machine, e.g. a
    /// node cluster's bridge) instead of 127.0.0.1.
    pub fn start_on(
        options: RegistryOptions,
        address: IpAddr,
        lifetime: &Lifetime,
    ) -> Result<Self, HarnessError> {
        let program = require_program("docker-registry", "docker-registry")?;
        let dir = state_dir(lifetime, "registry")?;
        let root = dir.join("storage");
        std::fs::create_dir_all(&root).context(|| format!("creating {}", root.display()))?;
        let port = free_port_on(address)?;
        let host = format!("{address}:{port}");
        // The debug server counts requests (registry_http_requests_total): benchmarks read it
        // to see how often tags are resolved.
        let debug_port = free_port_on(Ipv4Addr::LOCALHOST.into())?;
        let metrics_url = format!("http://127.0.0.1:{debug_port}/metrics");

        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n  secret: gantry-tests-{port}\n  debug:\n    addr: 127.0.0.1:{debug_port}\n    prometheus:\n      enabled: true\n      path: /metrics\n",
            root = root.display()
        );
        let (mut ca_pem, mut ca_file) = (None, None);
        if options.tls {
            let pki = Pki::new("gantry-tests-registry-ca")?;
            let serving = pki.loopback_server()?;
            let write = |name: &str, contents: &str| -> Result<PathBuf, HarnessError> {
                let path = dir.join(name);
                std::fs::write(&path, contents)
                    .context(|| format!("writing {}", path.display()))?;
                Ok(path)
            };
            let cert = write("registry.crt", &serving.cert_pem)?;
            let key = write("registry.key", &serving.key_pem)?;
            ca_file = Some(write("ca.crt", pki.ca_pem())?);
            ca_pem = Some(pki.ca_pem().to_string());
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
        }
        if let Some((user, password)) = &options.auth {
            // The lowest bcrypt cost keeps tests fast; the registry accepts any valid cost.
            let hash = bcrypt::hash(password, 4)
                .map_err(|e| HarnessError::Other(format!("hashing the registry password: {e}")))?;
            let htpasswd = dir.join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{hash}\n"))
                .context(|| format!("writing {}", htpasswd.display()))?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: gantry-tests\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_file = dir.join("config.yml");
        std::fs::write(&config_file, config)
            .context(|| format!("writing {}", config_file.display()))?;

        let log = dir.join("registry.log");
        let mut command = Command::new(program);
        command.arg("serve").arg(&config_file);
        let mut process = spawn_daemon(lifetime, command, &log)?;
        wait_for_address(
            "docker-registry",
            (address, port).into(),
            &mut process,
            &log,
            START_TIMEOUT,
        )?;
        let process = match lifetime {
            Lifetime::TestBinary => Some(process),
            Lifetime::Detached(_) => None,
        };
        Ok(Self {
            host,
            metrics_url,
            root,
            dir,
            ca_pem,
            ca_file,
            credentials: options.auth,
            process,
        })
    }

    /// `127.0.0.1:PORT` (or `ADDRESS:PORT` for [`Self::start_on`]).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The registry's Prometheus metrics (`registry_http_requests_total` counts requests).
    pub fn metrics_url(&self) -> &str {
        &self.metrics_url
    }

    /// The registry's storage root (`docker/registry/v2/...` below it), for tampering with blobs.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A directory for files that live as long as the registry.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the registry serves TLS.
    pub fn tls(&self) -> bool {
        self.ca_pem.is_some()
    }

    /// The CA that signed the registry's certificate (TLS registries only).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The CA certificate as a file (TLS registries only).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// The credentials the registry requires, if any.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_str()))
    }

    /// A directory laid out as skopeo's `--cert-dir` expects, trusting this registry's CA.
    pub fn skopeo_cert_dir(&self) -> Option<PathBuf> {
        let ca = self.ca_pem.as_ref()?;
        let dir = self.dir.join("skopeo-certs");
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("ca.crt"), ca).ok()?;
        Some(dir)
    }

    /// `docker://HOST/REPO:TAG` style reference for skopeo.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("{}/{repository_and_tag}", self.host)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}
