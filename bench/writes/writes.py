"""Creates the Bundles and ConfigMaps of bench/writes/run.sh, then times label patches of each.

Arguments: API server URL, directory with the client certificate files, kube-apiserver's PID,
objects of each kind, ConfigMaps a bundle lists, writes at once, rounds.
"""

import concurrent.futures
import http.client
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse

server, certs, apiserver_pid, count, objects, concurrency, rounds = sys.argv[1:8]
count, objects, concurrency, rounds = int(count), int(objects), int(concurrency), int(rounds)
address = urllib.parse.urlparse(server)
context = ssl.create_default_context(cafile=os.path.join(certs, "ca"))
context.load_cert_chain(
    os.path.join(certs, "client-certificate-data"), os.path.join(certs, "client-key-data")
)
local = threading.local()
BUNDLES = "/apis/gantry.dev/v1alpha1/bundles"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def request(method, path, body=None, content_type="application/json"):
    connection = getattr(local, "connection", None)
    if connection is None:
        connection = local.connection = http.client.HTTPSConnection(
            address.hostname, address.port, context=context
        )
    payload = None if body is None else json.dumps(body)
    connection.request(method, path, payload, {"Content-Type": content_type})
    response = connection.getresponse()
    data = response.read()
    if response.status >= 300:
        raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
    return data


def at_once(work):
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(work, range(count)))


def cpu_seconds():
    with open(f"/proc/{apiserver_pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# What Gantry writes for an installed bundle of `objects` ConfigMaps (as in bench/scale).
image = "127.0.0.1:5000/bench/scale@sha256:" + "3a" * 32
message = f"{objects} objects of {image} installed"
condition = lambda type_, reason, text: {
    "type": type_, "status": "True", "reason": reason, "message": text,
    "observedGeneration": 1, "lastTransitionTime": "2026-11-28T00:00:00Z",
}


def status(name):
    return {
        "observedGeneration": 1,
        "phase": "Installed",
        "className": "bench-writes-elsewhere",
        "message": f"{objects} objects of scale@sha256:3a3a3a3a3a3a installed",
        "resolvedImage": image,
        "installedImage": image,
        "manifestDigest": "sha256:" + "3a" * 32,
        "contentDigest": "sha256:" + "6e" * 32,
        "contentURL": f"http://127.0.0.1:5001/bundles/{name}/{'6e' * 32}.tar.gz",
        "platform": "linux/amd64",
        "conditions": [
            condition("Unpacked", "UnpackSucceeded", f"{objects} objects from {image}"),
            condition("Approved", "AutomaticApproval", "ProvisionerClass plain approves every digest"),
            condition("Installed", "InstallSucceeded", message),
            condition("Healthy", "Healthy", f"{objects} objects healthy"),
            condition("Ready", "InstallSucceeded", message),
        ],
        "inventory": [
            {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": name, "name": f"config-{i}"}
            for i in range(objects)
        ],
        "history": [{"image": image, "digest": "sha256:" + "3a" * 32, "approval": "Automatic",
                     "installedAt": "2026-11-28T00:00:00Z"}],
        "objectHealth": {"healthy": objects, "progressing": 0, "failed": 0},
    }


def create_bundle(i):
    name = f"writes-{i}"
    request("POST", BUNDLES, {
        "apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle", "metadata": {"name": name},
        "spec": {"image": "127.0.0.1:5000/bench/scale:v1", "installNamespace": name,
                 "provisionerClassName": "bench-writes-elsewhere"},
    })
    request("PATCH", f"{BUNDLES}/{name}/status", {"status": status(name)},
            "application/merge-patch+json")


def create_configmap(i):
    name = f"writes-{i}"
    request("POST", CONFIGMAPS, {"metadata": {"name": name},
                                 "data": {"status": json.dumps(status(name))}})


at_once(create_bundle)
at_once(create_configmap)
# Each kind's size as the API server serves it (managedFields included).
sizes = {"Bundle": len(request("GET", f"{BUNDLES}/writes-0")),
         "ConfigMap": len(request("GET", f"{CONFIGMAPS}/writes-0"))}

results = {"Bundle": [], "ConfigMap": []}
for round_ in range(1, rounds + 1):
    for kind, path in (("Bundle", BUNDLES), ("ConfigMap", CONFIGMAPS)):
        label = {"metadata": {"labels": {"bench.gantry.dev/round": str(round_)}}}
        cpu, started = cpu_seconds(), time.monotonic()
        at_once(lambda i: request("PATCH", f"{path}/writes-{i}", label,
                                  "application/merge-patch+json"))
        elapsed, cpu = time.monotonic() - started, cpu_seconds() - cpu
        rate, cost = count / elapsed, cpu / count * 1000
        results[kind].append((rate, cost))
        print(f"round {round_}  {kind:<9} (~{sizes[kind] / 1024:.1f} KiB)  {rate:7.0f} writes/s"
              f"  kube-apiserver CPU {cost:5.2f} ms a write", flush=True)

median = lambda values: sorted(values)[len(values) // 2]
bundle_rate = median([r for r, _ in results["Bundle"]])
configmap_rate = median([r for r, _ in results["ConfigMap"]])
bundle_cost = median([c for _, c in results["Bundle"]])
configmap_cost = median([c for _, c in results["ConfigMap"]])
print(f"median: Bundle {bundle_rate:.0f} writes/s, {bundle_cost:.2f} ms CPU each; "
      f"ConfigMap {configmap_rate:.0f} writes/s, {configmap_cost:.2f} ms CPU each")
print(f"a Bundle write costs kube-apiserver {bundle_cost / configmap_cost:.1f}x a ConfigMap write "
      f"of the same bytes ({configmap_rate / bundle_rate:.1f}x fewer a second)")
