"""Generates two real-world-shaped bundles with large CRDs.

  python3 gen.py DIR RUN_ID          # MEMORY_SCALE=0.05 makes every CRD that much smaller

DIR/operator/manifests: a monitoring operator's CRD set (like prometheus-operator's, about
4 MB): five CRDs of 0.5 to 1.2 MB, each with two versions of a deep openAPIV3Schema whose
fields carry long descriptions, plus the operator's Deployment and RBAC.
DIR/gitops/manifests: a 60-object install (like Argo CD's, about 2 MB): three large CRDs and
57 Deployments, Services, ConfigMaps, Secrets, ServiceAccounts, Roles and RoleBindings.
"""
import json
import os
import random
import sys

out, run_id = sys.argv[1], sys.argv[2]
# The CRDs' sizes are multiplied by this (bench/smoke runs the benchmark at 0.02).
SCALE = float(os.environ.get("MEMORY_SCALE", "1"))
rng = random.Random(14)
WORDS = ("the of a to is field when this which must be set selector label value pod "
         "container resource name namespace secret key defaults if not specified reference "
         "object list spec status endpoint scrape interval timeout relabel rule tls config "
         "authorization bearer token file path port scheme honor labels limit sample target").split()


def sentence(n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def schema(budget, depth=0):
    """An object schema of about `budget` bytes of JSON."""
    props = {}
    size = 0
    i = 0
    while size < budget:
        name = f"{rng.choice(WORDS)}{rng.choice(WORDS).capitalize()}{i}"
        i += 1
        kind = rng.random()
        if depth < 5 and kind < 0.25 and budget - size > 3000:
            child = schema(min(budget - size, rng.randint(2000, 40000)), depth + 1)
            prop = {"description": sentence(rng.randint(10, 60)), "type": "object",
                    "properties": child}
        elif depth < 5 and kind < 0.35 and budget - size > 3000:
            prop = {"description": sentence(rng.randint(10, 40)), "type": "array",
                    "items": {"type": "object",
                              "properties": schema(min(budget - size, rng.randint(1500, 20000)), depth + 1)}}
        elif kind < 0.6:
            prop = {"description": sentence(rng.randint(8, 50)), "type": "string"}
        elif kind < 0.75:
            prop = {"description": sentence(rng.randint(8, 30)), "type": "integer", "format": "int32"}
        elif kind < 0.85:
            prop = {"description": sentence(rng.randint(8, 30)), "type": "boolean"}
        else:
            prop = {"description": sentence(rng.randint(8, 30)), "type": "string",
                    "enum": [rng.choice(WORDS) + str(k) for k in range(rng.randint(2, 6))]}
        props[name] = prop
        size += len(json.dumps(prop)) + len(name) + 4
    return props


def crd(group, kind, size):
    plural = kind.lower() + "s"
    half = size // 2
    versions = []
    for version, storage in (("v1", True), ("v1beta1", False)):
        versions.append({
            "name": version, "served": True, "storage": storage,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "description": sentence(40), "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "description": sentence(30),
                             "properties": schema(int(half * 0.8))},
                    "status": {"type": "object", "description": sentence(30),
                               "properties": schema(int(half * 0.2))},
                },
            }},
        })
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                               "listKind": kind + "List"},
                     "versions": versions}}


def deployment(ns, name, image):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"serviceAccountName": name, "containers": [{
                                      "name": name, "image": image,
                                      "args": [f"--{w}={rng.randint(1, 999)}" for w in WORDS[:12]],
                                      "env": [{"name": f"ENV_{k}", "value": sentence(6)} for k in range(12)],
                                      "ports": [{"containerPort": 8080 + k} for k in range(3)],
                                      "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}


def rbac(ns, name):
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": ns},
         "rules": [{"apiGroups": ["*"], "resources": ["configmaps", "secrets", "pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
    ]


def write(bundle, objects):
    d = os.path.join(out, bundle, "manifests")
    os.makedirs(d, exist_ok=True)
    # JSON is YAML: one file per object keeps each file under the per-file limit.
    for i, obj in enumerate(objects):
        with open(os.path.join(d, f"{i:03d}-{obj['kind'].lower()}.yaml"), "w") as f:
            json.dump(obj, f, separators=(",", ":"))
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{bundle}: {len(objects)} objects, {total / 1e6:.1f} MB")


ns = f"monitoring-{run_id}"
group = f"monitoring{run_id}.bench.test"
operator = [crd(group, kind, int(size * SCALE)) for kind, size in (
    ("Prometheus", 1_200_000), ("Alertmanager", 1_000_000), ("ThanosRuler", 800_000),
    ("PrometheusAgent", 600_000), ("ScrapeConfig", 500_000))]
operator.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
operator += rbac(ns, "operator")
operator.append(deployment(ns, "operator", "registry.example/operator:v1"))
write("operator", operator)

ns = f"gitops-{run_id}"
group = f"gitops{run_id}.bench.test"
gitops = [crd(group, kind, int(size * SCALE)) for kind, size in (
    ("Application", 850_000), ("ApplicationSet", 700_000), ("AppProject", 350_000))]
gitops.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
for component in ("server", "repo-server", "controller", "dex", "redis", "notifications", "applicationset"):
    gitops += rbac(ns, component)
    gitops.append(deployment(ns, component, f"registry.example/gitops-{component}:v2"))
    gitops.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": component, "namespace": ns},
                   "spec": {"selector": {"app": component}, "ports": [{"port": 80 + k, "targetPort": 8080 + k, "name": f"p{k}"} for k in range(3)]}})
for k in range(15):
    gitops.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"config-{k}", "namespace": ns},
                   "data": {f"key{j}": sentence(40) for j in range(20)}})
for k in range(6):
    gitops.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"secret-{k}", "namespace": ns},
                   "stringData": {f"key{j}": sentence(10) for j in range(5)}})
write("gitops", gitops)
