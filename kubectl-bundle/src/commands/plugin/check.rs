//! `plugin check URL`: the conformance suite of the provisioner plugin contract v1
//! (docs/plugins.md, docs/plugins/v1.schema.json), runnable against any plugin. Each check
//! prints one line, `PASS <name>` or `FAIL <name>: <why>`; the command fails when any check
//! does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::plugin::{
    CONTRACT, ErrorResponse, Identity, Probe, RenderRequest, RenderResponse, TOKEN_AUDIENCE,
};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::http::{
    Answer, CALL_TIMEOUT, Call, Plugin, SUITE_TIMEOUT, Timeouts, excerpt, read_roots, unrelated_ca,
};
use super::tokens::{
    AccountName, CHECK_ACCOUNT, Tokens, check_account, parse_account, served_tokens,
};
use crate::commands::cluster::GlobalArgs;
use crate::commands::output::causes;

#[derive(Args, Debug)]
#[command(after_help = "\
The checks: identity, probe, render (the --request), render is deterministic (the same
request twice gives the same bytes), errors have the contract's shape (the --bad-request
gives 422, a body that is not JSON 422 or 400, each with an error document), auth (no token,
a token for another audience, another ServiceAccount's token and a garbage token are each
refused with 401 by every call) and TLS: verified (the connection verifies with the CA of
--ca-file alone, and fails with another CA).

The tokens are issued with the TokenRequest API with the kubeconfig's credentials: two of
--service-account (for the audience gantry.dev/provisioner-plugin and for another one), and
one of the ServiceAccount gantry-plugin-check, created in the same namespace for the check and
deleted afterwards.

Each call has --call-timeout (30s) to answer, its answer read to the end, and the checks
together have --timeout (5m): a plugin that hangs fails each check it hangs in, and the checks
left when the deadline passes fail without calling it. An address nothing listens on fails
each check at once.

Example:
  kubectl -n gantry-system port-forward svc/gantry-helm-plugin 8443:https &
  kubectl bundle plugin check https://localhost:8443 --ca-file ca.crt \\
    --request render.json --bad-request bad-render.json")]
pub struct CheckArgs {
    /// The plugin's address, `https://HOST:PORT`; the calls are made under `/gantry.dev/v1/`.
    #[arg(value_name = "URL", value_parser = parse_url)]
    url: String,
    /// PEM file of the CA that must verify the plugin's serving certificate: the only CA
    /// trusted.
    #[arg(long, value_name = "PEM")]
    ca_file: PathBuf,
    /// The ServiceAccount whose tokens the plugin is configured to accept.
    #[arg(
        long,
        value_name = "NS/NAME",
        default_value = "gantry-system/gantry-provisioner",
        value_parser = parse_account
    )]
    service_account: AccountName,
    /// A render request (JSON, the contract's `renderRequest`) the plugin must render.
    #[arg(long, value_name = "FILE")]
    request: PathBuf,
    /// A render request the plugin must refuse with `422` and `retryable: false`.
    #[arg(long, value_name = "FILE")]
    bad_request: Option<PathBuf>,
    /// How long each call may take, its answer read to the end (a Go duration: 30s, 1m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    call_timeout: Duration,
    /// How long the checks may take together; those left when it passes fail without calling
    /// the plugin.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,
}

/// A Go duration above zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    gantry_rules::duration::parse_nonzero(text).map_err(|e| e.to_string())
}

/// The URL's base, without a trailing `/`: `https://` only, no query or fragment.
fn parse_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "{text:?}: a plugin is called over HTTPS only (https://HOST:PORT)"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{text:?} names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{text:?}: no query or fragment, please"));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// A body that is no JSON document.
const NOT_JSON: &[u8] = b"this is not JSON {\"contract\":";

/// The results so far.
#[derive(Default)]
struct Suite {
    total: usize,
    failed: usize,
}

impl Suite {
    fn report(&mut self, name: &str, result: anyhow::Result<()>) {
        self.total += 1;
        match result {
            Ok(()) => println!("PASS {name}"),
            Err(e) => {
                self.failed += 1;
                println!("FAIL {name}: {}", causes(&e).replace('\n', " "));
            }
        }
    }
}

/// A request file: read, and checked to be a render request, so that a mistake in it is not
/// blamed on the plugin. Its bytes are sent as they are.
fn read_request(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("{flag}: reading {}", path.display()))?;
    serde_json::from_slice::<RenderRequest>(&bytes).with_context(|| {
        format!(
            "{flag} {} is not a render request of the contract {CONTRACT}",
            path.display()
        )
    })?;
    Ok(bytes)
}

pub async fn check(global: &GlobalArgs, args: CheckArgs) -> anyhow::Result<()> {
    let roots = read_roots(&args.ca_file).context("--ca-file")?;
    let request = read_request(&args.request, "--request")?;
    let bad_request = args
        .bad_request
        .as_deref()
        .map(|path| read_request(path, "--bad-request"))
        .transpose()?;
    if args.service_account.name == CHECK_ACCOUNT {
        bail!(
            "--service-account {}: {CHECK_ACCOUNT} is the account the check creates as one the plugin must refuse",
            args.service_account
        );
    }
    let mut plugin = Plugin::new(
        &args.url,
        roots,
        Timeouts::starting_now(args.call_timeout, args.timeout),
    )?;
    let client = global.client().await?;
    let tokens = served_tokens(&client, &args.service_account).await?;
    let account = check_account(&client, &args.service_account.namespace).await?;
    let outcome = match account.token().await {
        Ok(other_account) => {
            plugin.start_deadline();
            let inputs = Inputs {
                plugin: &plugin,
                base: &args.url,
                served: &args.service_account,
                tokens: &tokens,
                other_account: &other_account,
                request: &request,
                bad_request: bad_request.as_deref(),
            };
            Ok(inputs.run().await)
        }
        Err(e) => Err(e),
    };
    if let Err(e) = account.remove().await {
        eprintln!("warning: {}", causes(&e));
    }
    let suite = outcome?;
    if suite.failed > 0 {
        bail!("{} of {} checks failed", suite.failed, suite.total);
    }
    Ok(())
}

/// What the checks use.
struct Inputs<'a> {
    plugin: &'a Plugin,
    base: &'a str,
    served: &'a AccountName,
    tokens: &'a Tokens,
    other_account: &'a str,
    request: &'a [u8],
    bad_request: Option<&'a [u8]>,
}

impl Inputs<'_> {
    async fn run(&self) -> Suite {
        let mut suite = Suite::default();
        let served = Some(self.tokens.served.as_str());
        suite.report("identity", self.identity().await);
        suite.report("probe", self.probe().await);
        let rendered = self.render().await;
        let first = rendered.as_ref().ok().cloned();
        suite.report("render", rendered.map(|_| ()));
        suite.report(
            "render is deterministic",
            self.deterministic(first.as_deref()).await,
        );
        suite.report("errors have the contract's shape", self.errors().await);
        suite.report("auth: no token", self.refused(None).await);
        suite.report(
            "auth: another audience",
            self.refused(Some(&self.tokens.other_audience)).await,
        );
        suite.report(
            "auth: another ServiceAccount",
            self.refused(Some(self.other_account)).await,
        );
        suite.report("auth: garbage token", self.garbage().await);
        suite.report("TLS: verified", self.tls(served).await);
        suite
    }

    /// `call` with the served account's token; `render` with the request.
    async fn served_call(&self, call: Call, body: Option<&[u8]>) -> anyhow::Result<Answer> {
        self.plugin
            .call(call, Some(&self.tokens.served), body)
            .await
    }

    /// The answer, `200`, as a `T`.
    fn ok_document<T: DeserializeOwned>(&self, call: Call, answer: &Answer) -> anyhow::Result<T> {
        if answer.status != StatusCode::OK {
            let hint = if answer.status == StatusCode::UNAUTHORIZED {
                format!(
                    " (the token of {}, for the audience {TOKEN_AUDIENCE}, was refused: does the plugin serve --service-account {}?)",
                    self.served.user(),
                    self.served
                )
            } else {
                String::new()
            };
            bail!(
                "{} answered {}, not 200{hint}: {}",
                Plugin::describe(call),
                answer.status,
                answer.excerpt()
            );
        }
        document(call, answer)
    }

    async fn identity(&self) -> anyhow::Result<()> {
        let answer = self.served_call(Call::Identity, None).await?;
        let identity: Identity = self.ok_document(Call::Identity, &answer)?;
        check_identity(&identity)
    }

    async fn probe(&self) -> anyhow::Result<()> {
        let answer = self.served_call(Call::Probe, None).await?;
        let probe: Probe = self.ok_document(Call::Probe, &answer)?;
        if probe.message.chars().count() > 4096 {
            bail!("the probe's message is longer than 4096 characters");
        }
        if !probe.ready {
            if probe.message.is_empty() {
                bail!("the probe answers ready: false without a message saying why");
            }
            eprintln!("note: the plugin is not ready: {}", probe.message);
        }
        Ok(())
    }

    /// The render's body, once it is a valid answer.
    async fn render(&self) -> anyhow::Result<Vec<u8>> {
        let answer = self.served_call(Call::Render, Some(self.request)).await?;
        let response: RenderResponse = self.ok_document(Call::Render, &answer)?;
        check_render(&response)?;
        Ok(answer.body)
    }

    async fn deterministic(&self, first: Option<&[u8]>) -> anyhow::Result<()> {
        let Some(first) = first else {
            bail!("the first render did not succeed: nothing to compare");
        };
        let answer = self.served_call(Call::Render, Some(self.request)).await?;
        if answer.status != StatusCode::OK {
            bail!(
                "the same request answered 200 first, then {}: {}",
                answer.status,
                answer.excerpt()
            );
        }
        if answer.body != first {
            let at = first
                .iter()
                .zip(&answer.body)
                .position(|(a, b)| a != b)
                .unwrap_or(first.len().min(answer.body.len()));
            let from = at.saturating_sub(40);
            bail!(
                "the same request answered different bytes ({} then {} bytes; they differ from byte {at}: {:?} then {:?})",
                first.len(),
                answer.body.len(),
                excerpt(&first[from..first.len().min(at + 80)]),
                excerpt(&answer.body[from..answer.body.len().min(at + 80)]),
            );
        }
        Ok(())
    }

    async fn errors(&self) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        if let Some(bad) = self.bad_request {
            let checked = async {
                let answer = self.served_call(Call::Render, Some(bad)).await?;
                let error = error_document(&answer, &[StatusCode::UNPROCESSABLE_ENTITY])?;
                if error.error.retryable {
                    bail!("the --bad-request's error says retryable: true");
                }
                Ok(())
            };
            if let Err(e) = checked.await {
                problems.push(format!("--bad-request: {}", causes(&e)));
            }
        }
        let checked = async {
            let answer = self.served_call(Call::Render, Some(NOT_JSON)).await?;
            error_document(
                &answer,
                &[StatusCode::UNPROCESSABLE_ENTITY, StatusCode::BAD_REQUEST],
            )
            .map(|_| ())
        };
        if let Err(e) = checked.await {
            problems.push(format!("a body that is not JSON: {}", causes(&e)));
        }
        if !problems.is_empty() {
            bail!("{}", problems.join("; "));
        }
        Ok(())
    }

    /// Every call with `token` (none: no `Authorization` header) is answered `401`.
    async fn refused(&self, token: Option<&str>) -> anyhow::Result<()> {
        let mut accepted = Vec::new();
        for call in Call::ALL {
            let body = (call == Call::Render).then_some(self.request);
            match self.plugin.call(call, token, body).await {
                Ok(answer) if answer.status == StatusCode::UNAUTHORIZED => {}
                Ok(answer) => accepted.push(format!(
                    "{} answered {}, not 401",
                    Plugin::describe(call),
                    answer.status
                )),
                Err(e) => accepted.push(causes(&e)),
            }
        }
        if !accepted.is_empty() {
            bail!("{}", accepted.join("; "));
        }
        Ok(())
    }

    /// A token that is none at all, and the served account's with its signature replaced.
    async fn garbage(&self) -> anyhow::Result<()> {
        let served = &self.tokens.served;
        let forged = match served.rsplit_once('.') {
            Some((signed, signature)) => format!("{signed}.{}", "A".repeat(signature.len())),
            None => format!("{served}garbage"),
        };
        let mut problems = Vec::new();
        for (what, token) in [
            (
                "a token that is no JWT",
                "gantry-plugin-check-garbage-token",
            ),
            (
                "the served account's token with a forged signature",
                forged.as_str(),
            ),
        ] {
            if let Err(e) = self.refused(Some(token)).await {
                problems.push(format!("{what}: {}", causes(&e)));
            }
        }
        if !problems.is_empty() {
            bail!("{}", problems.join("; "));
        }
        Ok(())
    }

    /// The connection made with --ca-file's CA alone is answered; one made with a CA of its
    /// own, unrelated to the plugin, fails on the plugin's certificate.
    async fn tls(&self, served: Option<&str>) -> anyhow::Result<()> {
        self.plugin
            .call(Call::Identity, served, None)
            .await
            .context("the connection verified with --ca-file alone")?;
        let stranger = Plugin::new(self.base, vec![unrelated_ca()?], self.plugin.timeouts())?;
        match stranger.call(Call::Identity, None, None).await {
            Ok(answer) => bail!(
                "a client trusting only an unrelated CA was answered ({}): the connection is not verified",
                answer.status
            ),
            Err(e) => {
                let why = causes(&e);
                if why.to_ascii_lowercase().contains("certificate") {
                    Ok(())
                } else {
                    bail!(
                        "a client trusting only an unrelated CA failed, but not on the certificate: {why}"
                    )
                }
            }
        }
    }
}

/// Whether an answer says it is JSON.
fn is_json(answer: &Answer) -> bool {
    answer
        .content_type
        .as_deref()
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The answer's body as a `T`, the contract's document for `call`: JSON, no unknown field.
fn document<T: DeserializeOwned>(call: Call, answer: &Answer) -> anyhow::Result<T> {
    if !is_json(answer) {
        bail!(
            "{} answered Content-Type {:?}, not application/json",
            Plugin::describe(call),
            answer.content_type.as_deref().unwrap_or_default()
        );
    }
    serde_json::from_slice(&answer.body).map_err(|e| {
        anyhow::anyhow!(
            "{} answered no valid {} document: {e}: {}",
            Plugin::describe(call),
            call.name(),
            answer.excerpt()
        )
    })
}

/// A render's error answer: one of `statuses`, and a valid error document.
fn error_document(answer: &Answer, statuses: &[StatusCode]) -> anyhow::Result<ErrorResponse> {
    let what = Plugin::describe(Call::Render);
    if !statuses.contains(&answer.status) {
        let wanted: Vec<String> = statuses.iter().map(|s| s.as_u16().to_string()).collect();
        bail!(
            "{what} answered {}, not {}: {}",
            answer.status,
            wanted.join(" or "),
            answer.excerpt()
        );
    }
    if !is_json(answer) {
        bail!(
            "{what} answered {} with Content-Type {:?}, not application/json",
            answer.status,
            answer.content_type.as_deref().unwrap_or_default()
        );
    }
    let error: ErrorResponse = serde_json::from_slice(&answer.body).map_err(|e| {
        anyhow::anyhow!(
            "{what} answered {} with no valid error document: {e}: {}",
            answer.status,
            answer.excerpt()
        )
    })?;
    if error.error.message.is_empty() {
        bail!("{what}: the error's message is empty");
    }
    if error.error.message.chars().count() > 32768 {
        bail!("{what}: the error's message is longer than 32768 characters");
    }
    if error.error.line == Some(0) {
        bail!("{what}: the error's line is 0 (lines count from 1)");
    }
    Ok(error)
}

/// `domain/name`, as the schema's pattern for `id` says.
fn valid_id(id: &str) -> bool {
    let Some((domain, name)) = id.split_once('/') else {
        return false;
    };
    let part = |text: &str, edge: fn(char) -> bool, inner: fn(char) -> bool| {
        text.starts_with(edge) && text.ends_with(edge) && text.chars().all(inner)
    };
    id.len() <= 253
        && part(
            domain,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit(),
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.',
        )
        && part(
            name,
            |c| c.is_ascii_alphanumeric(),
            |c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'),
        )
}

/// Semantic versioning, an optional `v` first, as the schema's pattern for `version` says.
fn valid_version(version: &str) -> bool {
    let identifiers = |text: &str| {
        !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    };
    let number = |text: &str| {
        !text.is_empty()
            && text.chars().all(|c| c.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'))
    };
    let rest = version.strip_prefix('v').unwrap_or(version);
    let (rest, build) = match rest.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (rest, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    version.len() <= 128
        && numbers.len() == 3
        && numbers.iter().all(|n| number(n))
        && pre.is_none_or(identifiers)
        && build.is_none_or(identifiers)
}

fn check_identity(identity: &Identity) -> anyhow::Result<()> {
    if identity.contract != CONTRACT {
        bail!("contract is {:?}, not {CONTRACT:?}", identity.contract);
    }
    if !valid_id(&identity.id) {
        bail!(
            "id {:?} is not DOMAIN/NAME (e.g. gantry.dev/helm)",
            identity.id
        );
    }
    if !valid_version(&identity.version) {
        bail!(
            "version {:?} is not a semantic version (e.g. 1.2.3)",
            identity.version
        );
    }
    if identity.media_types.is_empty() || identity.media_types.len() > 32 {
        bail!(
            "mediaTypes names {} media types: from 1 to 32, please",
            identity.media_types.len()
        );
    }
    if let Some(bad) = identity
        .media_types
        .iter()
        .find(|t| t.is_empty() || t.len() > 255)
    {
        bail!("mediaTypes holds {bad:?}: each from 1 to 255 characters");
    }
    if identity.capabilities.len() > 32 {
        bail!("capabilities names more than 32");
    }
    Ok(())
}

/// Each object is a whole Kubernetes object; sources, waves, warnings and notes within the
/// schema's bounds; at least one object.
fn check_render(response: &RenderResponse) -> anyhow::Result<()> {
    if response.objects.is_empty() {
        bail!("the render answered no object");
    }
    for (i, rendered) in response.objects.iter().enumerate() {
        let object = &rendered.object;
        let text = |field: &str| {
            object
                .get(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let name = object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let (Some(_), Some(_), Some(_)) = (text("apiVersion"), text("kind"), name) else {
            bail!("objects[{i}] lacks apiVersion, kind or metadata.name: {object:?}");
        };
        if let Some(source) = &rendered.source {
            if source.file.is_empty() || source.file.len() > 4096 {
                bail!("objects[{i}].source.file is empty or longer than 4096 characters");
            }
            if source.line == Some(0) {
                bail!("objects[{i}].source.line is 0 (lines count from 1)");
            }
        }
        if rendered.wave > 999 {
            bail!("objects[{i}].wave is {}, above 999", rendered.wave);
        }
    }
    if response.warnings.iter().any(|w| w.chars().count() > 4096) {
        bail!("a warning is longer than 4096 characters");
    }
    if response.notes.chars().count() > 65536 {
        bail!("the notes are longer than 65536 characters");
    }
    Ok(())
}

/// So that the defaults are named where the help text says 30s and 5m.
const _: () = assert!(CALL_TIMEOUT.as_secs() == 30 && SUITE_TIMEOUT.as_secs() == 300);

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use gantry_api::plugin::Capability;

    #[test]
    fn ids_are_domain_slash_name() {
        for good in [
            "gantry.dev/helm",
            "example.com/My_Plugin.v2",
            "a/b",
            "x-1.y/Z",
        ] {
            assert!(valid_id(good), "{good}");
        }
        for bad in [
            "helm",
            "Gantry.dev/helm",
            "gantry.dev/",
            "/helm",
            "gantry.dev/helm/x",
            "-gantry.dev/helm",
            "gantry.dev./helm",
            "gantry.dev/helm-",
            "gantry.dev/he lm",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
        assert!(!valid_id(&format!("a/{}", "b".repeat(252))));
    }

    #[test]
    fn versions_are_semantic() {
        for good in [
            "0.1.0",
            "v1.2.3",
            "10.20.30",
            "1.0.0-rc.1",
            "1.0.0-alpha-beta",
            "1.0.0+build.5",
            "1.0.0-rc.1+sha.abc",
        ] {
            assert!(valid_version(good), "{good}");
        }
        for bad in [
            "1.0",
            "1.0.0.0",
            "01.0.0",
            "1.0.0-",
            "1.0.0+",
            "V1.0.0",
            "1.0.0-rc_1",
            "latest",
            "",
            "1.0.0+a+b",
        ] {
            assert!(!valid_version(bad), "{bad}");
        }
    }

    #[test]
    fn identities_are_checked_beyond_their_type() {
        let good = Identity {
            contract: "v1".into(),
            id: "gantry.dev/helm".into(),
            version: "0.1.0".into(),
            media_types: vec!["application/vnd.cncf.helm.config.v1+json".into()],
            capabilities: vec![Capability::Waves],
        };
        check_identity(&good).unwrap();
        let mut bad = good.clone();
        bad.contract = "v2".into();
        assert!(check_identity(&bad).is_err());
        let mut bad = good.clone();
        bad.media_types.clear();
        assert!(check_identity(&bad).is_err());
        let mut bad = good;
        bad.version = "one".into();
        assert!(check_identity(&bad).is_err());
        // Unknown fields are refused by the type itself.
        let with_more =
            r#"{"contract":"v1","id":"a/b","version":"1.0.0","mediaTypes":["x"],"extra":1}"#;
        assert!(serde_json::from_str::<Identity>(with_more).is_err());
    }

    #[test]
    fn rendered_objects_are_whole() {
        let response = |objects: Value| -> RenderResponse {
            serde_json::from_value(serde_json::json!({ "objects": objects })).unwrap()
        };
        check_render(&response(serde_json::json!([
            {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
             "source": {"file": "templates/a.yaml", "line": 1}, "wave": 2}
        ])))
        .unwrap();
        assert!(check_render(&response(serde_json::json!([]))).is_err());
        for object in [
            serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "", "metadata": {"name": "a"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
        ] {
            let error = check_render(&response(serde_json::json!([{ "object": object }])));
            assert!(error.is_err(), "{object}");
        }
        assert!(
            check_render(&response(serde_json::json!([
                {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
                 "wave": 1000}
            ])))
            .is_err()
        );
    }

    #[test]
    fn urls_are_https_bases() {
        assert_eq!(
            parse_url("https://127.0.0.1:8443/").unwrap(),
            "https://127.0.0.1:8443"
        );
        assert_eq!(
            parse_url("https://plugin.example/prefix/").unwrap(),
            "https://plugin.example/prefix"
        );
        assert!(parse_url("http://127.0.0.1:8443").is_err());
        assert!(parse_url("https://127.0.0.1:8443/?a=b").is_err());
        assert!(parse_url("127.0.0.1:8443").is_err());
    }

    #[test]
    fn errors_must_have_the_contract_s_shape() {
        let answer = |status: u16, content_type: &str, body: &str| Answer {
            status: StatusCode::from_u16(status).unwrap(),
            content_type: Some(content_type.into()),
            body: body.as_bytes().to_vec(),
        };
        let unprocessable = [StatusCode::UNPROCESSABLE_ENTITY];
        let good = r#"{"error":{"message":"parse error","file":"templates/a.yaml","line":3,"retryable":false}}"#;
        error_document(
            &answer(422, "application/json; charset=utf-8", good),
            &unprocessable,
        )
        .unwrap();
        for (status, content_type, body) in [
            (500, "application/json", good),
            (422, "text/plain", good),
            (422, "application/json", r#"{"message":"x"}"#),
            (
                422,
                "application/json",
                r#"{"error":{"message":"","retryable":false}}"#,
            ),
            (
                422,
                "application/json",
                r#"{"error":{"message":"m","line":0,"retryable":false}}"#,
            ),
            (422, "application/json", r#"{"error":{"message":"m"}}"#),
        ] {
            assert!(
                error_document(&answer(status, content_type, body), &unprocessable).is_err(),
                "{status} {content_type} {body}"
            );
        }
    }

    /// The command line as the brief of the suite names it.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: CheckArgs,
    }

    #[test]
    fn the_flags_parse() {
        let cli = Cli::try_parse_from([
            "check",
            "https://localhost:8443",
            "--ca-file",
            "ca.crt",
            "--request",
            "r.json",
        ])
        .unwrap();
        assert_eq!(cli.args.url, "https://localhost:8443");
        assert_eq!(
            cli.args.service_account.to_string(),
            "gantry-system/gantry-provisioner"
        );
        assert!(cli.args.bad_request.is_none());
        assert_eq!(
            (cli.args.call_timeout, cli.args.timeout),
            (CALL_TIMEOUT, SUITE_TIMEOUT)
        );
        let cli = Cli::try_parse_from([
            "check",
            "https://localhost:8443",
            "--ca-file",
            "ca.crt",
            "--request",
            "r.json",
            "--call-timeout",
            "1.5s",
            "--timeout",
            "1m30s",
        ])
        .unwrap();
        assert_eq!(
            (cli.args.call_timeout, cli.args.timeout),
            (Duration::from_millis(1500), Duration::from_secs(90))
        );
        for bad in ["0s", "-1s", "soon"] {
            assert!(
                Cli::try_parse_from([
                    "check",
                    "https://localhost:8443",
                    "--ca-file",
                    "c",
                    "--request",
                    "r",
                    "--timeout",
                    bad
                ])
                .is_err(),
                "{bad}"
            );
        }
        // The CA and the request are required.
        assert!(
            Cli::try_parse_from(["check", "https://localhost:8443", "--request", "r"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["check", "https://localhost:8443", "--ca-file", "c"]).is_err()
        );
        assert!(
            Cli::try_parse_from([
                "check",
                "https://localhost:8443",
                "--ca-file",
                "c",
                "--request",
                "r",
                "--service-account",
                "nope"
            ])
            .is_err()
        );
    }
}
