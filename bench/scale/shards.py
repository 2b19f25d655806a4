"""Reports on a failover or a rebalance of bundles across shards, from the API server's audit
log (which records every write of the slot table, the Lease gantry-shard-slots, with the table
it left, and every list of Bundles, at the time it was done: a client's watch of thousands of
Bundles would add its own delay). Also joins the slot table and the bundles' slot labels.

  shards.py assignment SLOTS TABLE
      SLOTS: `NAME SLOT` lines (kubectl custom-columns); TABLE: the slot table's JSON.
      Prints `NAME SHARD SLOT` lines: each bundle, the owner of its slot, its slot.
  shards.py state TABLE
      `busy` while a slot has no owner or is being let go; else the epoch and slots per shard.
  shards.py owns TABLE SHARD
      Exit status 0 when SHARD owns a slot in the table.
  shards.py failover AUDIT_LOG BEFORE KILLED KILLED_AT
      BEFORE: `NAME SHARD SLOT` lines, the assignment before the kill. For each bundle of the
      KILLED shard: the time from KILLED_AT until a table write gave its slot to another shard,
      and until that shard's list of the bundles of its slots (with that slot) completed.
  shards.py rebalance AUDIT_LOG BEFORE ADDED ADDED_AT
      How many bundles changed shard after ADDED_AT, how many went to ADDED, when the last
      table write was (the ring settled) and when ADDED's last list of its bundles completed.
"""
import datetime
import glob
import json
import os
import sys
import urllib.parse

TABLE_LEASE, TABLE_ANNOTATION = "gantry-shard-slots", "gantry.dev/slot-table"
SLOT_LABEL = "gantry.dev/slot"


def audit_lines(path):
    """The lines of the audit log at `path` and of the files it was rotated to before
    (`audit-TIME.log` beside it, 100 MB each), oldest first."""
    stem, ext = os.path.splitext(path)
    for rotated in sorted(glob.glob(f"{stem}-*{ext}")) + [path]:
        yield from open(rotated)


def seconds(timestamp):
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def replica(agent):
    """The replica a User-Agent names (`gantry-provisioner/VERSION (IDENTITY)`)."""
    return agent.rsplit("(", 1)[-1].rstrip(")") if "(" in agent else agent


def selected_slots(uri):
    """The slots of a `gantry.dev/slot in (...)` label selector in a request URI, and whether
    the request continues a paged list."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
    selector = query.get("labelSelector", [""])[0]
    prefix = f"{SLOT_LABEL} in ("
    slots = set()
    if selector.startswith(prefix) and selector.endswith(")"):
        slots = {int(s) for s in selector[len(prefix):-1].split(",") if s.strip().isdigit()}
    return slots, "continue" in query


def read_log(path, since):
    """The slot table's writes (done, table) and the lists of Bundles (received, done, replica,
    slots, continues) at or after `since`, each in order."""
    tables, lists = [], []
    for line in audit_lines(path):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short
        ref = event.get("objectRef", {})
        code = event.get("responseStatus", {}).get("code")
        if code != 200 and not (code == 201 and event.get("verb") == "create"):
            continue
        done = seconds(event["stageTimestamp"])
        if done < since:
            continue
        if ref.get("resource") == "leases" and ref.get("name") == TABLE_LEASE and event.get("verb") in ("create", "update", "patch"):
            metadata = (event.get("responseObject") or {}).get("metadata", {})
            text = (metadata.get("annotations") or {}).get(TABLE_ANNOTATION)
            if text:
                tables.append((int(metadata.get("resourceVersion", 0)), done, json.loads(text)))
        elif ref.get("resource") == "bundles" and event.get("verb") == "list":
            slots, continues = selected_slots(event.get("requestURI", ""))
            if slots:
                lists.append((seconds(event["requestReceivedTimestamp"]), done,
                              replica(event.get("userAgent", "")), slots, continues))
    tables.sort()
    lists.sort()
    return [(done, table) for _, done, table in tables], lists


def listed(lists, shard, slot, after):
    """When `shard`'s first list of Bundles with `slot` in its selector that completed at or
    after `after` ended: the last page of that listing (a shard may list other slots meanwhile,
    with watches of their own). By completion, not receipt: the shard
    may see the table (its watch) before the API server has logged the table write's response."""
    chain = None
    for _, done, who, slots, continues in lists:
        if who != shard:
            continue
        if chain is None:
            if slot in slots and not continues and done >= after:
                chain = (slots, done)
        elif slots == chain[0] and continues:
            chain = (slots, done)
        elif slots == chain[0]:
            break  # the same selector listed again from its start
        # A list of other slots is another watch of the same shard: its own chain.
    return chain[1] if chain else None


def read_before(path):
    return {parts[0]: (parts[1], parts[2]) for parts in (line.split() for line in open(path)) if len(parts) >= 3}


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def spread(values):
    return (f"{min(values):.1f} / {percentile(values, 0.5):.1f} / "
            f"{percentile(values, 0.99):.1f} / {max(values):.1f} s")


def failover(path, before, killed, killed_at):
    tables, lists = read_log(path, killed_at)
    owned = {name: int(slot) for name, (shard, slot) in before.items() if shard == killed and slot.isdigit()}
    given, held = [], []
    for name, slot in owned.items():
        for done, table in tables:
            owner = table["owners"][slot]
            if owner not in (None, killed):
                given.append(done - killed_at)
                finished = listed(lists, owner, slot, done)
                if finished is not None:
                    held.append(finished - killed_at)
                break
    print(f"  bundles of the killed shard            {len(owned)}")
    print(f"  slot given to another shard            {len(given)}")
    print(f"  listed by their new owner              {len(held)}")
    if given:
        print(f"  time to the table write (min/p50/p99/max)  {spread(given)}")
    if held:
        print(f"  time to a new owner holding it (min/p50/p99/max)  {spread(held)} (target p99 15 s)")
    return 0 if len(held) == len(owned) else 1


def rebalance(path, before, added, added_at):
    tables, lists = read_log(path, added_at)
    if not tables:
        print("  no write of the slot table after the start")
        return 0
    last_done, last = tables[-1]
    final = {name: last["owners"][int(slot)] if slot.isdigit() else None for name, (_, slot) in before.items()}
    moved = sum(1 for name, (shard, _) in before.items() if final[name] != (None if shard == "<none>" else shard))
    to_added = sum(1 for owner in final.values() if owner == added)
    shards = len({shard for shard, _ in before.values()} - {"<none>"}) + 1
    print(f"  bundles moved                          {moved} of {len(before)} "
          f"(1/{shards} of them: {len(before) // shards}); {to_added} to the new shard")
    print(f"  the last table write after the start   {last_done - added_at:.1f} s (target 30 s)")
    mine = {slot for slot, owner in enumerate(last["owners"]) if owner == added}
    finished = [done for received, done, who, slots, _ in lists if who == added and slots == mine]
    if finished:
        print(f"  the new shard's list of all its slots  {max(finished) - added_at:.1f} s")
    return 0


def assignment(slots_path, table_path):
    table = json.load(open(table_path))
    for line in open(slots_path):
        parts = line.split()
        if len(parts) < 2:
            continue
        name, slot = parts[0], parts[1]
        owner = table["owners"][int(slot)] if slot.isdigit() and int(slot) < len(table["owners"]) else None
        print(name, owner or "<none>", slot)


def state(table_path):
    table = json.load(open(table_path))
    if None in table["owners"] or table.get("released"):
        print("busy")
        return
    counts = {}
    for owner in table["owners"]:
        counts[owner] = counts.get(owner, 0) + 1
    print(f"epoch {table['epoch']}", " ".join(f"{o}={n}" for o, n in sorted(counts.items())))


def main():
    mode = sys.argv[1]
    if mode == "assignment":
        assignment(sys.argv[2], sys.argv[3])
    elif mode == "state":
        state(sys.argv[2])
    elif mode == "owns":
        sys.exit(0 if sys.argv[3] in json.load(open(sys.argv[2]))["owners"] else 1)
    else:
        audit_log, before, shard, at = sys.argv[2:6]
        before, at = read_before(before), float(at)
        sys.exit(failover(audit_log, before, shard, at) if mode == "failover"
                 else rebalance(audit_log, before, shard, at))


if __name__ == "__main__":
    main()
