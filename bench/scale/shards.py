"""Reads a stream of Bundle label changes and reports on a failover or a rebalance.

Input, one line per event: `SECONDS NAME SHARD DRAIN` (epoch seconds with a fraction, as
stamped when the line arrived; `<none>` for an absent label), from a watch of the Bundles.

  shards.py failover EVENTS BEFORE KILLED KILLED_AT
      BEFORE: `NAME SHARD` lines, the assignment before the kill. For each bundle of the
      KILLED shard, the time from KILLED_AT until it first carried another shard's label.
  shards.py rebalance EVENTS BEFORE ADDED ADDED_AT
      How many bundles changed shard after ADDED_AT, how many went to ADDED, and when the
      last label change was (the ring settled).
"""
import sys


def read_events(path):
    events = []
    for line in open(path):
        fields = line.split()
        if len(fields) >= 3:
            stamp, name, shard = float(fields[0]), fields[1], fields[2]
            drain = fields[3] if len(fields) > 3 else "<none>"
            events.append((stamp, name, shard, drain))
    return events


def read_before(path):
    return dict(line.split()[:2] for line in open(path) if len(line.split()) >= 2)


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def failover(events, before, killed, killed_at):
    owned = [name for name, shard in before.items() if shard == killed]
    taken = {}
    for stamp, name, shard, _ in events:
        if stamp >= killed_at and name not in taken and before.get(name) == killed:
            if shard not in (killed, "<none>"):
                taken[name] = stamp - killed_at
    waits = list(taken.values())
    print(f"  bundles of the killed shard            {len(owned)}")
    print(f"  owned again by another shard           {len(taken)}")
    if waits:
        print(f"  time to a new owner (p50/p99/max)      "
              f"{percentile(waits, 0.5):.1f} / {percentile(waits, 0.99):.1f} / {max(waits):.1f} s"
              " (target p99 15 s)")
    return 0 if len(taken) == len(owned) else 1


def rebalance(events, before, added, added_at):
    last = {}
    changed_at = None
    for stamp, name, shard, drain in events:
        if stamp < added_at:
            continue
        previous = last.get(name, (before.get(name, "<none>"), "<none>"))
        if (shard, drain) != previous:
            changed_at = stamp
        last[name] = (shard, drain)
    moved = sum(1 for name, (shard, _) in last.items() if shard != before.get(name))
    to_added = sum(1 for name, (shard, _) in last.items() if shard == added)
    shards = len(set(before.values()) - {"<none>"}) + 1
    print(f"  bundles moved                          {moved} of {len(before)} "
          f"(1/{shards} of them: {len(before) // shards}); {to_added} to the new shard")
    if changed_at is not None:
        print(f"  the last label change after the start  {changed_at - added_at:.1f} s (target 30 s)")
    return 0


def main():
    mode, events, before, shard, at = sys.argv[1:6]
    events, before, at = read_events(events), read_before(before), float(at)
    sys.exit(failover(events, before, shard, at) if mode == "failover" else rebalance(events, before, shard, at))


if __name__ == "__main__":
    main()
