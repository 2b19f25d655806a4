#!/usr/bin/env python3
"""Times Gantry's pull against skopeo copy + tar for each image; see run.sh."""

import os
import shutil
import statistics
import subprocess
import sys
import time


def measure(argv, **kwargs):
    """Wall time, CPU time (user + system, children included) and peak RSS (KiB) of one
    command, which must succeed."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = process.stderr.read().decode()
    process.stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"{argv} failed: {stderr}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


# skopeo copies the platform image to a directory, then tar extracts its layers in order
# (the first digest in manifest.json is the config's).
BASELINE = r"""
set -e
mkdir -p "$2"
skopeo copy --quiet --src-tls-verify=false "docker://$1" "dir:$2/img"
mkdir -p "$2/root"
for digest in $(grep -o 'sha256:[0-9a-f]\{64\}' "$2/img/manifest.json" | tail -n +2); do
  tar -xzf "$2/img/${digest#sha256:}" -C "$2/root"
done
"""


def listing(directory):
    return sorted((entry.name, entry.stat().st_size) for entry in os.scandir(directory))


def main():
    plugin, host, work, runs, names = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    print(f"{'bundle':<10}{'gantry (s)':>12}{'skopeo+tar (s)':>16}{'ratio':>8}{'gantry peak RSS':>18}"
          f"{'CPU gantry (s)':>16}{'CPU skopeo+tar (s)':>20}")
    for name in names:
        image = f"{host}/bench/{name}:v1"
        gantry, baseline, rss, gantry_cpu, baseline_cpu = [], [], [], [], []
        for run in range(runs):
            ours = os.path.join(work, f"{name}-gantry-{run}")
            elapsed, cpu, peak = measure([plugin, "pull", image, "--dir", ours, "--plain-http"])
            gantry.append(elapsed)
            gantry_cpu.append(cpu)
            rss.append(peak)
            theirs = os.path.join(work, f"{name}-skopeo-{run}")
            elapsed, cpu, _ = measure(["bash", "-c", BASELINE, "baseline", image, theirs])
            baseline.append(elapsed)
            baseline_cpu.append(cpu)
            if run == 0:
                # Both produced the same manifests/.
                a = listing(os.path.join(ours, "manifests"))
                b = listing(os.path.join(theirs, "root", "manifests"))
                if a != b:
                    sys.exit(f"{name}: gantry and skopeo+tar disagree on manifests/")
            shutil.rmtree(ours)
            shutil.rmtree(theirs)
        g, b = statistics.median(gantry), statistics.median(baseline)
        print(f"{name:<10}{g:>12.3f}{b:>16.3f}{g / b:>8.2f}{max(rss) / 1024:>15.1f} MiB"
              f"{statistics.median(gantry_cpu):>16.3f}{statistics.median(baseline_cpu):>20.3f}")
    print(f"(medians of {runs} runs each, alternating; ratio = gantry / skopeo+tar wall time, lower is"
          " faster; CPU times tell how much a busy machine stretches each side)")


if __name__ == "__main__":
    main()
