"""STAND-IN for the real `bd` CLI (beads), used only by tests.

Real bd cannot be installed here (its npm package downloads a native binary at install time).
This script serves a JSONL file with bd's documented `--json` shapes:

* `bd list [--all] [--limit N] --json`       -> bare array of issues
* `bd show ID... --json`                      -> array with one IssueDetails per id (dependencies
                                                 as the full target issue + `dependency_type`);
                                                 an unknown id fails the whole call
* `bd ready [--limit N] --json`               -> array; `--sort priority` = priority ASC,
                                                 created_at DESC, id (bd's own default)
* `bd blocked --json`                         -> array of issue + `blocked_by` (ids)
* `bd update ID --claim --json`               -> array with the updated issue; actor from
                                                 BEADS_ACTOR; someone else's claim is refused
* `bd close ID [--reason R] [--session S] [--force] --json` -> array with the closed issue
* errors: `{"schema_version":1,"error":"...","code":"..."}` on stderr, exit 1

Ready/blocked follow current `bd ready` with a reader of its own (independent of exo's
implementation). Env: FAKE_BD_JSONL (data file), FAKE_BD_LOG (argv log, one JSON line
per call), BD_JSON_ENVELOPE=1 (wrap in {"data":...}), FAKE_BD_ITEMS=1 (wrap lists in
{"items":[...]}, the pre-merge shape).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime

EXCLUDED_TYPES = {"merge-request", "gate", "molecule", "message", "agent", "role", "rig"}
INACTIVE = {"closed", "pinned"}


def load() -> tuple[list[str], dict[str, dict]]:
    with open(os.environ["FAKE_BD_JSONL"], encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    issues = {}
    for ln in lines:
        if ln.strip():
            d = json.loads(ln)
            if d.get("status") != "tombstone":
                issues[d["id"]] = d
    return lines, issues


def save(issues: dict[str, dict]) -> None:
    path = os.environ["FAKE_BD_JSONL"]
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        for d in issues.values():
            fh.write(json.dumps(d, separators=(",", ":")) + "\n")
    os.replace(path + ".tmp", path)


def blocked_map(issues: dict[str, dict]) -> dict[str, list[str]]:
    deps = {i: d.get("dependencies") or [] for i, d in issues.items()}
    memo: dict[str, list[str]] = {}

    def blocked(i: str, seen: tuple = ()) -> list[str]:
        if i in memo:
            return memo[i]
        if i in seen or issues[i].get("status") in INACTIVE:
            return []
        res = []
        for e in deps[i]:
            t = issues.get(e["depends_on_id"])
            if t is None:
                continue
            if e["type"] in ("blocks", "conditional-blocks") and t.get("status") not in INACTIVE:
                res.append(t["id"])
            elif e["type"] == "parent-child" and blocked(t["id"], seen + (i,)):
                res.append(t["id"])
        memo[i] = res
        return res

    return {i: blocked(i) for i in issues}


def ready(issues: dict[str, dict]) -> list[dict]:
    bm = blocked_map(issues)
    deps = {i: d.get("dependencies") or [] for i, d in issues.items()}
    deferred = {i for i, d in issues.items() if d.get("status") == "deferred" or d.get("defer_until")}
    out = [
        d
        for i, d in issues.items()
        if d.get("status") == "open"
        and not d.get("pinned")
        and not d.get("ephemeral")
        and d.get("issue_type", "task") not in EXCLUDED_TYPES
        and not d.get("defer_until")
        and not any(e["type"] == "parent-child" and e["depends_on_id"] in deferred for e in deps[i])
        and not bm[i]
    ]
    out.sort(key=lambda d: d["id"])
    out.sort(key=lambda d: d.get("created_at", ""), reverse=True)
    out.sort(key=lambda d: d.get("priority", 2))
    return out


def emit(payload: object) -> None:
    if isinstance(payload, list) and os.environ.get("FAKE_BD_ITEMS") == "1":
        payload = {"schema_version": 1, "items": payload}
    elif isinstance(payload, dict):
        payload = {"schema_version": 1, **payload}
    if os.environ.get("BD_JSON_ENVELOPE") == "1":
        payload = {"schema_version": 1, "data": payload}
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def fail(message: str, code: str) -> None:
    sys.stderr.write(json.dumps({"schema_version": 1, "error": message, "code": code}) + "\n")
    sys.exit(1)


def opt(args: list[str], name: str) -> str | None:
    if name in args:
        i = args.index(name)
        return args[i + 1]
    return None


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main() -> None:
    args = sys.argv[1:]
    log = os.environ.get("FAKE_BD_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": args, "actor": os.environ.get("BEADS_ACTOR")}) + "\n")
    if "--json" not in args:
        fail("this stand-in only speaks --json", "usage")
    args = [a for a in args if a != "--json"]
    cmd, rest = args[0], args[1:]
    import fcntl  # one command at a time, as bd's database serializes its writers

    folder = os.open(os.path.dirname(os.path.abspath(os.environ["FAKE_BD_JSONL"])), os.O_RDONLY)
    fcntl.flock(folder, fcntl.LOCK_EX)  # held until the process ends; no lock file beside the tracker
    _, issues = load()
    if cmd == "list":
        items = [d for d in issues.values() if "--all" in rest or d.get("status") != "closed"]
        limit = int(opt(rest, "--limit") or 50)
        emit(items[:limit] if limit else items)
    elif cmd == "ready":
        items = ready(issues)
        limit = int(opt(rest, "--limit") or 100)
        emit(items[:limit] if limit else items)
    elif cmd == "blocked":
        bm = blocked_map(issues)
        emit([{**issues[i], "blocked_by_count": len(b), "blocked_by": b} for i, b in bm.items() if b])
    elif cmd == "show":
        shown = []
        for bead_id in rest:
            d = issues.get(bead_id)
            if d is None:
                fail(f'no issue found matching "{bead_id}"', "not_found")
            details = {k: v for k, v in d.items() if k != "dependencies"}
            details["dependencies"] = [
                {**issues[e["depends_on_id"]], "dependency_type": e["type"]}
                for e in d.get("dependencies") or []
                if e["depends_on_id"] in issues
            ]
            shown.append(details)
        emit(shown)
    elif cmd == "update":
        d = issues.get(rest[0])
        if d is None:
            fail(f'no issue found matching "{rest[0]}"', "not_found")
        if "--claim" in rest:
            actor = os.environ.get("BEADS_ACTOR") or "unknown"
            if d.get("assignee") and d["assignee"] != actor:
                fail(f"issue {rest[0]} already claimed by {d['assignee']}", "conflict")
            d["status"] = "in_progress"
            d["assignee"] = actor
            d["updated_at"] = now()
            d.pop("closed_at", None)
        save(issues)
        emit([d])
    elif cmd == "close":
        d = issues.get(rest[0])
        if d is None:
            fail(f'no issue found matching "{rest[0]}"', "not_found")
        b = blocked_map(issues)[rest[0]]
        if b and "--force" not in rest:
            fail(f"cannot close {rest[0]}: blocked by open issues {b}", "blocked")
        d["status"] = "closed"
        d["closed_at"] = d["updated_at"] = now()
        d["close_reason"] = opt(rest, "--reason") or "Closed"
        if opt(rest, "--session"):
            d["closed_by_session"] = opt(rest, "--session")
        save(issues)
        emit([d])
    else:
        fail(f"unknown command {cmd!r} in this stand-in", "usage")


if __name__ == "__main__":
    main()
