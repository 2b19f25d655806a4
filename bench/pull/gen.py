#!/usr/bin/env python3
"""Writes an OCI image layout holding a plain+v0 bundle of generated Kubernetes YAML.

usage: gen.py OUT_DIR TOTAL_BYTES LAYERS PLATFORM [PLATFORM...]

The YAML spreads over LAYERS gzip layers (files `manifests/l<N>-<M>.yaml`); one image manifest
per PLATFORM shares those layers, and an image index lists them when more than one platform is
named. The content is deterministic (a fixed seed), with the mix of a real bundle: CRDs with
deep schemas, Deployments, Services, and ConfigMaps carrying configuration files.
"""

import gzip
import hashlib
import io
import json
import os
import random
import sys
import tarfile

rng = random.Random(42)
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron "
         "pi rho sigma tau upsilon phi chi psi omega cluster node pod volume secret config "
         "replica service ingress route gateway policy quota limit request").split()


def words(n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def crd(i):
    def props(depth):
        if depth == 0:
            return "".join(
                f"{' ' * 14}f{k}:\n{' ' * 16}type: string\n{' ' * 16}description: {words(8)}\n"
                for k in range(6))
        return "".join(
            f"{' ' * 14}n{k}d{depth}:\n{' ' * 16}type: object\n{' ' * 16}description: {words(10)}\n"
            for k in range(4)) + props(depth - 1)
    schema = props(4)
    return (f"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
            f"metadata:\n  name: widgets{i}.bench.gantry.dev\nspec:\n  group: bench.gantry.dev\n"
            f"  names:\n    kind: Widget{i}\n    plural: widgets{i}\n  scope: Namespaced\n"
            f"  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n"
            f"      openAPIV3Schema:\n        type: object\n        properties:\n"
            f"          spec:\n            type: object\n            properties:\n{schema}")


def deployment(i):
    env = "".join(f"        - name: VAR_{k}\n          value: \"{words(3)}\"\n" for k in range(20))
    return (f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n"
            f"  namespace: bench\n  labels:\n    app: app-{i}\nspec:\n  replicas: 2\n"
            f"  selector:\n    matchLabels:\n      app: app-{i}\n  template:\n    metadata:\n"
            f"      labels:\n        app: app-{i}\n    spec:\n      containers:\n"
            f"      - name: main\n        image: registry.example/app:{i}\n"
            f"        args: [\"--port=8080\", \"--verbose\"]\n        env:\n{env}"
            f"        resources:\n          limits: {{cpu: 500m, memory: 256Mi}}\n")


def service(i):
    return (f"apiVersion: v1\nkind: Service\nmetadata:\n  name: app-{i}\n  namespace: bench\n"
            f"spec:\n  selector:\n    app: app-{i}\n  ports:\n  - port: 80\n    targetPort: 8080\n")


def configmap(i, size):
    lines = []
    total = 0
    while total < size:
        line = f"    {words(12)}\n"
        lines.append(line)
        total += len(line)
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i}\n"
            f"  namespace: bench\ndata:\n  app.conf: |\n{''.join(lines)}")


def document(i, total):
    kind = i % 4
    if kind == 0:
        return crd(i)
    if kind == 1:
        return deployment(i)
    if kind == 2:
        return service(i)
    # Large bundles are mostly big ConfigMaps; small ones hold small objects.
    if total >= 10_000_000:
        return configmap(i, rng.randint(50_000, 150_000))
    return configmap(i, rng.randint(500, 3_000))


def main():
    out, total, layers, platforms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)

    def blob(data):
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
            f.write(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    per_layer = total // layers
    file_target = min(1 << 20, max(per_layer // 4, 4096))
    n = 0
    layer_descs, diff_ids = [], []
    for layer in range(layers):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if layer == 0:
                info = tarfile.TarInfo("manifests")
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            written, index = 0, 0
            while written < per_layer:
                docs, size = [], 0
                while size < file_target and written + size < per_layer:
                    doc = document(n, total)
                    n += 1
                    docs.append(doc)
                    size += len(doc)
                data = "---\n".join(docs).encode()
                info = tarfile.TarInfo(f"manifests/l{layer}-{index:04d}.yaml")
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
                written += len(data)
                index += 1
        tar_bytes = raw.getvalue()
        diff_ids.append("sha256:" + hashlib.sha256(tar_bytes).hexdigest())
        compressed = gzip.compress(tar_bytes, compresslevel=6, mtime=0)
        desc = blob(compressed)
        desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
        layer_descs.append(desc)

    manifests = []
    for platform in platforms:
        parts = platform.split("/")
        config = {"os": parts[0], "architecture": parts[1],
                  "rootfs": {"type": "layers", "diff_ids": diff_ids},
                  "config": {"Labels": {"operators.operatorframework.io.bundle.mediatype.v1": "plain+v0"}}}
        if len(parts) > 2:
            config["variant"] = parts[2]
        config_desc = blob(json.dumps(config).encode())
        config_desc["mediaType"] = "application/vnd.oci.image.config.v1+json"
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_desc, "layers": layer_descs}
        desc = blob(json.dumps(manifest).encode())
        desc["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
        desc["platform"] = {k: v for k, v in zip(("os", "architecture", "variant"), parts)}
        manifests.append(desc)

    if len(manifests) == 1:
        top = manifests[0]
    else:
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                 "manifests": manifests}
        top = blob(json.dumps(index).encode())
        top["mediaType"] = "application/vnd.oci.image.index.v1+json"
    top = dict(top)
    top.pop("platform", None)
    top["annotations"] = {"org.opencontainers.image.ref.name": "bench"}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [top]}, f)
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(f"{n} objects, {layers} layers, {total} bytes of YAML", file=sys.stderr)


if __name__ == "__main__":
    main()
