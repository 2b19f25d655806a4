//! Content that a provisioner other than `gantry.dev/plain` renders from the image: the
//! configuration it is given (`spec.configFrom` merged with `spec.config`), and the built-in
//! OLM `registry+v1` renderer. The rendered objects are stored as canonical content, like a
//! plain bundle's, so that every later step (approval, diff, apply, drift) works on what is
//! really applied.

use gantry_api::{Bundle, ConfigSourceKind, Rendered};
use gantry_image::{EffectiveLimits, PulledBundle, parse_file, parse_mapping};
use gantry_rules::class_selection::ProvisionerKind;
use gantry_rules::config::{RenderInput, digest, merged};
use gantry_rules::registry_v1::{RegistryBundle, render, watch_namespace};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::Api;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The version of the built-in provisioners: part of every rendered content's digest.
pub const BUILT_IN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A bundle's configuration, merged, and its digest (`status.configDigest`).
#[derive(Debug, Clone)]
pub(crate) struct Configuration {
    pub config: Map<String, Value>,
    pub digest: String,
}

/// The configuration of `bundle` for a provisioner of `kind`: none for `gantry.dev/plain`
/// (which refuses one), else `spec.configFrom` read with `client` (the bundle's identity) in
/// the install namespace, in order, under `spec.config`.
pub(crate) async fn configuration(
    bundle: &Bundle,
    kind: ProvisionerKind,
    provisioner: &str,
    client: &Client,
    limits: &EffectiveLimits,
) -> Result<Option<Configuration>> {
    let spec = &bundle.spec;
    if kind == ProvisionerKind::Plain {
        if spec.config.as_ref().is_some_and(|c| !c.is_empty()) || !spec.config_from.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "{provisioner} takes no configuration: spec.config and spec.configFrom must be empty"
            )));
        }
        return Ok(None);
    }
    let mut sources = Vec::with_capacity(spec.config_from.len());
    if !spec.config_from.is_empty() {
        let Some(namespace) = spec.install_namespace.as_deref() else {
            return Err(Error::InvalidConfig(
                "spec.configFrom reads ConfigMaps and Secrets in spec.installNamespace, which is not set".into(),
            ));
        };
        for (index, source) in spec.config_from.iter().enumerate() {
            let field = format!("spec.configFrom[{index}]");
            let what = format!("{} in namespace {namespace} ({field})", source.describe());
            let text = match read_source(client, namespace, source).await? {
                Some(text) => text,
                None if source.optional => continue,
                None => {
                    return Err(Error::ConfigSource(format!(
                        "{what}: not found (set optional: true to go on without it)"
                    )));
                }
            };
            let mapping = parse_mapping(&what, &text, limits)
                .map_err(|e| Error::ConfigSource(e.to_string()))?;
            sources.push(mapping);
        }
    }
    let config = merged(sources, spec.config.as_ref());
    let digest = digest(&config);
    Ok(Some(Configuration { config, digest }))
}

/// The bytes at the source's key; `None` when the object or the key is missing.
async fn read_source(
    client: &Client,
    namespace: &str,
    source: &gantry_api::ConfigSource,
) -> Result<Option<Vec<u8>>> {
    let key = source.key();
    Ok(match source.kind {
        ConfigSourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            api.get_opt(&source.name).await?.and_then(|map| {
                map.data
                    .and_then(|mut data| data.remove(key))
                    .map(String::into_bytes)
                    .or_else(|| {
                        map.binary_data
                            .and_then(|mut data| data.remove(key))
                            .map(|bytes| bytes.0)
                    })
            })
        }
        ConfigSourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            api.get_opt(&source.name).await?.and_then(|secret| {
                secret
                    .data
                    .and_then(|mut data| data.remove(key))
                    .map(|bytes| bytes.0)
                    .or_else(|| {
                        secret
                            .string_data
                            .and_then(|mut data| data.remove(key))
                            .map(String::into_bytes)
                    })
            })
        }
    })
}

/// The render input of `bundle` from the image `digest` under `configuration`, rendered by
/// `provisioner` at `version`.
pub(crate) fn input<'a>(
    bundle: &'a Bundle,
    name: &'a str,
    digest: &'a str,
    configuration: &'a Configuration,
    provisioner: &'a str,
    version: &'a str,
) -> RenderInput<'a> {
    RenderInput {
        source_digest: digest,
        config_digest: &configuration.digest,
        release_name: name,
        release_namespace: bundle.spec.install_namespace.as_deref().unwrap_or_default(),
        provisioner,
        provisioner_version: version,
    }
}

/// The files of a plugin's answer: one per wave (`wave-000.yaml`, …), applied in that order,
/// each headed by what it was rendered from, each object by where it came from in the
/// content (as `helm template` marks them).
pub(crate) fn plugin_files(
    input: &RenderInput<'_>,
    response: &gantry_api::plugin::RenderResponse,
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut waves: std::collections::BTreeMap<u32, String> = std::collections::BTreeMap::new();
    for rendered in &response.objects {
        let object = Value::Object(rendered.object.clone());
        let yaml =
            gantry_image::on_parse_stack(|| serde_saphyr::to_string(&object)).map_err(|e| {
                Error::PluginFailed(format!(
                    "plugin {}: writing {}: {e}",
                    input.provisioner,
                    describe(&object)
                ))
            })?;
        let text = waves.entry(rendered.wave).or_insert_with(|| input.header());
        text.push_str("---\n");
        if let Some(source) = &rendered.source {
            // One line, whatever the plugin put in the name.
            let file: String = source.file.chars().filter(|c| !c.is_control()).collect();
            text.push_str(&format!("# Source: {file}\n"));
        }
        text.push_str(&yaml);
        if !yaml.ends_with('\n') {
            text.push('\n');
        }
    }
    Ok(waves
        .into_iter()
        .map(|(wave, text)| (format!("wave-{wave:03}.yaml"), text.into_bytes()))
        .collect())
}

/// What a plugin rendered, by its own name and version: a Helm chart's config blob names them
/// (`{"name": …, "version": …}`).
pub(crate) fn source_of(config_blob: &[u8]) -> Option<String> {
    let config: Value = serde_json::from_slice(config_blob).ok()?;
    match (config["name"].as_str(), config["version"].as_str()) {
        (Some(name), Some(version)) => Some(format!("{name} {version}")),
        (Some(name), None) => Some(name.to_string()),
        _ => None,
    }
}

/// Text cut to `limit` bytes at a character boundary.
pub(crate) fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What a rendering produced: the files of the content (directly in `manifests/`) and what
/// status records of it.
pub(crate) struct RenderedContent {
    pub files: Vec<(String, Vec<u8>)>,
    pub rendered: Rendered,
}

/// Renders an OLM `registry+v1` bundle: the objects of its `manifests/` and its
/// `metadata/annotations.yaml`, installed in the bundle's install namespace and watching the
/// configuration's `watchNamespace`. Runs on a blocking thread's stack as parsing does.
pub(crate) fn render_registry(
    pulled: &PulledBundle,
    bundle: &Bundle,
    image: &str,
    input: &RenderInput<'_>,
    configuration: &Configuration,
) -> Result<RenderedContent> {
    let failed = |message: String| Error::Render {
        provisioner: input.provisioner.to_string(),
        image: image.to_string(),
        message,
    };
    let Some(install_namespace) = bundle.spec.install_namespace.as_deref() else {
        return Err(Error::InvalidConfig(format!(
            "{} installs the operator in spec.installNamespace, which is not set",
            input.provisioner
        )));
    };
    let annotations = pulled
        .files
        .metadata
        .get("annotations.yaml")
        .ok_or_else(|| {
            failed("metadata/annotations.yaml is missing: this is not a registry+v1 bundle".into())
        })?;
    let annotations = std::str::from_utf8(annotations)
        .map_err(|_| failed("metadata/annotations.yaml is not UTF-8".into()))?;
    let limits = pulled.limits();
    let mut objects = Vec::new();
    for (file, stored) in &pulled.files.files {
        let content = std::fs::read(&stored.path)
            .map_err(|e| Error::Storage(format!("reading manifests/{file}: {e}")))?;
        for object in parse_file(file, &content, limits).map_err(|e| Error::from_image(image, e))? {
            objects.push(object.value().map_err(|e| Error::from_image(image, e))?);
        }
    }
    let watch = watch_namespace(&configuration.config).map_err(|e| failed(e.to_string()))?;
    let registry_bundle =
        RegistryBundle::new(objects, annotations).map_err(|e| failed(e.to_string()))?;
    let rendered = render(&registry_bundle, install_namespace, watch.as_deref())
        .map_err(|e| failed(e.to_string()))?;
    let mut text = input.header();
    for object in &rendered {
        let yaml = gantry_image::on_parse_stack(|| serde_saphyr::to_string(object))
            .map_err(|e| failed(format!("writing {}: {e}", describe(object))))?;
        text.push_str("---\n");
        text.push_str(&yaml);
        if !yaml.ends_with('\n') {
            text.push('\n');
        }
    }
    Ok(RenderedContent {
        files: vec![("rendered.yaml".into(), text.into_bytes())],
        rendered: Rendered {
            provisioner: input.provisioner.to_string(),
            version: input.provisioner_version.to_string(),
            source: Some(registry_bundle.csv_name()),
            input_digest: input.digest(),
            notes: None,
            warnings: Vec::new(),
        },
    })
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or("object"),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Whether stored content was rendered from `input`: the status records its input digest.
pub(crate) fn rendered_from(bundle_status: Option<&Rendered>, input: Option<&str>) -> bool {
    bundle_status.map(|r| r.input_digest.as_str()) == input
}
