//! Authentication (TokenReview) and authorisation (SubjectAccessReview on the
//! non-resource URL) against the real kube-apiserver of the test harness, with
//! real RBAC and real ServiceAccount tokens.

mod common;

use std::time::Duration;

use common::*;
use gantry_tests::{control_plane, unique_name, wait_until};
use http::{Method, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

/// Binds ServiceAccount `namespace/account` to a new ClusterRole granting `verbs` on `/bundles/*`.
async fn grant(client: &kube::Client, namespace: &str, account: &str, verbs: &[&str]) {
    let name = unique_name(&format!("storage-{account}"));
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            non_resource_urls: Some(vec!["/bundles/*".into()]),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap_or_else(|e| panic!("creating ClusterRole {name}: {e}"));
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account.into(),
            namespace: Some(namespace.into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap_or_else(|e| panic!("creating ClusterRoleBinding {name}: {e}"));
    // RBAC reaches the authorizer through an informer: wait until it answers yes, so that
    // the storage server never caches a decision made before the binding was seen.
    for verb in verbs {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!("system:serviceaccount:{namespace}:{account}")),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".into(),
                ]),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/bundles/x".into()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviews = Api::<SubjectAccessReview>::all(client.clone());
        wait_until(
            &format!("RBAC to allow {account} to {verb} /bundles/*"),
            Duration::from_secs(30),
            || {
                let (reviews, review) = (reviews.clone(), review.clone());
                async move {
                    let r = reviews.create(&PostParams::default(), &review).await.ok()?;
                    r.status.filter(|s| s.allowed).map(|_| ())
                }
            },
        )
        .await;
    }
}

async fn call(
    server: &Server,
    method: Method,
    path: &str,
    token: Option<&str>,
    data: &[u8],
) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    server.request(method, path, &headers, full(data)).await
}

#[tokio::test]
async fn tokens_and_rbac_decide_access() {
    let cp = control_plane();
    let admin = cp.client().await;
    let ns = unique_name("storage-auth");
    let reader = cp.service_account_token(&ns, "reader").await;
    let writer = cp.service_account_token(&ns, "writer").await;
    let deleter = cp.service_account_token(&ns, "deleter").await;
    let nobody = cp.service_account_token(&ns, "nobody").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    grant(&admin, &ns, "writer", &["get", "put"]).await;
    grant(&admin, &ns, "deleter", &["delete"]).await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig().to_str().unwrap().to_owned();
    let server = Server::start_with(dir.path(), &["--kubeconfig", &kubeconfig]);
    server.wait_ready().await;
    // Health endpoints stay open for probes.
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);

    let data = content(4096, 40);
    let path = tarball_path("secured", &data);

    // Write: only with `put`.
    let r = call(&server, Method::PUT, &path, Some(&reader), &data).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    assert!(
        r.text()
            .contains(&format!("system:serviceaccount:{ns}:reader")),
        "{}",
        r.text()
    );
    let r = call(&server, Method::PUT, &path, Some(&writer), &data).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());

    // Read: GET, HEAD and the listing need `get`.
    for _ in 0..2 {
        let r = call(&server, Method::GET, &path, Some(&reader), &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(&r.body[..], &data[..]);
    }
    let r = call(&server, Method::HEAD, &path, Some(&reader), &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = call(&server, Method::GET, "/bundles/secured", Some(&reader), &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["tarballs"][0]["digest"], sha256_hex(&data));

    // No token, a malformed one, a forged one: 401.
    let r = call(&server, Method::GET, &path, None, &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = call(&server, Method::GET, &path, Some("not-a-token"), &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let mut forged = reader.clone().into_bytes();
    let last = forged.len() - 5;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let r = call(&server, Method::GET, &path, Some(&forged), &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    let r = server
        .request(
            Method::GET,
            &path,
            &[("authorization", "Basic YWRtaW46YWRtaW4=")],
            empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // A valid token without any permission: 403, for reading and writing, also once the
    // decision is cached and the content is held in memory.
    for _ in 0..2 {
        let r = call(&server, Method::GET, &path, Some(&nobody), &[]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(r.body.is_empty() || !r.body.starts_with(&data[..16]));
    }
    let r = call(&server, Method::PUT, &path, Some(&nobody), &data).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Delete: only with `delete`; `get` and `put` do not imply it.
    for token in [&reader, &writer] {
        let r = call(&server, Method::DELETE, &path, Some(token), &[]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    let r = call(&server, Method::DELETE, &path, Some(&deleter), &[]).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text());
    // The deleter cannot read, and the reader sees the tarball gone.
    let r = call(&server, Method::GET, &path, Some(&deleter), &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = call(&server, Method::GET, &path, Some(&reader), &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Decisions are counted, and repeated ones come from the cache.
    let cached_allowed = server
        .metric("gantry_storage_auth_decisions_total{decision=\"allowed\",cached=\"true\"}")
        .await;
    assert!(cached_allowed.unwrap_or(0.0) >= 1.0, "{cached_allowed:?}");
    for decision in ["forbidden", "unauthenticated"] {
        let n = server
            .metric(&format!(
                "gantry_storage_auth_decisions_total{{decision=\"{decision}\",cached=\"false\"}}"
            ))
            .await;
        assert!(n.unwrap_or(0.0) >= 1.0, "{decision}: {n:?}");
    }
}

#[tokio::test]
async fn token_audience_is_enforced() {
    let cp = control_plane();
    let admin = cp.client().await;
    let ns = unique_name("storage-aud");
    // Creates the ServiceAccount; its token carries the API server's own audience.
    let default_audience = cp.service_account_token(&ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec!["gantry-storage".into()],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let for_storage = Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create_token_request("reader", &PostParams::default(), &request)
        .await
        .expect("TokenRequest with audience gantry-storage")
        .status
        .expect("TokenRequest status")
        .token;

    let dir = tempfile::tempdir().unwrap();
    let data = content(100, 41);
    std::fs::create_dir_all(dir.path().join("aud")).unwrap();
    std::fs::write(
        dir.path()
            .join("aud")
            .join(format!("{}.tar.gz", sha256_hex(&data))),
        &data,
    )
    .unwrap();
    let kubeconfig = cp.kubeconfig().to_str().unwrap().to_owned();
    let server = Server::start_with(
        dir.path(),
        &[
            "--kubeconfig",
            &kubeconfig,
            "--token-audience",
            "gantry-storage",
        ],
    );
    server.wait_ready().await;
    let path = tarball_path("aud", &data);
    let r = call(&server, Method::GET, &path, Some(&for_storage), &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(&r.body[..], &data[..]);
    let r = call(&server, Method::GET, &path, Some(&default_audience), &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
}
