"""What exo says is plain words: no ``None``, no ``*``, no internal value standing in for a sentence.

Each case is a message a new user met in their first hour, checked word for word: the summary of
``exo complete``, spawning in a repository with no commit yet, ``--mux zellij`` without Zellij,
``exo pr file`` on the main branch, and how a message reached its recipient.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import Exo, git, stop_repo_agents
from exo_cli.ops.complete import CompleteResult


def _result(**kw: object) -> CompleteResult:
    base: dict[str, object] = dict(agent="w1", bead=None, bead_closed=False, stopped=True, status="done",
                                   worktree="/r/.exo/worktrees/w1", branch="main.w1", removal="removed",
                                   worktree_removed=True, branch_deleted=True)
    return CompleteResult(**{**base, **kw})  # type: ignore[arg-type]


def test_complete_outcome_in_words() -> None:
    assert _result().outcome() == "agent stopped, worktree removed, branch deleted"
    assert _result(bead="bd-4hj", bead_closed=True, stopped=False).outcome() == (
        "bead bd-4hj closed, agent was not running, worktree removed, branch deleted")
    assert _result(bead="bd-4hj", bead_closed=False, removal="kept", worktree_removed=False,
                   branch_deleted=False).outcome() == (
        "bead bd-4hj left open, agent stopped, worktree kept, branch kept")
    assert _result(removal="deferred", stopped=False, worktree_removed=False, branch_deleted=False).outcome() == (
        "marked done; its parent removes its worktree and branch once its session has ended")
    assert _result(agent=None, bead="bd-9", bead_closed=True, worktree=None, branch=None, removal="none",
                   worktree_removed=False, branch_deleted=False).outcome() == "bead bd-9 closed, no agent worked on it"


def test_complete_says_what_it_did(sleepers: Path) -> None:
    exo = Exo(sleepers)
    assert exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless").exit_code == 0
    r = exo("complete", "w1")
    assert r.exit_code == 0, r.stderr
    wt = sleepers / ".exo" / "worktrees" / "w1"
    assert r.stdout.splitlines()[:3] == [
        "Completed w1: agent stopped, worktree removed, branch deleted.",
        f"Removed worktree {wt}",
        "Deleted branch main.w1",
    ]


def test_spawn_in_a_repository_with_no_commit(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    r = Exo(repo)("spawn", "--worker", "w1", "--prompt", "x", "--agent", "demo", "--mux", "headless")
    assert r.exit_code == 5
    assert r.stdout == "0 of 1 task(s) spawned; failed: w1\n"
    assert r.stderr == (
        "Error: w1: Branch main has no commit yet, and an agent's worktree starts from a commit\n"
        "Hint: Make a first commit (git commit --allow-empty -m 'Initial commit'), then spawn again; "
        "or spawn with --no-worktree.\n")
    stop_repo_agents(repo, tmux=False)


def test_spawn_from_a_configured_base_that_is_no_commit(repo: Path) -> None:
    (repo / "exo.toml").write_text('[worktree]\nbase = "nowhere"\n')
    r = Exo(repo)("spawn", "--worker", "w1", "--prompt", "x", "--agent", "demo", "--mux", "headless", "--json")
    assert r.exit_code == 5
    err = r.json()["errors"][0]  # type: ignore[index]
    assert (err["message"], err["hint"]) == (
        "The base nowhere does not name a commit",
        "Pass an existing branch or commit with --from, or fix worktree.base in exo.toml.")


def _path_without(program: str, tmp_path: Path, *, fake: bool) -> str:
    """PATH with every folder holding ``program`` dropped (and a stand-in that does nothing, with ``fake``)."""
    folders = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / program).exists()]
    if fake:
        bindir = tmp_path / "fakebin"
        bindir.mkdir()
        (bindir / program).write_text("#!/bin/sh\nexit 0\n")
        (bindir / program).chmod(0o755)
        folders.insert(0, str(bindir))
    return os.pathsep.join(folders)


@pytest.mark.parametrize("installed", [False, True], ids=["not-installed", "outside-a-session"])
def test_mux_zellij_without_zellij(repo: Path, tmp_path: Path, installed: bool) -> None:
    path = _path_without("zellij", tmp_path, fake=installed)
    args = ("spawn", "--worker", "z1", "--prompt", "x", "--agent", "demo", "--mux", "zellij")
    if installed:
        message = ("exo is not running inside a Zellij session: --mux zellij opens agents as tabs of the session "
                   "it runs in")
        hint = "Start zellij and run exo from one of its panes, or use --mux tmux or --mux headless."
    else:
        message = "Zellij is not installed (zellij is not on PATH)"
        hint = "Install Zellij, or use --mux tmux or --mux headless."
    r = Exo(repo)(*args, env={"PATH": path})
    assert (r.exit_code, r.stdout, r.stderr) == (7, "Nothing spawned.\n", f"Error: {message}\nHint: {hint}\n")
    res = json.loads(Exo(repo)(*args, "--json", env={"PATH": path}).stdout)
    assert res["failed"] == [["*", message]]  # the JSON keeps its shape: "*" is the whole call
    assert not (repo / ".exo" / "worktrees" / "z1").exists()


def test_pr_file_on_the_main_branch(repo: Path) -> None:
    r = Exo(repo)("pr", "file")
    assert r.exit_code == 5
    assert r.stderr == (
        "Error: main is the main branch: there is no branch above it to merge it into\n"
        "Hint: Work on a task branch (spawn an agent, or git switch -c NAME) and file from there; if main does "
        "merge into another branch, set worktree.base in exo.toml.\n")
    (repo / "exo.toml").write_text('[worktree]\nbase = "main"\n')
    r = Exo(repo)("pr", "file")
    assert r.exit_code == 5
    assert r.stderr == (
        "Error: main is the base branch itself: a pull request goes from a task branch into it\n"
        "Hint: Work on a task branch (spawn an agent, or git switch -c NAME) and file from there.\n")


def test_note_and_send_say_how_the_message_travels() -> None:
    import io

    from exo_cli.commands.messages import render_note, render_send
    from exo_cli.ops.messages import NoteResult, Posted, SendResult
    from exo_cli.render.text import Out

    stream = io.StringIO()
    out = Out(stream, rich_ok=False)
    render_note(out, NoteResult(to="root", to_name="root", message_id=3, delivery="queued"))
    render_send(out, SendResult(sent=[Posted(agent_id="w1", name="w1", message_id=4, delivery="typed")]))
    assert stream.getvalue().splitlines() == ["Noted to root (message #3, queued for its next turn or `exo wait`).",
                                              "Sent to w1 (message #4, typed into its pane)."]


def test_host_call_from_an_exo_without_a_protocol(repo: Path) -> None:
    from exo_cli.ops.hostcall import answer

    reply, code = answer(json.dumps({"op": "status", "args": {}}), cwd=str(repo), environ=dict(os.environ))
    assert code == 5
    assert reply["error"]["message"].endswith("speaks host protocol 1, the caller no protocol version exo knows")
