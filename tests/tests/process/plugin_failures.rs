//! A provisioner plugin that hangs, dies, answers garbage or answers too much
//! (docs/plugins.md, "When a plugin fails"): the bundle fails with a message naming the plugin,
//! the content installed before stays as it is, and the bundle recovers by itself once the
//! plugin behaves; a hanging render ends at the bundle's `timeout` while the provisioner goes on
//! with other bundles; an answer beyond the class's limits is cut off while it streams; a dead
//! plugin makes its class `Accepted=False` and its new bundles wait with
//! `ProvisionerNotReady`; and `kubectl bundle plugin check` fails a hanging plugin and a dead
//! address within its own deadline.
//!
//! The plugin is `gantry_tests::rogue_plugin`, switched from one misbehaviour to the next while
//! it runs. Each test runs a provisioner of its own on the shared control plane (an
//! [`Installation`], its own provisioner ID, namespace and plain class) with a token for
//! plugins, and registers the rogue plugin in that namespace alone.

use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::plugin::{
    CA_ANNOTATION, CONTRACT, Cluster, Content, PLUGIN_LABEL, PROVISIONER_ANNOTATION, Release,
    RenderRequest,
};
use gantry_api::{ApprovalPolicy, Bundle, Limits, PLAIN_PROVISIONER, ProvisionerClass};
use gantry_api::{BundleSpec, ProvisionerClassSpec};
use gantry_rules::conditions::ConditionStatus;
use gantry_tests::e2e::kubectl::{plugin_check, stdout_lines, text};
use gantry_tests::e2e::*;
use gantry_tests::helm_plugin::{CALLER_ACCOUNT, ensure_service_account};
use gantry_tests::rogue_plugin::{Mode, ROGUE_CONFIG_MAP, ROGUE_MEDIA_TYPE, RoguePlugin};
use gantry_tests::{control_plane, free_port, unique_name, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::Client;
use kube::api::Api;
use serde_json::json;

/// The class's limits on a plugin's answer.
const MAX_BYTES: i64 = 1 << 20;
const MAX_OBJECTS: i64 = 5;

/// How long a class's `Accepted` may take to follow its plugin: the provisioner asks again
/// every 30 s, and a probe's answer holds 10 s.
const CLASS_FOLLOWS: Duration = Duration::from_secs(120);

/// A provisioner of its own with a token for plugins, the rogue plugin registered with it, a
/// class of the plugin, a namespace to install into and an image to render.
struct Rig {
    client: Client,
    installation: Installation,
    plugin: RoguePlugin,
    /// The plugin's provisioner ID.
    id: String,
    /// The class of the plugin.
    class: String,
    /// The install namespace of its bundles.
    ns: String,
    /// Content to hand to the plugin (it renders the same whatever the content).
    image: String,
    _dir: tempfile::TempDir,
}

async fn rig(prefix: &str) -> Rig {
    let client = shared_gantry_client().await;
    let dir = tempfile::tempdir().unwrap();
    let token = unique_name("rogue-token");
    let token_file = dir.path().join("plugin-token");
    std::fs::write(&token_file, &token).unwrap();
    let token_flag = format!("--plugin-token-file={}", token_file.display());
    let installation = start_installation(
        &client,
        &format!("{PLAIN_PROVISIONER}-{}", unique_name(prefix)),
        &["--backoff-base=200ms", "--backoff-cap=2s", &token_flag],
    )
    .await;
    let id = format!("example.dev/{}", unique_name(prefix));
    let plugin = RoguePlugin::start(&id, Some(&token)).expect("starting the rogue plugin");
    let namespace = installation.namespace.clone();
    apply_object::<Secret>(
        &client,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": "rogue-ca", "namespace": namespace },
            "stringData": { "ca.crt": plugin.ca_pem() },
        }),
    )
    .await;
    apply_object::<Service>(
        &client,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "rogue-plugin", "namespace": namespace,
                "labels": { PLUGIN_LABEL: "true" },
                "annotations": { PROVISIONER_ANNOTATION: id, CA_ANNOTATION: "rogue-ca" },
            },
            "spec": {
                "type": "ExternalName", "externalName": "localhost",
                "ports": [{ "name": "https", "port": plugin.port() }],
            },
        }),
    )
    .await;
    let class = unique_name(prefix);
    let spec = ProvisionerClassSpec {
        provisioner: id.clone(),
        limits: Some(Limits {
            max_uncompressed_bytes: Some(MAX_BYTES),
            max_objects: Some(MAX_OBJECTS),
            ..Default::default()
        }),
        ..class_spec(ApprovalPolicy::Automatic)
    };
    apply_class(&client, &class, spec, false).await;
    let accepted = class_accepted(&client, &class, ConditionStatus::True).await;
    assert!(
        accepted
            .message
            .contains(&format!("plugin {id} 0.1.0 at https://localhost:")),
        "{}",
        accepted.message
    );
    let ns = unique_namespace(&client, prefix).await;
    let image = push_config_map(&format!("{ns}/content:v1"), "unused", None, "x").await;
    Rig {
        client,
        installation,
        plugin,
        id,
        class,
        ns,
        image,
        _dir: dir,
    }
}

impl Rig {
    /// A bundle of the plugin's class whose configuration's `value` is `value`.
    fn spec(&self, value: &str, timeout: Option<&str>) -> BundleSpec {
        BundleSpec {
            config: Some(json!({ "value": value }).as_object().unwrap().clone()),
            timeout: timeout.map(str::to_string),
            ..spec_of_class(&self.image, Some(&self.ns), &self.class)
        }
    }

    /// Gives Bundle `name` the configuration `value`: a change that needs a new render.
    async fn configure(&self, name: &str, value: &str) {
        patch_spec(&self.client, name, json!({ "config": { "value": value } })).await;
    }

    /// The `value` of the ConfigMap the plugin renders, as installed.
    async fn installed(&self) -> Option<String> {
        config_map_data(&self.client, &self.ns, ROGUE_CONFIG_MAP).await
    }

    /// Waits until Bundle `name` is Ready with the plugin's ConfigMap holding `value`.
    async fn ready_with(&self, name: &str, value: &str) -> Bundle {
        let bundle =
            wait_bundle(&self.client, name, &format!("Ready with {value}"), is_ready).await;
        assert_eq!(self.installed().await.as_deref(), Some(value));
        bundle
    }

    /// Waits until the current generation of Bundle `name` fails with `RenderFailed`, naming
    /// the plugin, retried with backoff; the message.
    async fn render_failed(&self, name: &str) -> String {
        let bundle = wait_bundle(&self.client, name, "RenderFailed at its generation", |b| {
            condition(b, types::UNPACKED).is_some_and(|c| {
                c.status == ConditionStatus::False
                    && c.reason == reasons::RENDER_FAILED
                    && c.observed_generation == b.metadata.generation
            })
        })
        .await;
        let message = condition(&bundle, types::UNPACKED).unwrap().message.clone();
        assert!(
            message.contains(&format!("plugin {}", self.id)),
            "the message names the plugin: {message}"
        );
        assert_retry_class(&bundle, types::UNPACKED, reasons::RENDER_FAILED);
        assert!(!is_ready(&bundle), "{:?}", bundle.status);
        message
    }
}

/// Class `name` once its `Accepted` condition is `status`.
async fn class_accepted(
    client: &Client,
    name: &str,
    status: ConditionStatus,
) -> gantry_api::Condition {
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    wait_until(
        &format!("class {name} Accepted={}", status.as_str()),
        CLASS_FOLLOWS,
        || {
            let classes = classes.clone();
            async move {
                let class = classes.get(name).await.ok()?;
                let condition =
                    gantry_rules::conditions::find(&class.status?.conditions, types::ACCEPTED)?
                        .clone();
                (condition.status == status.as_str()).then_some(condition)
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_misbehaving_plugin_fails_the_bundle_naming_it_keeps_what_is_installed_and_is_retried() {
    let rig = rig("rogue-modes").await;
    let name = unique_name("rogue-modes");
    // A short render deadline, so that the hang ends soon.
    create_bundle(&rig.client, &name, rig.spec("v0", Some("3s"))).await;
    rig.ready_with(&name, "v0").await;

    let cases: [(Mode, &str); 6] = [
        (Mode::HangRender, "did not answer render within 3s"),
        (Mode::CloseMidAnswer, "render: reading the answer"),
        (
            Mode::NotJson,
            "answered render with a document that is not the contract's",
        ),
        (
            Mode::WrongShape,
            "answered render with a document that is not the contract's",
        ),
        (
            Mode::Endless,
            "answered render with more than 1048576 bytes, the class's limit (maxUncompressedBytes)",
        ),
        (
            Mode::Objects(6),
            "answered 6 objects, more than the class's limit maxObjects (5)",
        ),
    ];
    let mut installed = "v0".to_string();
    for (round, (mode, said)) in cases.into_iter().enumerate() {
        rig.plugin.set_mode(mode);
        let value = format!("v{}", round + 1);
        let renders = rig.plugin.renders();
        rig.configure(&name, &value).await;
        let message = rig.render_failed(&name).await;
        println!("{mode:?}: {message}");
        assert!(message.contains(said), "{mode:?}: {said:?} in {message}");
        assert!(
            rig.plugin.renders() > renders,
            "{mode:?}: the plugin was asked"
        );
        // Nothing of the failed render is applied; what was installed stays.
        assert_eq!(rig.installed().await, Some(installed.clone()), "{mode:?}");
        let bundle = get_bundle(&rig.client, &name).await;
        assert_eq!(inventory_kinds(&bundle), ["ConfigMap"], "{mode:?}");
        let live: Api<ConfigMap> = Api::namespaced(rig.client.clone(), &rig.ns);
        assert!(
            live.get_opt(&format!("{ROGUE_CONFIG_MAP}-0"))
                .await
                .unwrap()
                .is_none(),
            "{mode:?}: no object of a refused answer is applied"
        );

        // Retried with backoff: once the plugin behaves, the bundle gets there by itself.
        rig.plugin.set_mode(Mode::Healthy);
        rig.ready_with(&name, &value).await;
        installed = value;
    }
    assert!(
        class_accepted(&rig.client, &rig.class, ConditionStatus::True)
            .await
            .message
            .contains("is ready"),
        "the plugin's identity and probe were fine all along"
    );
}

#[tokio::test]
async fn a_hanging_render_ends_at_the_bundle_s_timeout_and_other_bundles_go_on_meanwhile() {
    const TIMEOUT: Duration = Duration::from_secs(30);
    let rig = rig("rogue-hang").await;
    rig.plugin.set_mode(Mode::HangRender);
    let name = unique_name("rogue-hang");
    create_bundle(&rig.client, &name, rig.spec("held", Some("30s"))).await;
    let held = wait_until("the render held by the plugin", WAIT, || async {
        (rig.plugin.hanging() > 0).then(Instant::now)
    })
    .await;

    // The same provisioner installs a plain bundle while the render hangs.
    let plain = unique_name("beside-the-hang");
    let plain_ns = unique_namespace(&rig.client, "beside-the-hang").await;
    let image = push_config_map(&format!("{plain_ns}/app:v1"), "beside", None, "x").await;
    create_bundle_ready(
        &rig.client,
        &plain,
        spec_of_class(&image, Some(&plain_ns), &rig.installation.class),
    )
    .await;
    assert_config_map(&rig.client, &plain_ns, "beside", Some("x")).await;
    let meanwhile = held.elapsed();
    assert!(
        meanwhile < TIMEOUT,
        "the plain bundle was Ready {meanwhile:?} after the render was held"
    );
    let bundle = get_bundle(&rig.client, &name).await;
    assert!(
        condition(&bundle, types::UNPACKED).is_none_or(|c| c.reason != reasons::RENDER_FAILED),
        "the render is still held: {:?}",
        bundle.status
    );

    // The render's deadline is the bundle's timeout, not the 5 s of identity and probe.
    let message = rig.render_failed(&name).await;
    let failed = held.elapsed();
    assert!(
        message.contains(&format!(
            "plugin {} did not answer render within 30s",
            rig.id
        )),
        "{message}"
    );
    assert!(
        failed >= TIMEOUT - Duration::from_secs(2),
        "failed {failed:?} after the render was held, before its timeout"
    );
    assert_eq!(rig.installed().await, None, "nothing is applied");
    let class = class_accepted(&rig.client, &rig.class, ConditionStatus::True).await;
    assert_eq!(class.reason, reasons::ACCEPTED);

    rig.plugin.set_mode(Mode::Healthy);
    rig.ready_with(&name, "held").await;
}

#[tokio::test]
async fn an_answer_beyond_the_class_s_limits_is_cut_off_while_it_streams() {
    let rig = rig("rogue-limits").await;
    // An answer that never ends: refused at the byte limit, not at the bundle's timeout (10m).
    rig.plugin.set_mode(Mode::Endless);
    let name = unique_name("rogue-limits");
    let started = Instant::now();
    create_bundle(&rig.client, &name, rig.spec("big", None)).await;
    let message = rig.render_failed(&name).await;
    assert!(
        message.contains(&format!(
            "plugin {} answered render with more than {MAX_BYTES} bytes, the class's limit (maxUncompressedBytes)",
            rig.id
        )),
        "{message}"
    );
    assert!(started.elapsed() < WAIT, "cut off while it streams");
    assert_eq!(rig.installed().await, None);
    assert!(
        get_bundle(&rig.client, &name)
            .await
            .status
            .unwrap()
            .inventory
            .is_empty()
    );

    // One object more than maxObjects is refused; maxObjects itself installs.
    rig.plugin.set_mode(Mode::Objects(MAX_OBJECTS as usize + 1));
    rig.configure(&name, "six").await;
    let message = rig.render_failed(&name).await;
    assert!(
        message.contains(&format!(
            "plugin {} answered 6 objects, more than the class's limit maxObjects (5)",
            rig.id
        )),
        "{message}"
    );
    let live: Api<ConfigMap> = Api::namespaced(rig.client.clone(), &rig.ns);
    assert!(live.get_opt("rogue-0").await.unwrap().is_none());

    rig.plugin.set_mode(Mode::Objects(MAX_OBJECTS as usize));
    rig.configure(&name, "five").await;
    let bundle = wait_bundle(&rig.client, &name, "Ready with five objects", is_ready).await;
    assert_eq!(inventory_kinds(&bundle).len(), MAX_OBJECTS as usize);
    for i in 0..MAX_OBJECTS {
        assert_config_map(&rig.client, &rig.ns, &format!("rogue-{i}"), Some("five")).await;
    }
}

#[tokio::test]
async fn a_dead_plugin_makes_its_class_not_ready_and_its_bundles_wait_until_it_is_back() {
    let mut rig = rig("rogue-dead").await;
    let installed = unique_name("rogue-installed");
    create_bundle(&rig.client, &installed, rig.spec("before", None)).await;
    rig.ready_with(&installed, "before").await;

    rig.plugin.kill();
    let class = class_accepted(&rig.client, &rig.class, ConditionStatus::False).await;
    println!("Accepted with the plugin gone: {}", class.message);
    assert_eq!(class.reason, reasons::PROVISIONER_NOT_READY);
    assert!(
        class.message.contains(&format!("plugin {}", rig.id))
            && class.message.contains("Connection refused"),
        "{}",
        class.message
    );

    // In a namespace of its own: it renders the same ConfigMap.
    let waiting = unique_name("rogue-waiting");
    let waiting_ns = unique_namespace(&rig.client, "rogue-waiting").await;
    let spec = BundleSpec {
        install_namespace: Some(waiting_ns.clone()),
        ..rig.spec("after", None)
    };
    create_bundle(&rig.client, &waiting, spec).await;
    let bundle = wait_failure(
        &rig.client,
        &waiting,
        types::UNPACKED,
        reasons::PROVISIONER_NOT_READY,
        &format!("plugin {}", rig.id),
    )
    .await;
    assert!(bundle.status.as_ref().unwrap().inventory.is_empty());
    let renders = rig.plugin.renders();
    // What the plugin rendered before stays installed.
    assert_eq!(rig.installed().await.as_deref(), Some("before"));

    rig.plugin.revive().expect("the plugin back on its port");
    let class = class_accepted(&rig.client, &rig.class, ConditionStatus::True).await;
    assert_eq!(class.reason, reasons::ACCEPTED);
    wait_bundle(
        &rig.client,
        &waiting,
        "Ready once the plugin is back",
        is_ready,
    )
    .await;
    assert!(rig.plugin.renders() > renders);
    assert_config_map(&rig.client, &waiting_ns, ROGUE_CONFIG_MAP, Some("after")).await;
    rig.ready_with(&installed, "before").await;

    // A plugin that takes connections and never answers is not ready either: its identity and
    // probe have 5 s.
    rig.plugin.set_mode(Mode::HangAll);
    let class = class_accepted(&rig.client, &rig.class, ConditionStatus::False).await;
    println!("Accepted with the plugin hanging: {}", class.message);
    assert_eq!(class.reason, reasons::PROVISIONER_NOT_READY);
    assert!(
        class
            .message
            .contains(&format!("plugin {} did not answer ", rig.id))
            && class.message.contains(" within 5s"),
        "{}",
        class.message
    );
    rig.plugin.set_mode(Mode::Healthy);
    class_accepted(&rig.client, &rig.class, ConditionStatus::True).await;
    assert_eq!(rig.installed().await.as_deref(), Some("before"));
}

/// A render request of the contract, for the check's `--request`.
fn render_request() -> Vec<u8> {
    let request = RenderRequest {
        contract: CONTRACT.into(),
        content: Content {
            media_type: ROGUE_MEDIA_TYPE.into(),
            digest: format!("sha256:{}", "5b".repeat(32)),
            layers: Vec::new(),
            config: String::new(),
        },
        config: Default::default(),
        release: Release {
            name: "check".into(),
            namespace: "default".into(),
        },
        cluster: Cluster {
            version: "v1.34.1".into(),
            api_versions: vec!["v1".into()],
        },
    };
    serde_json::to_vec(&request).unwrap()
}

#[tokio::test]
async fn the_conformance_check_fails_a_hanging_plugin_and_a_dead_address_within_its_deadline() {
    let client = control_plane().client().await;
    let namespace = unique_name("plugin-check-failures");
    ensure_service_account(&client, &namespace, CALLER_ACCOUNT)
        .await
        .unwrap();
    let account = format!("{namespace}/{CALLER_ACCOUNT}");
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("render.json");
    std::fs::write(&request, render_request()).unwrap();

    // A plugin that takes every connection and never answers.
    let plugin = RoguePlugin::start("example.dev/hanging", None).unwrap();
    plugin.set_mode(Mode::HangAll);
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, plugin.ca_pem()).unwrap();
    let request = request.display().to_string();
    let (output, took) = plugin_check(
        &plugin.url(),
        &ca_file,
        &[
            "--request",
            &request,
            "--service-account",
            &account,
            "--call-timeout",
            "1s",
            "--timeout",
            "6s",
        ],
    );
    println!("against a hanging plugin ({took:?}):\n{}", text(&output));
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = stdout_lines(&output);
    assert_eq!(said.len(), 10, "one line per check: {}", text(&output));
    assert!(
        said.iter().all(|l| l.starts_with("FAIL ")),
        "{}",
        text(&output)
    );
    assert_eq!(
        said[0],
        "FAIL identity: GET /gantry.dev/v1/identity: no answer within 1s"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("not called: the check's deadline (--timeout 6s) passed")),
        "{}",
        text(&output)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("10 of 10 checks failed"),
        "{}",
        text(&output)
    );
    // The deadline, and the time to make and remove the check's tokens and ServiceAccount.
    assert!(took < Duration::from_secs(6 + 30), "took {took:?}");
    drop(plugin);

    // Nothing listens there: each call is refused at once, each check says so.
    let port = free_port().unwrap();
    let url = format!("https://127.0.0.1:{port}");
    let (output, took) = plugin_check(
        &url,
        &ca_file,
        &["--request", &request, "--service-account", &account],
    );
    println!("against a dead address ({took:?}):\n{}", text(&output));
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = stdout_lines(&output);
    assert_eq!(said.len(), 10, "{}", text(&output));
    assert!(
        said.iter().all(|l| l.starts_with("FAIL ")),
        "{}",
        text(&output)
    );
    assert!(
        said[0].starts_with(&format!(
            "FAIL identity: GET /gantry.dev/v1/identity: cannot connect to {url}: "
        )) && said[0].contains("Connection refused"),
        "{}",
        said[0]
    );
    assert!(
        said.iter().any(|l| l.starts_with("FAIL TLS: verified: ")),
        "{}",
        text(&output)
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}
