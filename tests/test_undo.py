"""Checkpoints around exo's own changes, retention, roles and refusals (issue 29).

The disasters themselves are in tests/test_checkpoints.py; here: the checkpoints exo takes
before it rebases, merges into or completes a checkout, what undo refuses and who may call
it, retention and the archive of `complete --force`, a reused name, and the agent being told.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import commit, env_for, git, make_agent
from test_checkpoints import STOP, folder_of, listed, ok
from test_messages_helpers import hook_json, run_hook

from conftest import Exo, agent_vars, wait_for
from exo_cli import registry
from exo_cli.adapters import ckptrefs as ckrefs
from exo_cli.errors import StateError
from exo_cli.ops import checkpoints as cps


def wt_of(repo: Path, name: str = "w1") -> Path:
    return repo / ".exo" / "worktrees" / name


def refs(repo: Path, prefix: str = "refs/exo/") -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname)", prefix).split()


def edit(repo: Path, exo: Exo, text: str, name: str = "w1") -> dict[str, Any]:
    (wt_of(repo, name) / "work.txt").write_text(text)
    return ok(exo("checkpoint", name, "--json"))  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- before exo's own changes


def test_the_stop_hook_checkpoints_before_it_rebases(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    wt = wt_of(repo)
    commit(wt, "mine.py", "mine\n", "w1: mine")
    (wt / "draft.md").write_text("untracked, before the rebase\n")
    mine = git(wt, "rev-parse", "HEAD")
    commit(repo, "base.py", "base moved\n", "main moves")
    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP))
    assert out == {} or out is None
    assert git(wt, "rev-parse", "HEAD") != mine  # rebased
    first = listed(exo)[-1]
    assert (first["id"], first["reason"], first["turn"], first["head"]) == (1, "rebase", 1, mine)
    wait_for(lambda: not (folder_of(repo) / "due").exists(), timeout=90, what="the turn's checkpoint")
    assert [c["reason"] for c in reversed(listed(exo))] == ["rebase", "turn"]


def test_a_merge_into_an_agents_checkout_checkpoints_it_first(repo: Path, exo: Exo) -> None:
    make_agent(repo, "tl1", role="tl")
    tl = wt_of(repo, "tl1")
    (tl / "plan.md").write_text("the lead's untracked plan\n")
    make_agent(repo, "w1", parent="tl1", base="main.tl1")
    commit(wt_of(repo), "w.py", "w\n", "w1: w")
    n = registry.invoke("pr_file", env_for(wt_of(repo), "w1")).pr.number
    registry.invoke("pr_merge", env_for(repo), number=n)
    [c] = listed(exo, "tl1")
    assert c["reason"] == "merge"
    assert git(repo, "show", f"{c['commit']}:plan.md") == "the lead's untracked plan"
    assert git(tl, "log", "-1", "--format=%s") == "w1: w (#1)"


def test_complete_checkpoints_and_force_keeps_them_with_the_archive(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    edit(repo, exo, "first\n")
    (wt_of(repo) / "work.txt").write_text("second, unsaved\n")
    done = ok(exo("complete", "w1", "--force", "--json"))
    assert done["worktree_removed"]
    assert refs(repo, "refs/exo/checkpoints/") == []
    archived = refs(repo, "refs/exo/archive/checkpoints/")
    assert len(archived) == 2  # the one taken by hand, and the last one before the removal
    assert any("refs/exo/archive/checkpoints/" in w for w in done["warnings"])
    assert [c["archived"] for c in listed(exo)] == [True, True]
    (repo / "exo.toml").write_text("[checkpoints]\nafter_complete_days = 0\n")
    assert cps.sweep(env_for(repo), force=True) == []  # never pruned
    assert len(refs(repo, "refs/exo/archive/checkpoints/")) == 2


def test_a_plain_complete_keeps_them_for_days_then_only_exos_refs_go(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    commit(wt_of(repo), "w.py", "w\n", "w1: w")
    git(repo, "update-ref", "refs/exo/mine", "HEAD")  # someone else's refs under refs/exo/
    git(repo, "branch", "keep-me", "main.w1")
    edit(repo, exo, "x\n")
    (wt_of(repo) / "work.txt").unlink()
    git(repo, "merge", "-q", "main.w1")
    ok(exo("complete", "w1", "--json"))
    env = env_for(repo)
    assert cps.sweep(env, force=True) == []  # completed just now: kept for after_complete_days
    assert len(refs(repo, "refs/exo/checkpoints/")) == 2
    (repo / "exo.toml").write_text("[checkpoints]\nafter_complete_days = 0\n")
    dropped = cps.sweep(env_for(repo), force=True)
    assert len(dropped) == 1 and refs(repo, "refs/exo/checkpoints/") == []
    assert not folder_of(repo).exists()
    assert refs(repo) == ["refs/exo/mine"] and git(repo, "rev-parse", "keep-me")


# --------------------------------------------------------------------------- retention


def test_retention_keeps_the_newest_turns_then_one_per_hour(repo: Path, exo: Exo) -> None:
    now = 10_000_000.0

    def c(n: int, age_hours: float) -> ckrefs.Listed:
        return ckrefs.Listed(n, f"refs/exo/checkpoints/k/{n}", "0" * 40, {"time": now - age_hours * 3600})

    history = [c(1, 300), c(2, 5.5), c(3, 5.2), c(4, 5.1), c(5, 2), c(6, 1), c(7, 0.5), c(8, 0)]
    drop = ckrefs.prune_plan(history, now=now, keep_turns=3, hourly_days=7)
    # 8, 7, 6 are the newest; 5 is its hour's; 4 is hour 5's newest, 3 and 2 share that hour; 1 is too old
    assert sorted(x.n for x in drop) == [1, 2, 3]
    assert sorted(x.n for x in ckrefs.prune_plan(history, now=now, keep_turns=3, hourly_days=0)) == [1, 2, 3, 4, 5]


def test_pruning_drops_refs_and_the_copies_only_they_kept(repo: Path, exo: Exo) -> None:
    (repo / "exo.toml").write_text("[checkpoints]\nkeep_turns = 2\nhourly_days = 0\n")
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore .env")
    make_agent(repo, "w1")
    for i in range(1, 6):
        (wt_of(repo) / ".env").write_text(f"SECRET={i}\n")
        edit(repo, exo, f"v{i}\n")
        if i == 4:  # pruned every min(10, keep_turns) checkpoints: at 3, then at 5
            assert [c["id"] for c in listed(exo)] == [4, 3, 2]
    assert [c["id"] for c in listed(exo)] == [5, 4]
    blobs = [p.read_bytes() for p in (folder_of(repo) / "blobs").rglob("*") if p.is_file()]
    assert sorted(blobs) == [b"SECRET=4\n", b"SECRET=5\n"]
    assert sorted(p.name for p in (folder_of(repo) / "ignored").iterdir()) == ["4.json", "5.json"]


# --------------------------------------------------------------------------- a name used again


def test_a_new_agent_of_a_reused_name_never_sees_the_old_ones_checkpoints(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    commit(wt_of(repo), "old.py", "old\n", "w1: old")
    edit(repo, exo, "the old w1's\n")
    (wt_of(repo) / "work.txt").write_text("the old w1's last words\n")
    ok(exo("complete", "w1", "--force", "--json"))
    from exo_cli.ops.history import retire

    env = env_for(repo)
    old = env.store.agent("w1")
    assert old is not None
    retired = retire(env, old)
    assert retired is not None
    make_agent(repo, "w1")
    assert listed(exo, "w1") == []
    edit(repo, exo, "the new w1's\n")
    assert [c["id"] for c in listed(exo, "w1")] == [1]
    assert [c["id"] for c in listed(exo, retired)] == [2, 1]


# --------------------------------------------------------------------------- what undo refuses, who may


def test_undo_refusals_and_exit_codes(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    edit(repo, exo, "one\n")
    (wt_of(repo) / "work.txt").write_text("two\n")
    assert exo("undo", "w1", "--to", "0").exit_code == 2
    assert exo("undo", "w1", "--to", "99", "--json").exit_code == 3
    assert exo("undo", "nobody", "--json").exit_code == 3
    assert exo("undo", "w1", "--to", "1", "--turns", "1", "--json").exit_code == 4
    assert exo("undo", "w1", "--files", "../outside", "--json").exit_code == 4
    assert exo("undo", "w1", "--to", "1", "--files", "no-such-file", "--json").exit_code == 4
    assert exo("undo", "w1", "--files").exit_code == 2
    env_for(repo).store.update_agent("w1", status="working")
    r = exo("undo", "w1", "--to", "1", "--json")
    assert r.exit_code == 5 and "middle of a turn" in r.json()["error"]["message"]  # type: ignore[index]
    assert (wt_of(repo) / "work.txt").read_text() == "two\n"  # nothing touched
    assert [c["id"] for c in listed(exo)] == [1]  # not even a checkpoint
    assert ok(exo("undo", "w1", "--to", "1", "--force", "--json"))["restored"] == 1
    assert (wt_of(repo) / "work.txt").read_text() == "one\n"


def test_undo_refuses_during_a_rebase(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    commit(wt_of(repo), "README.md", "# mine\n", "w1: readme")
    edit(repo, exo, "x\n")
    commit(repo, "README.md", "# theirs\n", "main: readme")
    subprocess_rebase = __import__("subprocess").run(["git", "rebase", "main"], cwd=wt_of(repo), capture_output=True)
    assert subprocess_rebase.returncode != 0
    r = exo("undo", "w1", "--to", "1", "--json")
    assert r.exit_code == 5 and "rebase" in r.json()["error"]["message"]  # type: ignore[index]


def test_roles_a_dev_lists_its_own_a_lead_undoes_its_descendants(repo: Path, exo: Exo) -> None:
    make_agent(repo, "tl1", role="tl")
    make_agent(repo, "w1", parent="tl1", base="main.tl1")
    make_agent(repo, "w2")
    edit(repo, exo, "w1's\n")
    edit(repo, exo, "w2's\n", name="w2")
    (wt_of(repo) / "work.txt").write_text("later\n")
    dev, lead = agent_vars(repo, "w1"), agent_vars(repo, "tl1")
    assert ok(exo("checkpoints", "--json", env=dev))["agent"] == "w1"  # its own, by default
    assert exo("checkpoints", "w2", "--json", env=dev).exit_code == 5
    r = exo("undo", "w1", "--to", "1", "--json", env=dev)
    assert r.exit_code == 5 and "dev role" in r.json()["error"]["message"]  # type: ignore[index]
    assert exo("undo", "w2", "--to", "1", "--json", env=lead).exit_code == 5  # not its descendant
    assert ok(exo("undo", "w1", "--to", "1", "--json", env=lead))["restored"] == 1
    with pytest.raises(StateError):
        registry.invoke("undo", env_for(repo, "w2"), agent="w2", to=1)


def test_the_agent_is_told_what_was_restored_at_its_next_turn(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    edit(repo, exo, "one\n")
    (wt_of(repo) / "work.txt").write_text("two\n")
    done = ok(exo("undo", "w1", "--json"))
    assert done["told"] and done["restored"] == 1 and done["saved"] == 2
    out = hook_json(run_hook(repo, "w1", "prompt", "claude", {"session_id": "s", "prompt": "go on"}))
    text = out["hookSpecificOutput"]["additionalContext"]
    assert "checkpoint 1" in text and "work.txt" in text and "checkpoint 2" in text


def test_diff_of_a_checkpoint_is_what_it_changed(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    edit(repo, exo, "one\n")
    edit(repo, exo, "one\ntwo\n")
    d = ok(exo("diff", "w1", "--checkpoint", "2", "--json"))
    assert [(f["path"], f["added"], f["deleted"]) for f in d["files"]] == [("work.txt", 1, 0)]
    assert (d["head"], d["base"]) == ("checkpoint 2", "checkpoint 1")
    first = ok(exo("diff", "w1", "--checkpoint", "1", "--stat", "--json"))
    assert [f["path"] for f in first["files"]] == ["work.txt"] and first["patch"] is None
    assert exo("diff", "w1", "--checkpoint", "7", "--json").exit_code == 3
    assert listed(exo)[0]["files"] == 1 and listed(exo)[0]["added"] == 1


def test_disabled_checkpoints_are_not_taken_but_undo_still_saves_the_present(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    edit(repo, exo, "one\n")
    (repo / "exo.toml").write_text("[checkpoints]\nenabled = false\n")
    skipped = edit(repo, exo, "two\n")
    assert not skipped["taken"] and skipped["checkpoint"] is None and "enabled" in skipped["skipped"]
    done = ok(exo("undo", "w1", "--to", "1", "--json"))
    assert done["saved"] == 2 and (wt_of(repo) / "work.txt").read_text() == "one\n"


def test_the_humans_own_checkout_is_never_checkpointed(repo: Path, exo: Exo) -> None:
    env = env_for(repo)
    now = time.time()
    from exo_cli.records import Agent

    env.store.insert_agent(Agent(id="inplace", name="inplace", role="dev", parent="root", status="idle",
                                 backend="demo", mux="headless", worktree=str(repo), branch="main",
                                 created_at=now, updated_at=now, status_at=now, spec={"worktree_created": False}))
    r = ok(exo("checkpoint", "inplace", "--json"))
    assert r["checkpoint"] is None and "human's checkout" in r["skipped"]
    hook_json(run_hook(repo, "inplace", "stop", "claude", STOP))
    assert refs(repo) == []
    assert exo("undo", "inplace", "--json").exit_code == 5


def test_the_boards_undo_key_restores_the_selected_agents_last_turn(repo: Path, exo: Exo) -> None:
    import asyncio

    from test_board_tui import screen_text, until

    from exo_cli.render.tui import AskScreen, BoardApp

    make_agent(repo, "w1")
    edit(repo, exo, "before the turn\n")
    (wt_of(repo) / "work.txt").write_text("the turn's damage\n")

    async def scenario() -> None:
        app = BoardApp(env_for(repo), fallback=5.0)
        async with app.run_test(size=(120, 30), notifications=True) as pilot:
            await until(pilot, lambda: app.query_one("#agents").row_count > 0 and "w1" in screen_text(app),
                        what="the agents")
            table = app.query_one("#agents")
            table.move_cursor(row=table.get_row_index("w1"))
            await pilot.press("u")
            await until(pilot, lambda: isinstance(app.screen, AskScreen), what="the confirmation")
            assert "Undo w1's last turn" in screen_text(app)
            await pilot.press("y")
            await until(pilot, lambda: "checkpoint 1 restored" in screen_text(app), what="the undo")
            await pilot.press("q")
        assert getattr(app, "failure", None) is None

    asyncio.run(scenario())
    assert (wt_of(repo) / "work.txt").read_text() == "before the turn\n"
    assert [c["reason"] for c in listed(exo)] == ["undo", "manual"]


# --------------------------------------------------------------------------- kill -9, a hostile checkout


@pytest.mark.parametrize("point", ["checkpoint.updated", "checkpoint.committed", "checkpoint.ref"])
def test_a_checkpoint_killed_at_each_step_is_made_whole_by_the_next(repo: Path, exo: Exo, point: str) -> None:
    from conftest import run_exo

    make_agent(repo, "w1")
    edit(repo, exo, "one\n")
    (wt_of(repo) / "work.txt").write_text("two\n")
    r = run_exo("checkpoint", "w1", "--json", cwd=repo, env={"EXO_FAULT": point})
    assert r.returncode == 137, r.stdout + r.stderr
    again = ok(exo("checkpoint", "w1", "--json"))
    c = again["checkpoint"]
    assert git(repo, "show", f"{c['commit']}:work.txt") == "two"
    (wt_of(repo) / "work.txt").write_text("three\n")
    ok(exo("undo", "w1", "--to", str(c["id"]), "--json"))
    assert (wt_of(repo) / "work.txt").read_text() == "two\n"


@pytest.mark.parametrize("point", ["undo.saved", "undo.files"])
def test_an_undo_killed_midway_loses_nothing(repo: Path, exo: Exo, point: str) -> None:
    from conftest import run_exo

    make_agent(repo, "w1")
    commit(wt_of(repo), "a.py", "a\n", "w1: a")
    edit(repo, exo, "one\n")
    git(wt_of(repo), "reset", "-q", "--hard", "HEAD~1")
    (wt_of(repo) / "work.txt").write_text("the present\n")
    r = run_exo("undo", "w1", "--to", "1", "--json", cwd=repo, env={"EXO_FAULT": point})
    assert r.returncode == 137
    [saved] = [c for c in listed(exo) if c["reason"] == "undo"]
    assert git(repo, "show", f"{saved['commit']}:work.txt") == "the present"
    reset = git(wt_of(repo), "rev-parse", "HEAD")
    ok(exo("undo", "w1", "--to", "1", "--json"))  # run again: finished
    assert (wt_of(repo) / "work.txt").read_text() == "one\n" and (wt_of(repo) / "a.py").exists()
    ok(exo("undo", "w1", "--to", str(saved["id"]), "--json"))  # and the present before the first one is back
    assert (wt_of(repo) / "work.txt").read_text() == "the present\n" and not (wt_of(repo) / "a.py").exists()
    assert git(wt_of(repo), "rev-parse", "HEAD") == reset


def test_a_checkout_whose_git_file_points_at_the_main_repository_is_refused(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    edit(repo, exo, "one\n")
    (wt_of(repo) / ".git").write_text(f"gitdir: {repo / '.git'}\n")  # the agent re-points its checkout
    head, index = git(repo, "rev-parse", "HEAD"), (repo / ".git" / "index").read_bytes()
    r = exo("checkpoint", "w1", "--json")
    assert r.exit_code == 5 and "not a worktree" in r.json()["error"]["message"]  # type: ignore[index]
    assert exo("undo", "w1", "--to", "1", "--json").exit_code == 5
    assert git(repo, "rev-parse", "HEAD") == head and (repo / ".git" / "index").read_bytes() == index


def test_with_checkpoints_disabled_the_stop_hook_stops_marking_turns(repo: Path, exo: Exo) -> None:
    make_agent(repo, "w1")
    (repo / "exo.toml").write_text("[checkpoints]\nenabled = false\n")
    assert "checkpoint-due" not in (hook_json(run_hook(repo, "w1", "stop", "claude", STOP)) or {})
    wait_for(lambda: not (folder_of(repo) / "due").exists(), timeout=90, what="the helper to find them off")
    env = env_for(repo)
    from exo_cli.ops import turnend

    rec = env.store.agent("w1")
    assert rec is not None and turnend.switched_off(env, rec)
    assert not turnend.mark_due(env, rec, turn=5)  # no background process per turn while they are off
    (repo / "exo.toml").write_text("[checkpoints]\nenabled = true\n")
    assert not turnend.switched_off(env, rec) and turnend.mark_due(env, rec, turn=5)


def test_deinit_force_keeps_the_checkpoints_and_their_ignored_files(repo: Path, exo: Exo) -> None:
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore .env")
    make_agent(repo, "w1")
    (wt_of(repo) / ".env").write_text("TOKEN=kept-by-deinit\n")
    c = edit(repo, exo, "work\n")["checkpoint"]
    key = folder_of(repo).name
    refused = exo("deinit", "--json")
    assert refused.exit_code == 5 and "checkpoints" in refused.json()["error"]["data"]["holds"]  # type: ignore[index]
    done = ok(exo("deinit", "--force", "--json"))
    assert not (repo / ".git" / "exo").exists()
    assert git(repo, "rev-parse", c["ref"]) == c["commit"]  # the refs stay
    kept = repo / ".git" / "exo-archive" / "checkpoints" / key / "blobs"
    assert any(p.read_bytes() == b"TOKEN=kept-by-deinit\n" for p in kept.rglob("*") if p.is_file()), done
