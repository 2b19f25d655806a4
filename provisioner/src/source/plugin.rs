//! External provisioner plugins (docs/plugins.md, contract `v1`): a plugin is a Service in the
//! provisioner's own namespace, labelled `gantry.dev/provisioner-plugin: "true"` and annotated
//! with the provisioner ID it serves, so only who may create Services there (the Gantry
//! administrator) can register one. It is called over HTTPS verified against the CA its
//! Service names, with a ServiceAccount token of the provisioner for the plugins' audience.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gantry_api::plugin::{
    CA_ANNOTATION, CONTRACT, Capability, Cluster, ErrorResponse, Identity, PATH_PREFIX,
    PLUGIN_LABEL, PROVISIONER_ANNOTATION, Probe, RenderRequest, RenderResponse,
};
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

/// How long `identity` and `probe` may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an identity is taken as known without asking again.
const IDENTITY_TTL: Duration = Duration::from_secs(60);
/// How long a probe's answer holds (the contract: at most every 10 s per plugin).
const PROBE_TTL: Duration = Duration::from_secs(10);
/// How long the cluster's facts (version, served API versions) are reused.
const CLUSTER_TTL: Duration = Duration::from_secs(300);

/// Why a plugin could not be used or did not render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginFailure {
    /// No Service registers the ID, its CA cannot be read, its identity does not match, or
    /// its probe says it is not ready: the bundle waits.
    #[error("{0}")]
    NotReady(String),
    /// The plugin refused the input (`422`, or `retryable: false`): the same input cannot
    /// render.
    #[error("{message}")]
    Refused { message: String },
    /// A failure a retry may mend: unreachable, `503`, `401`, an answer that is not the
    /// contract's, or beyond the limits.
    #[error("{0}")]
    Failed(String),
}

/// The plugins registered in the provisioner's namespace, and how to call them.
pub struct Plugins {
    namespace: String,
    /// The provisioner's token for plugins (a projected ServiceAccount token with the
    /// plugins' audience), read on every call: the kubelet rotates it.
    token_file: Option<PathBuf>,
    /// The labelled Services, by name.
    services: RwLock<BTreeMap<String, Service>>,
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    cluster: tokio::sync::Mutex<Option<(Instant, Cluster)>>,
}

/// One plugin's address and HTTPS client, for one version of its Service and CA.
pub struct Connection {
    /// What it was made from: the Service's UID and resourceVersion, the CA Secret's.
    key: (String, String, String),
    pub url: String,
    http: reqwest::Client,
    identity: Mutex<Option<(Instant, Identity)>>,
    probe: Mutex<Option<(Instant, Probe)>>,
}

impl Plugins {
    pub fn new(namespace: String, token_file: Option<PathBuf>) -> Self {
        Plugins {
            namespace,
            token_file,
            services: RwLock::default(),
            connections: Mutex::default(),
            cluster: tokio::sync::Mutex::new(None),
        }
    }

    /// Follows one event of the watch of labelled Services in the provisioner's namespace.
    pub fn observe(&self, event: &watcher::Event<Service>) {
        let Ok(mut services) = self.services.write() else {
            return;
        };
        match event {
            watcher::Event::Apply(service) | watcher::Event::InitApply(service) => {
                services.insert(service.name_any(), service.clone());
            }
            watcher::Event::Delete(service) => {
                services.remove(&service.name_any());
            }
            watcher::Event::Init => services.clear(),
            watcher::Event::InitDone => {}
        }
    }

    /// The provisioner IDs registered Services serve.
    pub fn ids(&self) -> BTreeSet<String> {
        self.services
            .read()
            .map(|services| services.values().filter_map(provisioner_of).collect())
            .unwrap_or_default()
    }

    /// The Service registering `id`: when several do, the first by name, so that every
    /// replica picks the same.
    fn service_of(&self, id: &str) -> Result<Service, PluginFailure> {
        let services = self
            .services
            .read()
            .map_err(|_| PluginFailure::NotReady("the plugin registry is poisoned".into()))?;
        services
            .values()
            .find(|s| provisioner_of(s).as_deref() == Some(id))
            .cloned()
            .ok_or_else(|| {
                PluginFailure::NotReady(format!(
                    "no plugin is registered for {id}: no Service in namespace {} is labelled {PLUGIN_LABEL}=\"true\" and annotated {PROVISIONER_ANNOTATION}: {id}",
                    self.namespace
                ))
            })
    }

    /// The connection to the plugin of `id`, made again when its Service or CA changed.
    async fn connection(
        &self,
        client: &Client,
        id: &str,
    ) -> Result<Arc<Connection>, PluginFailure> {
        let service = self.service_of(id)?;
        let name = service.name_any();
        let Some(ca_secret) = service.annotations().get(CA_ANNOTATION).cloned() else {
            return Err(PluginFailure::NotReady(format!(
                "Service {}/{name} of plugin {id} names no CA: annotate it {CA_ANNOTATION}: <Secret with ca.crt>",
                self.namespace
            )));
        };
        let secret = Api::<Secret>::namespaced(client.clone(), &self.namespace)
            .get_opt(&ca_secret)
            .await
            .map_err(|e| {
                PluginFailure::NotReady(format!(
                    "reading the CA Secret {}/{ca_secret} of plugin {id}: {e}",
                    self.namespace
                ))
            })?
            .ok_or_else(|| {
                PluginFailure::NotReady(format!(
                    "the CA Secret {}/{ca_secret} of plugin {id} does not exist",
                    self.namespace
                ))
            })?;
        let key = (
            service.metadata.uid.clone().unwrap_or_default(),
            service.resource_version().unwrap_or_default(),
            secret.resource_version().unwrap_or_default(),
        );
        if let Ok(connections) = self.connections.lock()
            && let Some(connection) = connections.get(id)
            && connection.key == key
        {
            return Ok(connection.clone());
        }
        let pem = secret
            .data
            .as_ref()
            .and_then(|data| data.get("ca.crt"))
            .map(|bytes| bytes.0.clone())
            .ok_or_else(|| {
                PluginFailure::NotReady(format!(
                    "the CA Secret {}/{ca_secret} of plugin {id} has no ca.crt",
                    self.namespace
                ))
            })?;
        let url = url_of(&service, &self.namespace).map_err(PluginFailure::NotReady)?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            PluginFailure::NotReady(format!(
                "the ca.crt of Secret {}/{ca_secret}: {e}",
                self.namespace
            ))
        })?;
        let http = reqwest::Client::builder()
            // Only the plugin's CA: no system roots, no proxy, no plain HTTP.
            .tls_certs_only(certificates)
            .https_only(true)
            .no_proxy()
            .connect_timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| {
                PluginFailure::NotReady(format!("the HTTPS client of plugin {id}: {e}"))
            })?;
        let connection = Arc::new(Connection {
            key,
            url,
            http,
            identity: Mutex::new(None),
            probe: Mutex::new(None),
        });
        if let Ok(mut connections) = self.connections.lock() {
            connections.insert(id.to_string(), connection.clone());
        }
        Ok(connection)
    }

    /// The plugin of `id`, ready to render: registered, verified, of contract `v1`, its
    /// identity the ID, and its probe ready. Identity and probe are asked again only now and
    /// then.
    pub async fn ready(
        &self,
        client: &Client,
        id: &str,
    ) -> Result<(Arc<Connection>, Identity), PluginFailure> {
        let connection = self.connection(client, id).await?;
        let identity = match cached(&connection.identity, IDENTITY_TTL) {
            Some(identity) => identity,
            None => {
                let identity: Identity = self
                    .call(
                        &connection,
                        id,
                        reqwest::Method::GET,
                        "identity",
                        None,
                        CALL_TIMEOUT,
                        1 << 20,
                    )
                    .await
                    .map_err(not_ready)?;
                if identity.contract != CONTRACT || identity.id != id {
                    return Err(PluginFailure::NotReady(format!(
                        "the plugin at {} is {} (contract {}), not {id} (contract {CONTRACT})",
                        connection.url, identity.id, identity.contract
                    )));
                }
                store(&connection.identity, identity.clone());
                identity
            }
        };
        let probe = match cached(&connection.probe, PROBE_TTL) {
            Some(probe) => probe,
            None => {
                let probe: Probe = self
                    .call(
                        &connection,
                        id,
                        reqwest::Method::GET,
                        "probe",
                        None,
                        CALL_TIMEOUT,
                        1 << 20,
                    )
                    .await
                    .map_err(not_ready)?;
                store(&connection.probe, probe.clone());
                probe
            }
        };
        if !probe.ready {
            return Err(PluginFailure::NotReady(format!(
                "plugin {id} at {} is not ready: {}",
                connection.url,
                if probe.message.is_empty() {
                    "its probe gives no reason"
                } else {
                    &probe.message
                }
            )));
        }
        Ok((connection, identity))
    }

    /// Renders `request` with the plugin behind `connection`, its answer at most `max_bytes`.
    pub async fn render(
        &self,
        connection: &Connection,
        identity: &Identity,
        request: &RenderRequest,
        timeout: Duration,
        max_bytes: u64,
    ) -> Result<RenderResponse, PluginFailure> {
        let body = serde_json::to_vec(request)
            .map_err(|e| PluginFailure::Failed(format!("writing the render request: {e}")))?;
        let mut response: RenderResponse = self
            .call(
                connection,
                &identity.id,
                reqwest::Method::POST,
                "render",
                Some(body),
                timeout,
                max_bytes,
            )
            .await?;
        // Only what the plugin declared counts.
        if !identity.capabilities.contains(&Capability::Waves) {
            response.objects.iter_mut().for_each(|o| o.wave = 0);
        }
        if !identity.capabilities.contains(&Capability::Notes) {
            response.notes.clear();
        }
        Ok(response)
    }

    /// One call: the token, the deadline, the answer's size bounded while it streams, and the
    /// answer read as the contract's document `T` (or its error document).
    #[allow(clippy::too_many_arguments)]
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        connection: &Connection,
        id: &str,
        method: reqwest::Method,
        call: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
        max_bytes: u64,
    ) -> Result<T, PluginFailure> {
        let token = match &self.token_file {
            Some(path) => std::fs::read_to_string(path)
                .map(|t| t.trim().to_string())
                .map_err(|e| {
                    PluginFailure::NotReady(format!(
                        "reading the token for plugins {}: {e}",
                        path.display()
                    ))
                })?,
            None => {
                return Err(PluginFailure::NotReady(
                    "the provisioner has no token for plugins (--plugin-token-file)".into(),
                ));
            }
        };
        let url = format!("{}{PATH_PREFIX}/{call}", connection.url);
        let mut request = connection
            .http
            .request(method, &url)
            .bearer_auth(token)
            .header(http::header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let answer = async {
            let response = request.send().await.map_err(|e| {
                PluginFailure::Failed(format!("plugin {id}: {call}: {}", causes(&e)))
            })?;
            let status = response.status();
            let mut body = Vec::new();
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    PluginFailure::Failed(format!(
                        "plugin {id}: {call}: reading the answer: {}",
                        causes(&e)
                    ))
                })?;
                if (body.len() + chunk.len()) as u64 > max_bytes {
                    return Err(PluginFailure::Failed(format!(
                        "plugin {id} answered {call} with more than {max_bytes} bytes, the class's limit (maxUncompressedBytes)"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, PluginFailure>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, answer).await.map_err(|_| {
            PluginFailure::Failed(format!(
                "plugin {id} did not answer {call} within {}",
                gantry_rules::duration::GoDuration(timeout)
            ))
        })??;
        if status.is_success() {
            return gantry_image::on_parse_stack(|| serde_json::from_slice(&body)).map_err(|e| {
                PluginFailure::Failed(format!(
                    "plugin {id} answered {call} with a document that is not the contract's: {e}"
                ))
            });
        }
        let error = serde_json::from_slice::<ErrorResponse>(&body)
            .ok()
            .map(|e| e.error);
        let said = match &error {
            Some(error) => {
                let place = match (&error.file, error.line) {
                    (Some(file), Some(line)) => format!(" ({file}:{line})"),
                    (Some(file), None) => format!(" ({file})"),
                    _ => String::new(),
                };
                format!("{}{place}", error.message)
            }
            None => format!("HTTP {status}"),
        };
        match (status.as_u16(), &error) {
            (422, _)
            | (
                _,
                Some(gantry_api::plugin::PluginError {
                    retryable: false, ..
                }),
            ) if status.as_u16() != 401 && status.as_u16() != 403 => {
                Err(PluginFailure::Refused { message: said })
            }
            (401 | 403, _) => Err(PluginFailure::Failed(format!(
                "plugin {id} refused the provisioner's token ({call}: {said})"
            ))),
            _ => Err(PluginFailure::Failed(format!(
                "plugin {id}: {call}: {said}"
            ))),
        }
    }

    /// The cluster's version and served API versions, as Helm's `.Capabilities` lists them.
    pub async fn cluster(&self, client: &Client) -> Result<Cluster, PluginFailure> {
        let mut cached = self.cluster.lock().await;
        if let Some((at, cluster)) = cached.as_ref()
            && at.elapsed() < CLUSTER_TTL
        {
            return Ok(cluster.clone());
        }
        let failed =
            |e: kube::Error| PluginFailure::Failed(format!("discovering the cluster's APIs: {e}"));
        let version = client
            .apiserver_version()
            .await
            .map_err(failed)?
            .git_version;
        let mut api_versions = BTreeSet::new();
        let groups = client.list_api_groups_aggregated().await.map_err(failed)?;
        let core = client
            .list_core_api_versions_aggregated()
            .await
            .map_err(failed)?;
        for group in core.items.iter().chain(groups.items.iter()) {
            let name = group
                .metadata
                .as_ref()
                .and_then(|m| m.name.clone())
                .unwrap_or_default();
            for version in &group.versions {
                let Some(v) = &version.version else { continue };
                let group_version = if name.is_empty() {
                    v.clone()
                } else {
                    format!("{name}/{v}")
                };
                for resource in &version.resources {
                    if let Some(kind) = resource
                        .response_kind
                        .as_ref()
                        .and_then(|k| k.kind.as_ref())
                    {
                        api_versions.insert(format!("{group_version}/{kind}"));
                    }
                }
                api_versions.insert(group_version);
            }
        }
        let cluster = Cluster {
            version,
            api_versions: api_versions.into_iter().collect(),
        };
        *cached = Some((Instant::now(), cluster.clone()));
        Ok(cluster)
    }
}

/// The provisioner ID a Service registers.
fn provisioner_of(service: &Service) -> Option<String> {
    let labelled = service
        .labels()
        .get(PLUGIN_LABEL)
        .is_some_and(|v| v == "true");
    labelled
        .then(|| service.annotations().get(PROVISIONER_ANNOTATION).cloned())
        .flatten()
}

/// Where a plugin's Service is reached: its port named `https` (else its only port), at
/// `<service>.<namespace>.svc`, or at the host an `ExternalName` Service names.
fn url_of(service: &Service, namespace: &str) -> Result<String, String> {
    let name = service.name_any();
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec.ports.unwrap_or_default();
    let port = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("https"))
        .or_else(|| (ports.len() == 1).then(|| &ports[0]))
        .ok_or_else(|| format!("Service {namespace}/{name} has no port named https"))?;
    let host = match (spec.type_.as_deref(), spec.external_name) {
        (Some("ExternalName"), Some(host)) => host,
        _ => format!("{name}.{namespace}.svc"),
    };
    Ok(format!("https://{host}:{}", port.port))
}

fn not_ready(failure: PluginFailure) -> PluginFailure {
    match failure {
        PluginFailure::Failed(message) | PluginFailure::Refused { message } => {
            PluginFailure::NotReady(message)
        }
        other => other,
    }
}

fn cached<T: Clone>(slot: &Mutex<Option<(Instant, T)>>, ttl: Duration) -> Option<T> {
    let slot = slot.lock().ok()?;
    slot.as_ref()
        .filter(|(at, _)| at.elapsed() < ttl)
        .map(|(_, value)| value.clone())
}

fn store<T>(slot: &Mutex<Option<(Instant, T)>>, value: T) {
    if let Ok(mut slot) = slot.lock() {
        *slot = Some((Instant::now(), value));
    }
}

/// An error and its sources, on one line.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    fn service(name: &str, id: Option<&str>, labelled: bool, spec: ServiceSpec) -> Service {
        let mut service = Service {
            spec: Some(spec),
            ..Default::default()
        };
        service.metadata.name = Some(name.into());
        if labelled {
            service
                .labels_mut()
                .insert(PLUGIN_LABEL.into(), "true".into());
        }
        if let Some(id) = id {
            service
                .annotations_mut()
                .insert(PROVISIONER_ANNOTATION.into(), id.into());
        }
        service
    }

    fn port(name: &str, port: i32) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port,
            ..Default::default()
        }
    }

    #[test]
    fn only_labelled_and_annotated_services_register_a_plugin() {
        let plugins = Plugins::new("gantry-system".into(), None);
        for s in [
            service(
                "helm",
                Some("gantry.dev/helm"),
                true,
                ServiceSpec::default(),
            ),
            service("unlabelled", Some("x.dev/a"), false, ServiceSpec::default()),
            service("unannotated", None, true, ServiceSpec::default()),
        ] {
            plugins.observe(&watcher::Event::Apply(s));
        }
        assert_eq!(
            plugins.ids(),
            BTreeSet::from(["gantry.dev/helm".to_string()])
        );
        assert!(matches!(
            plugins.service_of("x.dev/a"),
            Err(PluginFailure::NotReady(m)) if m.contains("no plugin is registered for x.dev/a")
        ));
        plugins.observe(&watcher::Event::Delete(service(
            "helm",
            Some("gantry.dev/helm"),
            true,
            ServiceSpec::default(),
        )));
        assert!(plugins.ids().is_empty());
    }

    #[test]
    fn a_plugin_is_reached_on_its_https_port_by_its_service_name() {
        let spec = ServiceSpec {
            ports: Some(vec![port("metrics", 9090), port("https", 8443)]),
            ..Default::default()
        };
        let s = service("helm", Some("gantry.dev/helm"), true, spec);
        assert_eq!(
            url_of(&s, "gantry-system").unwrap(),
            "https://helm.gantry-system.svc:8443"
        );
        let external = ServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some("localhost".into()),
            ports: Some(vec![port("https", 18443)]),
            ..Default::default()
        };
        let s = service("helm", Some("gantry.dev/helm"), true, external);
        assert_eq!(
            url_of(&s, "gantry-system").unwrap(),
            "https://localhost:18443"
        );
        let two = ServiceSpec {
            ports: Some(vec![port("a", 1), port("b", 2)]),
            ..Default::default()
        };
        let s = service("helm", Some("gantry.dev/helm"), true, two);
        assert!(
            url_of(&s, "ns")
                .unwrap_err()
                .contains("no port named https")
        );
    }
}
