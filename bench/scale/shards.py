"""Reports on a failover or a rebalance of bundles across shards, from the API server's audit
log (which records every write of a Bundle with the Bundle it left, at the time the write was
done: a client's watch of thousands of Bundles would add its own delay).

  shards.py failover AUDIT_LOG BEFORE KILLED KILLED_AT
      BEFORE: `NAME SHARD` lines, the assignment before the kill. For each bundle of the
      KILLED shard, the time from KILLED_AT until a write left it with another shard's label.
  shards.py rebalance AUDIT_LOG BEFORE ADDED ADDED_AT
      How many bundles changed shard after ADDED_AT, how many went to ADDED, and when the
      last label write was (the ring settled).
"""
import datetime
import glob
import json
import os
import sys

SHARD, DRAIN = "gantry.dev/shard", "gantry.dev/drain"


def audit_lines(path):
    """The lines of the audit log at `path` and of the files it was rotated to before
    (`audit-TIME.log` beside it, 100 MB each), oldest first."""
    stem, ext = os.path.splitext(path)
    for rotated in sorted(glob.glob(f"{stem}-*{ext}")) + [path]:
        yield from open(rotated)


def label_writes(path, since):
    """(seconds since the epoch, bundle, shard label, drain label) of each successful write of
    a Bundle's metadata done at or after `since`, in order."""
    writes = []
    for line in audit_lines(path):
        event = json.loads(line)
        ref = event.get("objectRef", {})
        if ref.get("resource") != "bundles" or ref.get("subresource") or event.get("verb") != "patch":
            continue
        if event.get("responseStatus", {}).get("code") != 200:
            continue
        done = datetime.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        if done < since:
            continue
        labels = (event.get("responseObject") or {}).get("metadata", {}).get("labels") or {}
        writes.append((done, ref["name"], labels.get(SHARD), labels.get(DRAIN)))
    writes.sort()
    return writes


def read_before(path):
    return dict(line.split()[:2] for line in open(path) if len(line.split()) >= 2)


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def failover(writes, before, killed, killed_at):
    owned = [name for name, shard in before.items() if shard == killed]
    taken = {}
    for done, name, shard, _ in writes:
        if name not in taken and before.get(name) == killed and shard not in (killed, None):
            taken[name] = done - killed_at
    waits = list(taken.values())
    print(f"  bundles of the killed shard            {len(owned)}")
    print(f"  owned again by another shard           {len(taken)}")
    if waits:
        print(f"  time to a new owner (min/p50/p99/max)  {min(waits):.1f} / "
              f"{percentile(waits, 0.5):.1f} / {percentile(waits, 0.99):.1f} / {max(waits):.1f} s"
              " (target p99 15 s)")
    return 0 if len(taken) == len(owned) else 1


def rebalance(writes, before, added, added_at):
    last = {name: (shard, None) for name, shard in before.items()}
    changed_at = None
    for done, name, shard, drain in writes:
        if last.get(name) != (shard, drain):
            changed_at = done
        last[name] = (shard, drain)
    moved = sum(1 for name, (shard, _) in last.items() if shard != before.get(name))
    to_added = sum(1 for shard, _ in last.values() if shard == added)
    shards = len(set(before.values()) - {"<none>"}) + 1
    print(f"  bundles moved                          {moved} of {len(before)} "
          f"(1/{shards} of them: {len(before) // shards}); {to_added} to the new shard")
    if changed_at is not None:
        print(f"  the last label write after the start   {changed_at - added_at:.1f} s (target 30 s)")
    return 0


def main():
    mode, audit_log, before, shard, at = sys.argv[1:6]
    before, at = read_before(before), float(at)
    writes = label_writes(audit_log, at)
    sys.exit(failover(writes, before, shard, at) if mode == "failover" else rebalance(writes, before, shard, at))


if __name__ == "__main__":
    main()
