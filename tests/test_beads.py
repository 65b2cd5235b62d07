"""Tests for exo_cli.adapters.beads against the real beads exports in tests/fixtures/beads/."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exo_cli.adapters.beads import (
    BdSource,
    Bead,
    BeadGraph,
    JsonlSource,
    check_bead_id,
    check_spawnable,
    compute_ready,
    diff_beads,
    infer_prefix,
    open_beads,
    render_context,
    resolve_id,
    short_id,
    unwrap_json,
)
from exo_cli.errors import EnvironmentError_, ExternalFailure, InvalidInput, NotFound, StateError

FIX = Path(__file__).parent / "fixtures" / "beads"
SY = FIX / "steveyegge-beads"
FAKE_BD = Path(__file__).parent / "fake_bd.py"

# fixture name -> (jsonl source, name it gets in .beads/, config.yaml, metadata.json or None)
FIXTURES = {
    "herdctl": (FIX / "herdctl/beads.jsonl", "beads.jsonl", FIX / "herdctl/config.yaml", FIX / "herdctl/metadata.json"),
    "beads.2025-11-20": (SY / "beads.2025-11-20.jsonl", "beads.jsonl", SY / "config.2025-11-20.yaml", SY / "metadata.2025-11-20.json"),
    "issues.2026-01-26": (SY / "issues.2026-01-26.jsonl", "issues.jsonl", SY / "config.2026-01-26.yaml", None),
    "issues.2026-02-27": (SY / "issues.2026-02-27.dolt-export.jsonl", "issues.jsonl", SY / "config.2026-02-27.yaml", None),
}  # fmt: skip
# SOURCES.md "Derived reference values": (open, ready)
EXPECTED = {
    "herdctl": (1, 1),
    "beads.2025-11-20": (46, 41),
    "issues.2026-01-26": (121, 101),
    "issues.2026-02-27": (291, 13),
}


def make_repo(tmp_path: Path, name: str) -> Path:
    """Create <tmp>/repo/.beads/ holding one fixture as bd would have it on disk."""
    src, dest_name, config, metadata = FIXTURES[name]
    repo = tmp_path / "repo"
    beads = repo / ".beads"
    beads.mkdir(parents=True)
    shutil.copyfile(src, beads / dest_name)
    shutil.copyfile(config, beads / "config.yaml")
    if metadata:
        shutil.copyfile(metadata, beads / "metadata.json")
    return repo


def jsonl_lines(name: str) -> list[dict]:
    return [json.loads(ln) for ln in FIXTURES[name][0].read_text(encoding="utf-8").splitlines() if ln.strip()]


def b(id: str, **kw) -> Bead:
    deps = kw.pop("deps", ())
    obj = {"id": id, "title": kw.pop("title", id), "priority": kw.pop("priority", 2), **kw}
    obj["dependencies"] = [
        {"issue_id": id, "depends_on_id": t, "type": ty, **({"metadata": m} if m else {})}
        for (t, ty, *rest) in deps
        for m in [rest[0] if rest else None]
    ]
    return Bead.from_dict(obj)


def ready_ids(beads, **kw) -> list[str]:
    return [x.id for x in compute_ready(beads, **kw)]


# --- ready counts on the real exports ---------------------------------------------------------


def test_fixtures_have_no_defer_until():
    # None of the four exports carries defer_until, so "now" cannot change their ready counts;
    # the reference table's "any defer_until counts as future" simplification is moot here.
    # Deferral itself is tested on synthetic beads below.
    for name in FIXTURES:
        assert not [d["id"] for d in jsonl_lines(name) if d.get("defer_until")], name


@pytest.mark.parametrize("name", list(FIXTURES))
@pytest.mark.parametrize(
    "now", [datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)], ids=["past", "future"]
)
def test_ready_counts_match_reference(tmp_path, name, now):
    repo = make_repo(tmp_path, name)
    src = JsonlSource(repo / ".beads", now=lambda: now)
    assert src.path.name == FIXTURES[name][1]
    beads = src.all()
    opened, ready = EXPECTED[name]
    assert sum(1 for x in beads if x.status == "open") == opened
    got = src.ready()
    assert len(got) == ready
    assert len({x.id for x in got}) == ready
    # sorted: priority ASC, then oldest first, then id
    keys = [(x.priority, datetime.fromisoformat(x.created_at), x.id) for x in got]
    assert keys == sorted(keys)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_ready_counts_need_no_config_yaml(tmp_path, name):
    """An export without its config.yaml (types.custom unknown) reads as the same ready count."""
    repo = make_repo(tmp_path, name)
    (repo / ".beads" / "config.yaml").unlink()
    src = JsonlSource(repo / ".beads")
    assert len(src.ready()) == EXPECTED[name][1]
    assert src.prefix == JsonlSource(make_repo(tmp_path / "with", name) / ".beads").prefix  # inferred from the ids


def test_ready_ordering_oldest_first_within_priority():
    beads = [
        b("p-new", priority=1, created_at="2026-02-01T00:00:00Z"),
        b("p-old", priority=1, created_at="2025-12-31T23:00:00-05:00"),  # = 2026-01-01T04:00Z
        b("p-mid", priority=1, created_at="2026-01-01T03:00:00.123456789Z"),
        b("p-zero", priority=0, created_at="2026-03-01T00:00:00Z"),
    ]
    assert ready_ids(beads) == ["p-zero", "p-mid", "p-old", "p-new"]
    assert ready_ids(beads, sort="oldest") == ["p-mid", "p-old", "p-new", "p-zero"]


def test_inherited_and_direct_blockers_on_real_data(tmp_path):
    src = JsonlSource(make_repo(tmp_path, "issues.2026-01-26") / ".beads")
    assert src.blockers("bd-dolt") == ["bd-2j2t5"]
    assert src.is_blocked("bd-dolt.2") and src.blockers("bd-dolt.2") == ["bd-dolt"]  # via parent-child
    src2 = JsonlSource(make_repo(tmp_path / "b", "beads.2025-11-20") / ".beads")
    assert src2.blockers("bd-19er") == ["bd-z3s3"]


# --- reading every era ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FIXTURES))
def test_every_line_round_trips_through_raw(name):
    for obj in jsonl_lines(name):
        bead = Bead.from_dict(obj)
        assert bead.raw == obj
        assert bead.id == obj["id"] and bead.title == obj["title"] and bead.priority == obj["priority"]
        assert bead.status == obj.get("status", "open")
        assert [d.depends_on_id for d in bead.dependencies] == [
            d["depends_on_id"] for d in obj.get("dependencies") or []
        ]
        json.dumps(bead.to_dict(include_raw=True))  # JSON-native


def test_classic_fields_and_labels():
    obj = next(d for d in jsonl_lines("beads.2025-11-20") if d.get("design") and d.get("acceptance_criteria"))
    bead = Bead.from_dict(obj)
    assert bead.design == obj["design"] and bead.acceptance_criteria == obj["acceptance_criteria"]
    assert bead.raw["content_hash"] == obj["content_hash"]


def test_tombstones(tmp_path):
    src = JsonlSource(make_repo(tmp_path, "herdctl") / ".beads")
    tombs = [x for x in src.all() if x.status == "tombstone"]
    assert len(tombs) == 6
    assert all("deleted_at" in t.raw and "original_type" in t.raw for t in tombs)
    assert not any(t.id in {r.id for r in src.ready()} for t in tombs)
    with pytest.raises(StateError, match=f"^Bead is deleted: {tombs[0].id}$"):
        check_spawnable(src, tombs[0].id)
    # A dependency on a tombstone is dangling: it does not block.
    beads = [b("x-1", status="tombstone"), b("x-2", deps=[("x-1", "blocks")])]
    assert ready_ids(beads) == ["x-2"]


def test_comments_int_and_string_ids():
    with_comments = [Bead.from_dict(d) for d in jsonl_lines("issues.2026-01-26") if d.get("comments")]
    assert len(with_comments) == 9
    first = with_comments[0]
    assert isinstance(first.raw["comments"][0]["id"], int)
    assert first.comments[0].id == str(first.raw["comments"][0]["id"])
    assert first.comments[0].author == "beads/crew/giles"
    new = Bead.from_dict(
        {"id": "bd-1", "title": "t", "priority": 1, "comments": [{"id": "c-9f", "author": "a", "text": "hi", "created_at": "2026-05-01T00:00:00Z"}]}
    )  # fmt: skip
    assert new.comments[0].id == "c-9f"


def test_dangling_dependencies(tmp_path):
    counts = {}
    for name in ("issues.2026-01-26", "issues.2026-02-27"):
        lines = jsonl_lines(name)
        ids = {d["id"] for d in lines}
        counts[name] = sum(
            1 for d in lines for e in d.get("dependencies") or [] if e["depends_on_id"] not in ids
        )
    assert counts == {"issues.2026-01-26": 6, "issues.2026-02-27": 30}
    beads = [b("d-1", deps=[("d-wisp-gone", "blocks"), ("d-gone", "parent-child"), ("d-gone2", "waits-for")])]
    assert ready_ids(beads) == ["d-1"]


def test_unparsable_lines_and_memory_lines_are_skipped(tmp_path):
    beads_dir = tmp_path / ".beads"
    beads_dir.mkdir()
    (beads_dir / "issues.jsonl").write_text(
        'not json\n\n{"_type":"memory","key":"k","value":"v"}\n[1,2]\n{"title":"no id"}\n'
        '{"_type":"issue","id":"m-1","title":"a","priority":1,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}\n'
    )
    src = JsonlSource(beads_dir)
    assert [x.id for x in src.all()] == ["m-1"]
    assert src.prefix == "m"


# --- ready/blocked semantics on synthetic graphs -------------------------------------------------


def test_blocks_and_conditional_blocks():
    beads = [
        b("a-1"),
        b("a-2", deps=[("a-1", "blocks")]),
        b("a-3", deps=[("a-1", "conditional-blocks")]),
        b("a-4", status="closed", closed_at="2026-01-01T00:00:00Z"),
        b("a-5", deps=[("a-4", "blocks")]),
        b("a-6", status="pinned"),
        b("a-7", deps=[("a-6", "blocks")]),  # pinned blockers do not block
        b("a-8", status="hooked"),
        b("a-9", deps=[("a-8", "blocks")]),  # hooked (and any custom status) blocks
        b("a-10", status="resolved"),
        b("a-11", deps=[("a-10", "blocks")]),
        b(
            "a-12",
            deps=[("a-1", "related"), ("a-1", "discovered-from"), ("a-1", "blocked-by"), ("a-1", "follows")],
        ),
    ]
    g = BeadGraph(beads)
    assert g.blockers("a-2") == ["a-1"] and g.blockers("a-3") == ["a-1"]
    assert set(ready_ids(beads)) == {"a-1", "a-5", "a-7", "a-12"}


def test_parent_child_inherited_transitively_never_upward():
    beads = [
        b("p-blocker"),
        b("p-epic", issue_type="epic", deps=[("p-blocker", "blocks")]),
        b("p-epic.1", deps=[("p-epic", "parent-child")]),
        b("p-epic.1.1", deps=[("p-epic.1", "parent-child")]),
        b("q-epic", issue_type="epic"),
        b("q-epic.1", deps=[("q-epic", "parent-child"), ("p-blocker", "blocks")]),
    ]
    g = BeadGraph(beads)
    assert g.blockers("p-epic.1") == ["p-epic"]
    assert g.blockers("p-epic.1.1") == ["p-epic.1"]
    assert not g.is_blocked("q-epic")  # a blocked child never blocks its parent
    assert set(ready_ids(beads)) == {"p-blocker", "q-epic"}


def test_waits_for_gates():
    beads = [
        b("w-fan"),
        b("w-fan.1", deps=[("w-fan", "parent-child")]),
        b("w-fan.2", status="closed", deps=[("w-fan", "parent-child")]),
        b("w-all", deps=[("w-fan", "waits-for")]),
        b("w-any", deps=[("w-fan", "waits-for", '{"gate":"any-children"}')]),
        b("w-any-obj", deps=[("w-fan", "waits-for", {"gate": "any-children"})]),
        b("w-lonely"),
        b("w-none", deps=[("w-lonely", "waits-for")]),
    ]
    g = BeadGraph(beads)
    assert g.blockers("w-all") == ["w-fan"]
    assert not g.is_blocked("w-any") and not g.is_blocked("w-any-obj") and not g.is_blocked("w-none")
    beads2 = [x for x in beads if x.id != "w-fan.2"]
    assert BeadGraph(beads2).is_blocked("w-any")


def test_excluded_unknown_pinned_ephemeral_and_statuses():
    beads = [
        b(f"t-{t}", issue_type=t)
        for t in ("merge-request", "gate", "molecule", "message", "agent", "role", "rig")
    ]
    beads += [
        b("t-convoy", issue_type="convoy"),
        b("t-weird", issue_type="weird"),
        b("t-pin", pinned=True),
        b("t-eph", ephemeral=True),
        b("t-ip", status="in_progress"),
        b("t-blk", status="blocked"),
        b("t-def", status="deferred"),
        b("t-custom", status="resolved"),
        b("t-ok", issue_type="spike"),
    ]
    # a type bd stored but exo does not know (a types.custom value) is workable, as in bd ready
    assert set(ready_ids(beads)) == {"t-ok", "t-convoy", "t-weird"}


def test_defer_until_future_hidden_past_visible_and_children_of_deferred():
    now = datetime(2026, 6, 1, tzinfo=UTC)
    beads = [
        b("d-future", defer_until="2026-06-02T00:00:00Z"),
        b("d-past", defer_until="2026-05-01T00:00:00-07:00"),
        b("d-ns", defer_until="2026-05-31T23:59:59.999999999Z"),
        b("d-bad", defer_until="next tuesday"),
        b("d-kid", deps=[("d-future", "parent-child")]),
        b("d-kid2", deps=[("d-past", "parent-child")]),
        b("d-parent", status="deferred"),
        b("d-kid3", deps=[("d-parent", "parent-child")]),
    ]
    assert set(ready_ids(beads, now=now)) == {"d-past", "d-ns", "d-kid2"}
    later = datetime(2027, 1, 1, tzinfo=UTC)
    assert set(ready_ids(beads, now=later)) == {"d-future", "d-past", "d-ns", "d-kid", "d-kid2"}


def test_cycles_do_not_hang_or_crash():
    beads = [
        b("c-1", deps=[("c-2", "parent-child")]),
        b("c-2", deps=[("c-1", "parent-child")]),
        b("c-3", deps=[("c-3", "blocks")]),
    ]
    g = BeadGraph(beads)
    assert not g.is_blocked("c-1") and not g.is_blocked("c-2")
    assert g.is_blocked("c-3")


# --- ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["../x", "a/b", "a\\b", "a..b", "a;rm -rf", "a b", "a\x00", "a\nb", "-rf", "$(id)", "`x`", "a|b", "", "x" * 201]
)  # fmt: skip
def test_invalid_ids_rejected_first(tmp_path, bad):
    src = JsonlSource(make_repo(tmp_path, "herdctl") / ".beads")
    with pytest.raises(InvalidInput) as ei:
        resolve_id(src, bad)
    assert ei.value.rpc_code == -32002 and ei.value.exit_code == 4
    assert ei.value.message.startswith("Invalid bead ID")
    with pytest.raises(InvalidInput):
        check_spawnable(src, bad)


def test_resolve_id(tmp_path):
    src = JsonlSource(make_repo(tmp_path, "herdctl") / ".beads")
    assert src.prefix == "herdctl"  # config.yaml is the commented template: inferred from ids
    assert resolve_id(src, "vxo") == "herdctl-vxo"
    assert resolve_id(src, "herdctl-vxo") == "herdctl-vxo"
    assert resolve_id(src, "herdctl-08c.1") == "herdctl-08c.1"
    assert resolve_id(src, "08c.1") == "herdctl-08c.1"
    with pytest.raises(NotFound) as ei:
        resolve_id(src, "zzz")
    assert ei.value.message == "Bead not found: herdctl-zzz"
    assert ei.value.rpc_code == -32001
    with pytest.raises(NotFound, match="^Bead not found: herdctl-nope$"):
        src.get("herdctl-nope")


def test_prefix_rules(tmp_path):
    assert infer_prefix(["my-app-123", "my-app-9x", "other-1"]) == "my-app"
    assert infer_prefix(["bd-wisp-abc", "bd-wisp-def", "bd-1"]) == "bd"
    assert infer_prefix([]) is None
    assert short_id("herdctl-08c.1", "herdctl") == "08c.1"
    assert short_id("x-1", "bd") == "x-1"
    src = JsonlSource(make_repo(tmp_path, "issues.2026-02-27") / ".beads")
    assert src.prefix == "bd"  # issue-prefix in config.yaml
    assert check_bead_id("bd-a3f8.1.1") == "bd-a3f8.1.1"


def test_check_spawnable(tmp_path):
    src = JsonlSource(make_repo(tmp_path, "issues.2026-01-26") / ".beads")
    with pytest.raises(StateError) as ei:
        check_spawnable(src, "dolt.2")
    assert ei.value.message == "Bead is blocked: bd-dolt.2"
    assert ei.value.rpc_code == -32004 and ei.value.data["blockers"] == ["bd-dolt"]
    ready = src.ready()[0]
    assert check_spawnable(src, short_id(ready.id, "bd")).id == ready.id
    closed = next(x for x in src.all() if x.status == "closed")
    with pytest.raises(StateError, match=f"^Bead is closed: {closed.id}$"):
        check_spawnable(src, closed.id)
    hooked = next(x for x in src.all() if x.status == "hooked")
    with pytest.raises(StateError, match="hooked"):
        check_spawnable(src, hooked.id)
    src.claim(ready.id, "agent-a")
    with pytest.raises(StateError, match=r"^Bead is already in_progress \(assignee: agent-a\): "):
        check_spawnable(src, ready.id)
    assert check_spawnable(src, ready.id, actor="agent-a").assignee == "agent-a"


def test_check_spawnable_stored_blocked_status(tmp_path):
    beads_dir = tmp_path / ".beads"
    beads_dir.mkdir()
    (beads_dir / "issues.jsonl").write_text(
        json.dumps({"id": "tp-hp4", "title": "x", "priority": 1, "status": "blocked"}) + "\n"
        + json.dumps({"id": "tp-gate", "title": "g", "priority": 1, "issue_type": "gate"}) + "\n"
    )  # fmt: skip
    (beads_dir / "config.yaml").write_text('issue-prefix: "tp"\n')
    src = JsonlSource(beads_dir)
    with pytest.raises(StateError, match="^Bead is blocked: tp-hp4$"):
        check_spawnable(src, "hp4")
    with pytest.raises(StateError, match="gate"):
        check_spawnable(src, "gate")


# --- JSONL writes -----------------------------------------------------------------------------


def test_claim_then_close_rewrites_only_the_target_line(tmp_path):
    repo = make_repo(tmp_path, "issues.2026-01-26")
    path = repo / ".beads/issues.jsonl"
    os.chmod(path, 0o640)
    before = path.read_bytes().splitlines(keepends=True)
    src = JsonlSource(repo / ".beads")
    target = next(x for x in src.ready() if x.raw.get("work_type") or x.raw.get("owner"))
    idx = next(i for i, ln in enumerate(before) if json.loads(ln)["id"] == target.id)
    old_obj = json.loads(before[idx])

    claimed = src.claim(target.id, "agent-7")
    assert claimed.status == "in_progress" and claimed.assignee == "agent-7"
    assert src.claim(target.id, "agent-7").assignee == "agent-7"  # idempotent for the same actor
    with pytest.raises(StateError, match=f"^Bead is already claimed by agent-7: {target.id}$"):
        src.claim(target.id, "agent-8")
    closed = src.close(target.id, reason="done in PR #3", session="sess-1")

    after = path.read_bytes().splitlines(keepends=True)
    assert len(after) == len(before)
    assert [ln for i, ln in enumerate(after) if i != idx] == [ln for i, ln in enumerate(before) if i != idx]
    new_obj = json.loads(after[idx])
    assert after[idx].endswith(b"\n") and after[idx].count(b"\n") == 1
    # every original key kept, in order, unknown ones untouched
    assert list(new_obj)[: len(old_obj)] == list(old_obj)
    for k, v in old_obj.items():
        if k not in ("status", "assignee", "updated_at", "closed_at", "close_reason"):
            assert new_obj[k] == v, k
    assert new_obj["status"] == "closed" and new_obj["closed_at"]
    assert new_obj["close_reason"] == "done in PR #3" and new_obj["closed_by_session"] == "sess-1"
    assert new_obj["assignee"] == "agent-7"
    assert new_obj["updated_at"] != old_obj["updated_at"]
    assert after[idx] == json.dumps(new_obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    assert closed.status == "closed" and src.get(target.id).status == "closed"
    assert target.id not in {x.id for x in src.ready()}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    # closing again is a no-op; closed beads cannot be claimed
    snapshot = path.read_bytes()
    assert src.close(target.id, reason="again").close_reason == "done in PR #3"
    assert path.read_bytes() == snapshot
    with pytest.raises(StateError, match="^Bead is closed: "):
        src.claim(target.id, "agent-7")


def test_closed_at_invariant_and_refusals(tmp_path):
    beads_dir = tmp_path / ".beads"
    beads_dir.mkdir()
    lines = [
        {"id": "z-1", "title": "blocker", "priority": 1, "status": "open"},
        {"id": "z-2", "title": "blocked", "priority": 1, "dependencies": [{"issue_id": "z-2", "depends_on_id": "z-1", "type": "blocks"}]},
        {"id": "z-3", "title": "stray closed_at", "priority": 1, "status": "open", "closed_at": "2026-01-01T00:00:00Z", "x_unknown": {"k": [1]}},
        {"id": "z-4", "title": "épic ✓", "priority": 1, "issue_type": "epic"},
        {"id": "z-4.1", "title": "kid", "priority": 1, "dependencies": [{"issue_id": "z-4.1", "depends_on_id": "z-4", "type": "parent-child"}]},
    ]  # fmt: skip
    (beads_dir / "issues.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    src = JsonlSource(beads_dir)
    with pytest.raises(StateError, match=r"^cannot close z-2: blocked by open issues \[z-1\]$"):
        src.close("z-2")
    with pytest.raises(StateError, match="open children"):
        src.close("z-4")
    claimed = src.claim("z-3", "me")
    assert "closed_at" not in claimed.raw and claimed.raw["x_unknown"] == {"k": [1]}
    assert src.close("z-2", force=True).close_reason == "Closed"
    assert src.close("z-4.1").status == "closed"
    assert src.close("z-4").raw["title"] == "épic ✓"
    assert "épic ✓".encode() in (beads_dir / "issues.jsonl").read_bytes()  # ensure_ascii=False
    with pytest.raises(NotFound):
        src.close("z-9")


def _claim_worker(args):
    beads_dir, bead_id, actor, barrier = args
    barrier.wait()
    try:
        JsonlSource(beads_dir).claim(bead_id, actor)
        return (bead_id, actor, "ok")
    except StateError as exc:
        return (bead_id, actor, exc.message)


def _run_workers(jobs):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(len(jobs))
    q = ctx.Queue()

    def target(job):
        q.put(_claim_worker((*job, barrier)))

    procs = [ctx.Process(target=target, args=(job,)) for job in jobs]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in jobs]
    for p in procs:
        p.join(timeout=30)
    return results


def test_concurrent_claims_lose_no_writes(tmp_path):
    repo = make_repo(tmp_path, "beads.2025-11-20")
    beads_dir = repo / ".beads"
    targets = [x.id for x in JsonlSource(beads_dir).ready()[:6]]
    results = _run_workers([(beads_dir, t, f"agent-{i}") for i, t in enumerate(targets)])
    assert sorted(r[2] for r in results) == ["ok"] * 6
    src = JsonlSource(beads_dir)
    for i, t in enumerate(targets):
        assert (src.get(t).status, src.get(t).assignee) == ("in_progress", f"agent-{i}")
    assert len(src.all()) == 538


def test_concurrent_claims_of_one_bead_have_one_winner(tmp_path):
    beads_dir = make_repo(tmp_path, "herdctl") / ".beads"
    results = _run_workers([(beads_dir, "herdctl-vxo", f"agent-{i}") for i in range(4)])
    winners = [r for r in results if r[2] == "ok"]
    assert len(winners) == 1
    assert JsonlSource(beads_dir).get("herdctl-vxo").assignee == winners[0][1]


# --- open_beads and the bd CLI (through a stand-in) ------------------------------------------------


@pytest.fixture
def fake_bd(tmp_path):
    """Put a STAND-IN `bd` (tests/fake_bd.py; real bd cannot be installed here) on a private PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "bd"
    exe.write_text(f"#!{sys.executable}\n" + FAKE_BD.read_text())
    exe.chmod(0o755)
    repo = make_repo(tmp_path, "issues.2026-01-26")
    data = repo / ".beads/issues.jsonl"
    log = tmp_path / "bd.log"
    env = {
        "PATH": f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FAKE_BD_JSONL": str(data),
        "FAKE_BD_LOG": str(log),
        "HOME": str(tmp_path),
    }
    return repo, env, log


def calls(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_open_beads_selection(tmp_path, fake_bd):
    repo, env, _ = fake_bd
    src = open_beads(repo, env=env)
    assert isinstance(src, BdSource) and src.bd_path == str(tmp_path / "bin/bd")
    no_bd = {"PATH": str(tmp_path / "empty")}
    assert isinstance(open_beads(repo, env=no_bd), JsonlSource)
    with pytest.raises(EnvironmentError_) as ei:
        open_beads(tmp_path / "nowhere", env=no_bd)
    assert ei.value.hint and "bd init" in ei.value.hint and ei.value.rpc_code == -32005
    # BEADS_DIR points elsewhere (a worktree using the main checkout's tracker)
    wt = tmp_path / "wt"
    wt.mkdir()
    src = open_beads(wt, env={**no_bd, "BEADS_DIR": str(repo / ".beads")})
    assert isinstance(src, JsonlSource) and src.path == repo / ".beads/issues.jsonl"
    src = open_beads(wt, env=env, beads_dir=repo / ".beads")
    assert isinstance(src, BdSource) and src.env["BEADS_DIR"] == str(repo / ".beads")
    with pytest.raises(EnvironmentError_):
        open_beads(repo, env=no_bd, bd=str(tmp_path / "bin/missing-bd"))
    empty = tmp_path / "empty-repo"
    (empty / ".beads").mkdir(parents=True)
    with pytest.raises(EnvironmentError_, match="No beads JSONL"):
        open_beads(empty, env=no_bd)


def test_bd_source_reads(fake_bd):
    repo, env, log = fake_bd
    src = open_beads(repo, env=env)
    jsonl = JsonlSource(repo / ".beads")
    ready = src.ready()
    assert [x.id for x in ready] == [x.id for x in jsonl.ready()]  # same set, exo's own order
    assert len(ready) == 101
    assert any(c["argv"][:3] == ["ready", "--limit", "0"] for c in calls(log))
    assert all("--json" in c["argv"] for c in calls(log))
    bead = src.get("bd-dolt.2")
    assert bead.title == jsonl.get("bd-dolt.2").title
    assert [(d.depends_on_id, d.type) for d in bead.dependencies] == [("bd-dolt", "parent-child")]
    assert src.blockers("bd-dolt.2") == ["bd-dolt"] and src.is_blocked("bd-dolt")
    assert src.blockers(ready[0].id) == []
    assert len(src.all()) == 485
    assert src.prefix == "bd"
    assert resolve_id(src, "dolt.2") == "bd-dolt.2"
    with pytest.raises(NotFound, match="^Bead not found: bd-nope$"):
        resolve_id(src, "nope")
    with pytest.raises(StateError, match="^Bead is blocked: bd-dolt.2$"):
        check_spawnable(src, "dolt.2")
    assert check_spawnable(src, short_id(ready[0].id, "bd")).id == ready[0].id
    with pytest.raises(ExternalFailure) as ei:
        src._run(["bogus"])
    assert ei.value.rpc_code == -32003 and "unknown command" in ei.value.message


@pytest.mark.parametrize("shape", ["items", "envelope"])
def test_bd_source_tolerates_wrapped_output(fake_bd, shape):
    repo, env, _ = fake_bd
    env = {**env, ("FAKE_BD_ITEMS" if shape == "items" else "BD_JSON_ENVELOPE"): "1"}
    src = open_beads(repo, env=env)
    assert len(src.ready()) == 101
    assert src.get("bd-dolt").id == "bd-dolt"


def test_bd_source_writes(fake_bd):
    repo, env, log = fake_bd
    src = open_beads(repo, env=env)
    target = src.ready()[0].id
    claimed = src.claim(target, "agent-x")
    assert (claimed.status, claimed.assignee) == ("in_progress", "agent-x")
    last = calls(log)[-1]
    assert last["argv"] == ["update", target, "--claim", "--json"] and last["actor"] == "agent-x"
    with pytest.raises(StateError, match="already claimed by agent-x"):
        src.claim(target, "agent-y")
    closed = src.close(target, reason="merged", session="s-1")
    assert closed.status == "closed" and closed.raw["close_reason"] == "merged"
    assert calls(log)[-1]["argv"] == ["close", target, "--reason", "merged", "--session", "s-1", "--json"]
    with pytest.raises(StateError, match="cannot close"):
        src.close("bd-dolt.2")
    with pytest.raises(NotFound, match="^Bead not found: bd-missing$"):
        src.close("bd-missing")
    with pytest.raises(InvalidInput):
        src.claim("--all", "agent-x")


# --- context and diffs -------------------------------------------------------------------------


def test_render_context(tmp_path):
    src = JsonlSource(make_repo(tmp_path, "issues.2026-01-26") / ".beads")
    bead = src.get("bd-dolt.2")
    deps = {d.depends_on_id: src.get(d.depends_on_id) for d in bead.dependencies}
    md = render_context(bead, branch="bd-dolt.2/x", parent_branch="main", dependencies_resolved=deps)
    assert md.startswith(
        f"# Task: {bead.title}\n\n**ID:** bd-dolt.2\n**Status:** open\n**Priority:** {bead.priority}\n"
    )
    assert "**Branch:** bd-dolt.2/x" in md and "**Parent branch:** main" in md
    assert f"- bd-dolt: {src.get('bd-dolt').title} (open) [parent-child]" in md
    assert "2. Commit: [bd-dolt.2] <description>" in md
    assert "git push -u origin bd-dolt.2/x" in md
    assert "'file_pr' tool" in md and "exo pr file" in md and "do NOT use the gh cli" in md
    assert "exo note" in md
    full = Bead.from_dict(
        {"id": "t-1", "title": "T", "priority": 0, "description": "D", "design": "G", "acceptance_criteria": "A",
         "dependencies": [{"depends_on_id": "t-0", "type": "blocks"}]}
    )  # fmt: skip
    md = render_context(full, branch="bd-1/t", dependencies_resolved=[])
    assert "## Description\n\nD" in md and "## Design\n\nG" in md and "## Acceptance criteria\n\nA" in md
    assert "- t-0: (not found)" in md and "Parent branch" not in md


def test_diff_beads():
    old = Bead.from_dict({"id": "d-1", "title": "t", "priority": 1, "status": "open"})
    new = Bead.from_dict(
        {"id": "d-1", "title": "t2", "priority": 1, "status": "in_progress",
         "dependencies": [{"depends_on_id": "d-0", "type": "blocks"}],
         "comments": [{"id": 1, "author": "a", "text": "hi", "created_at": "2026-01-01T00:00:00Z"}]}
    )  # fmt: skip
    d = diff_beads(old, new)
    assert d["status"] == {"from": "open", "to": "in_progress"}
    assert d["dependencies_added"] == [{"depends_on_id": "d-0", "type": "blocks", "metadata": None}]
    assert [c["text"] for c in d["comments_added"]] == ["hi"] and d["comments_added"][0]["id"] == "1"
    assert d["fields_changed"] == ["title"] and d["changed"] and not d["new"]
    assert diff_beads(new, new)["changed"] is False
    assert diff_beads(None, new)["new"] is True
    json.dumps(d)


def test_unwrap_json():
    assert unwrap_json({"schema_version": 1, "data": [1]}) == [1]
    assert unwrap_json({"schema_version": 1, "items": [2]}) == [2]
    assert unwrap_json({"schema_version": 1, "data": {"items": [3]}}) == [3]
    assert unwrap_json([4]) == [4]


def test_check_spawnable_not_ready_reasons(tmp_path):
    beads_dir = tmp_path / ".beads"
    beads_dir.mkdir()
    lines = [
        {"id": "r-par", "title": "p", "priority": 1, "status": "deferred"},
        {"id": "r-kid", "title": "k", "priority": 1, "dependencies": [{"issue_id": "r-kid", "depends_on_id": "r-par", "type": "parent-child"}]},
        {"id": "r-eph", "title": "e", "priority": 1, "ephemeral": True},
        {"id": "r-later", "title": "l", "priority": 1, "defer_until": "2999-01-01T00:00:00Z"},
    ]  # fmt: skip
    (beads_dir / "issues.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    src = JsonlSource(beads_dir)
    with pytest.raises(StateError, match=r"^Bead is not ready \(parent r-par is deferred\): r-kid$"):
        check_spawnable(src, "kid")
    with pytest.raises(StateError, match=r"^Bead is not ready \(ephemeral\): r-eph$"):
        check_spawnable(src, "eph")
    with pytest.raises(StateError, match="^Bead is deferred: r-later$"):
        check_spawnable(src, "later")
    with pytest.raises(StateError, match="^Bead is deferred: r-par$"):
        check_spawnable(src, "par")
