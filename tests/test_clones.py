"""Agents in their own ``git clone --shared`` (``spawn --layout clone``), read by exo as hostile.

Real repositories, real clones, real headless agents (a sleeping process), exo in-process. The
attack test plants in a clone everything git would run from its config (fsmonitor, every hook,
a filter and a textconv driver named by ``.gitattributes``, ``include.path``, a credential
helper, ``core.sshCommand``), then runs every operation that reads the clone: none may run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pr_helpers import env_for

from conftest import ROOT, Exo, git, stop_repo_agents, trust
from exo_cli import registry
from exo_cli.env import Env
from exo_cli.errors import StateError

BEADS = Path(__file__).parent / "fixtures" / "beads" / "small"

HOOKS = ("pre-commit", "post-commit", "post-checkout", "post-merge", "pre-push", "pre-rebase", "post-rewrite",
         "reference-transaction", "post-index-change", "pre-auto-gc", "pre-receive", "post-receive", "update",
         "post-update", "push-to-checkout", "fsmonitor-watchman", "prepare-commit-msg", "commit-msg")


@pytest.fixture
def team(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The repository with a custom agent that sleeps (exo is the only one touching the clones here)."""
    (repo / "exo.toml").write_text(f'[agent]\ncommand = [{json.dumps(sys.executable)}, "-c", '
                                   '"import time; time.sleep(600)", "{prompt}"]\n')
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-q", "-m", "exo.toml")
    trust(repo)  # the user's own team settings
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield repo
    stop_repo_agents(repo, tmux=False)


def spawn_clone(exo: Exo, *names: str, extra: tuple[str, ...] = ()) -> dict:
    args = [a for n in names for a in ("--worker", n)]
    r = exo("spawn", *args, "--prompt", "work", "--agent", "custom", "--mux", "headless", "--layout", "clone",
            *extra, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def commit_in(clone: Path, name: str, text: str, msg: str) -> str:
    (clone / name).parent.mkdir(parents=True, exist_ok=True)
    (clone / name).write_text(text)
    git(clone, "add", name)
    git(clone, "commit", "-q", "-m", msg)
    return git(clone, "rev-parse", "HEAD")


def test_spawn_into_a_shared_clone_shown_and_kept_by_refs(team: Path, exo: Exo) -> None:
    git(team, "gc", "-q")  # one pack: a plain local clone would hard-link it
    packs = sorted((team / ".git" / "objects" / "pack").glob("*.pack"))
    (team / ".exo").mkdir(exist_ok=True)
    (team / ".exo" / "config.toml").write_text('[worktree]\npost_create = ["touch", "post-created"]\n'
                                               '[services.web]\ncommand = "serve $PORT"\nport = 8100\n')
    data = spawn_clone(exo, "w1")
    assert data["agents"][0]["layout"] == "clone"
    clone = Path(data["worktrees"][0][1])
    assert (clone / ".git").is_dir() and not (clone / ".git").is_symlink()
    alternates = (clone / ".git" / "objects" / "info" / "alternates").read_text().split()
    assert alternates == [str(team / ".git" / "objects")]
    assert all(p.stat().st_nlink == 1 for p in packs)  # --shared: nothing of the repository's is linked
    assert not list((clone / ".git" / "objects" / "pack").glob("*.pack"))
    assert git(clone, "branch", "--show-current") == "main.w1"
    assert git(team, "rev-parse", "refs/exo/clones/w1/base") == git(team, "rev-parse", "main")
    assert git(team, "rev-parse", "refs/heads/main.w1") == git(team, "rev-parse", "main")
    assert "/.exo/" in (clone / ".git" / "info" / "exclude").read_text()
    assert (clone / "post-created").is_file()  # the post-create command ran in the clone
    services = (clone / ".exo" / "process-compose.yaml").read_text()  # its services run there, on its own ports
    assert f"working_dir: {clone}" in services and "WEB_PORT=" in services, services
    human = Exo(clone)("agents", "--json")  # a human's exo inside the clone: the team, no state made there
    assert human.exit_code == 0 and [a["id"] for a in human.json()["agents"]] == ["w1"]  # type: ignore[index]
    assert not (clone / ".git" / "exo").exists()
    listed = exo("agents", "--json").json()
    assert [(a["id"], a["layout"]) for a in listed["agents"]] == [("w1", "clone")]  # type: ignore[index]
    text = exo("agents").stdout
    assert "LAYOUT" in text and "clone" in text
    # a layout that cannot be, or is unknown
    r = exo("spawn", "--worker", "w2", "--prompt", "x", "--layout", "clone", "--no-worktree", "--json")
    assert r.exit_code == 2 and "--no-worktree" in r.stdout
    r = exo("spawn", "--worker", "w2", "--prompt", "x", "--layout", "elsewhere")
    assert r.exit_code == 2
    (team / ".exo").mkdir(exist_ok=True)
    (team / ".exo" / "config.toml").write_text('[worktree]\nlayout = "box"\n')
    r = exo("agents", "--json")
    assert r.exit_code == 4 and "worktree.layout" in r.stdout


def plant(clone: Path, marks: Path) -> None:
    """Everything git would run from a clone's own configuration and files, each leaving a marker."""
    def cmd(name: str) -> str:
        return f"touch {marks / name}; false"

    hooks = clone / ".git" / "evil-hooks"
    hooks.mkdir()
    for name in HOOKS:
        for folder in (hooks, clone / ".git" / "hooks"):
            h = folder / name
            h.write_text(f"#!/bin/sh\ntouch {marks / ('hook-' + name)}\n")
            h.chmod(0o755)
    included = clone / ".git" / "included.cfg"
    included.write_text(f'[core]\n\tpager = {cmd("pager")}\n[alias]\n\tstatus = !{cmd("alias")}\n'
                        f'[core]\n\tfsmonitor = {cmd("fsmonitor-included")}\n')
    with open(clone / ".git" / "config", "a") as fh:
        fh.write(f'[core]\n\tfsmonitor = "{cmd("fsmonitor")}"\n\thooksPath = {hooks}\n'
                 f'\tsshCommand = "{cmd("ssh")}"\n\tattributesFile = {clone / ".git" / "attrs"}\n'
                 f'[filter "evil"]\n\tclean = "{cmd("clean")}"\n\tsmudge = "{cmd("smudge")}"\n'
                 f'\tprocess = "{cmd("process")}"\n\trequired = true\n'
                 f'[diff "evil"]\n\ttextconv = "{cmd("textconv")}"\n\tcommand = "{cmd("extdiff")}"\n'
                 f'[credential]\n\thelper = "!{cmd("credential")}"\n[include]\n\tpath = {included}\n'
                 f'[uploadpack]\n\tpackObjectsHook = "{cmd("packobjects")}"\n')
    (clone / ".git" / "attrs").write_text("* filter=evil diff=evil\n")
    (clone / ".gitattributes").write_text("* filter=evil diff=evil\n")


def test_a_hostile_clone_runs_nothing_of_its_own(team: Path, exo: Exo, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    (team / ".beads").mkdir()
    shutil.copyfile(BEADS / "issues.jsonl", team / ".beads" / "issues.jsonl")
    shutil.copyfile(BEADS / "config.yaml", team / ".beads" / "config.yaml")
    git(team, "add", ".beads")
    git(team, "commit", "-q", "-m", "beads")
    data = spawn_clone(exo, "w1")
    clone = Path(data["worktrees"][0][1])
    Env(cwd=team).store.update_agent("w1", bead="ex-a1")  # reconstitute rewrites its bead's context
    commit_in(clone, "src/app.py", "print('w1')\n", "w1: app")
    plant(clone, marks)
    (clone / "src" / "app.py").write_text("print('changed')\n")  # uncommitted: status, checkpoints, complete see it
    (clone / "notes.txt").write_text("untracked\n")
    main_ref = clone / ".git" / "refs" / "heads" / "main"
    main_ref.unlink(missing_ok=True)
    os.mkfifo(main_ref)  # whoever opens it to read waits for a writer: exo never opens the clone's files so
    assert "rebase:" not in " ".join(stop(clone, "w1")["actions"])  # its stop: the work fetched, nothing ran
    steps: dict[str, tuple[int, str]] = {}

    def run(label: str, *args: str) -> None:
        r = exo(*args)
        steps[label] = (r.exit_code, r.stdout + r.stderr)

    run("status", "status", "w1", "--json")
    run("diff", "diff", "w1", "--json")
    run("conflicts", "conflicts", "w1", "--check", "--json")
    run("checkpoint", "checkpoint", "w1", "--json")
    (clone / "src" / "app.py").write_text("print('changed again')\n")
    run("undo", "undo", "w1", "--force", "--json")
    assert (clone / "src" / "app.py").read_text() == "print('changed')\n", steps["undo"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (clone / ".exo").rename(tmp_path / "exo-folder")
    (clone / ".exo").symlink_to(outside)  # exo's own folder in the clone, now a link out of it
    with pytest.raises(StateError, match="never writes through a link|a link"):
        registry.invoke("reconstitute", env_for(clone, "w1"))
    assert list(outside.iterdir()) == []
    (clone / ".exo").unlink()
    (tmp_path / "exo-folder").rename(clone / ".exo")
    filed = registry.invoke("pr_file", env_for(clone, "w1"), title="w1 work")
    run("pr-show", "pr", "show", str(filed.pr.number), "--diff", "--json")
    run("pr-merge", "pr", "merge", str(filed.pr.number), "--json")
    run("doctor", "doctor", "--dry-run", "--json")
    run("complete", "complete", "w1", "--json")  # refused: uncommitted work (after undo's restore)
    run("complete-force", "complete", "w1", "--force", "--json")
    assert sorted(p.name for p in marks.iterdir()) == [], steps
    assert steps["status"][0] == 0, steps["status"]
    status = json.loads(steps["status"][1])
    assert status["git"]["branch"] == "main.w1" and " M src/app.py" in status["git"]["dirty"]
    assert steps["checkpoint"][0] == 0 and steps["undo"][0] == 0, (steps["checkpoint"], steps["undo"])
    assert steps["pr-merge"][0] == 0, steps["pr-merge"]
    assert "src/app.py" in git(team, "ls-tree", "-r", "--name-only", "main")
    assert steps["complete"][0] == 5 and "uncommitted" in steps["complete"][1], steps["complete"]
    assert steps["complete-force"][0] == 0, steps["complete-force"]
    assert not clone.exists()
    assert git(team, "for-each-ref", "refs/exo/clones/") == ""
    assert git(team, "fsck", "--no-dangling") == ""


def test_a_rewritten_dot_git_is_refused_and_runs_nothing(team: Path, exo: Exo, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    data = spawn_clone(exo, "w1")
    clone = Path(data["worktrees"][0][1])
    fake = tmp_path / "fake.git"
    subprocess.run(["git", "init", "-q", "--bare", str(fake)], check=True)
    with open(fake / "config", "a") as fh:
        fh.write(f'[core]\n\tfsmonitor = "touch {marks / "fsmonitor"}; false"\n\tbare = false\n'
                 f'\tworktree = {clone}\n')
    os.rename(clone / ".git", tmp_path / "moved.git")
    (clone / ".git").write_text(f"gitdir: {fake}\n")
    for args in (("status", "w1", "--json"), ("diff", "w1", "--json"), ("checkpoint", "w1", "--json"),
                 ("complete", "w1", "--force", "--json")):
        r = exo(*args)
        assert r.exit_code in (0, 5, 6), (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
    assert list(marks.iterdir()) == []
    assert exo("status", "w1", "--json").exit_code == 5


def test_gc_never_breaks_a_clone_and_complete_keeps_what_only_it_has(team: Path, exo: Exo) -> None:
    data = spawn_clone(exo, "w1")
    clone = Path(data["worktrees"][0][1])
    git(team, "branch", "side", "main")
    side = git(team, "rev-parse", "side")
    git(team, "worktree", "add", "-q", str(team.parent / "side-wt"), "side")
    commit_in(team.parent / "side-wt", "side.txt", "side\n", "side work")
    git(team.parent / "side-wt", "checkout", "-q", "--detach")
    git(clone, "fetch", "-q", "origin")
    git(clone, "merge", "-q", "--no-edit", "origin/side")  # the clone has side's commit through its alternates
    git(clone, "branch", "keepme", "HEAD")
    commit_in(clone, "only.txt", "only in the clone\n", "only here")
    git(clone, "tag", "v-clone")
    (clone / "stashed.txt").write_text("stashed\n")
    git(clone, "add", "stashed.txt")
    git(clone, "stash", "-q")
    git(clone, "checkout", "-q", "keepme")
    commit_in(clone, "keep.txt", "keep\n", "on keepme")
    git(clone, "checkout", "-q", "main.w1")
    assert exo("status", "w1").exit_code == 0  # a stop's fetch: every commit it reaches has a ref in the repository
    git(team, "worktree", "remove", "--force", str(team.parent / "side-wt"))
    git(team, "branch", "-D", "side")
    git(team, "reflog", "expire", "--expire=now", "--all")
    git(team, "gc", "-q", "--prune=now")
    assert git(clone, "fsck", "--no-dangling") == ""
    assert "side work" in git(clone, "log", "--format=%s")
    assert side  # the sibling branch it merged is gone from the repository, its commits are not
    r = exo("complete", "w1", "--json")
    assert r.exit_code == 5, r.stdout
    lost = r.json()["error"]["data"]["would_lose"]  # type: ignore[index]
    text = json.dumps(lost)
    assert "on keepme" in text and "WIP on main.w1" in text and "only here" in text, text  # a branch, the stash
    r = exo("complete", "w1", "--force", "--json")
    assert r.exit_code == 0, r.stdout
    archived = r.json()["archived"]  # type: ignore[index]
    kept = {git(team, "log", "-1", "--format=%s", ref) for ref in archived}
    assert {"on keepme", "only here"} <= kept and any(k.startswith("WIP on main.w1") for k in kept), kept
    assert git(team, "fsck", "--no-dangling") == ""
    assert not clone.exists() and git(team, "for-each-ref", "refs/exo/clones/") == ""
    for cmd in r.json()["restore"]:  # type: ignore[index]  # the archive's commands bring it back as a clone
        done = subprocess.run(shlex.split(cmd), cwd=team, capture_output=True, text=True)
        assert done.returncode == 0, (cmd, done.stderr)
    assert (clone / ".git" / "objects" / "info" / "alternates").is_file(), "restored as a worktree, not a clone"
    assert (clone / "only.txt").read_text() == "only in the clone\n"


def test_a_branch_is_only_fast_forwarded_from_a_clone(team: Path, exo: Exo) -> None:
    data = spawn_clone(exo, "w1")
    clone = Path(data["worktrees"][0][1])
    first = commit_in(clone, "a.txt", "a\n", "first")
    assert exo("status", "w1").exit_code == 0
    assert git(team, "rev-parse", "main.w1") == first  # fast-forwarded
    git(team, "branch", "-f", "tmp", "main.w1")
    wt = team.parent / "mover"
    git(team, "worktree", "add", "-q", str(wt), "main.w1")
    moved = commit_in(wt, "b.txt", "b\n", "landed in the repository")  # a merge into its branch, say
    git(team, "worktree", "remove", str(wt))
    mine = commit_in(clone, "c.txt", "c\n", "clone goes on")
    assert exo("status", "w1").exit_code == 0
    assert git(team, "rev-parse", "main.w1") == moved  # never forced
    assert git(team, "rev-parse", "refs/exo/clones/w1/heads/main.w1") == mine
    with pytest.raises(Exception, match="moved apart") as err:
        registry.invoke("pr_file", env_for(clone, "w1"), title="x")
    assert getattr(err.value, "exit_code", None) == 5
    git(clone, "fetch", "-q", "origin")
    git(clone, "rebase", "-q", "origin/main.w1")  # the agent's side: fetch from the repository, then rebase
    assert registry.invoke("pr_file", env_for(clone, "w1"), title="x").pr.head == "main.w1"
    assert git(team, "rev-parse", "main.w1") == git(clone, "rev-parse", "HEAD")


def stop(clone: Path, agent: str) -> dict:
    """The agent's stop hook, run in its clone as its CLI runs it (the agent's side: no socket here)."""
    from conftest import agent_vars

    r = Exo(clone)("hook", "stop", "--cli", "claude", "--json", input="{}", env=agent_vars(clone, agent))
    assert r.exit_code == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_a_lead_and_two_workers_in_clones_merge_into_main(team: Path, exo: Exo) -> None:
    r = exo("spawn", "--subtree", "--task", "lead the work", "--branch", "lead", "--agent", "custom", "--mux",
            "headless", "--layout", "clone", "--json")
    assert r.exit_code == 0, r.stdout
    lead = Path(r.json()["worktrees"][0][1])  # type: ignore[index]
    commit_in(lead, "plan.md", "plan\n", "lead: plan")
    as_lead = env_for(lead, "lead")
    assert as_lead.repo.root == team and as_lead.state_dir == team / ".git" / "exo"  # the team, not the clone's
    spawned = registry.invoke("spawn", as_lead, worker=["w1", "w2"], prompt=["one", "two"], agent="custom",
                              mux="headless", layout="clone")
    assert not spawned.errors, spawned.errors
    clones = dict(spawned.worktrees)
    assert git(team, "rev-parse", "main.lead") == git(lead, "rev-parse", "HEAD")  # its plan reached its children
    for name in ("w1", "w2"):
        wc = Path(clones[name])
        assert (wc / "plan.md").is_file() and git(wc, "branch", "--show-current") == f"main.lead.{name}"
        commit_in(wc, f"{name}.txt", f"{name}\n", f"{name}: work")
        pr = registry.invoke("pr_file", env_for(wc, name), title=f"{name} work").pr
        merged = registry.invoke("pr_merge", as_lead, number=pr.number)
        assert merged.pr.state == "merged", merged
    assert not (lead / ".git" / "exo").exists()  # nothing of exo's state in the clone
    commit_in(lead, "notes.md", "lead notes\n", "lead: notes")  # it worked on meanwhile
    out = stop(lead, "lead")  # merges into its branch reach the clone: rebased there, by its own side
    assert any(a.startswith("rebase-here:") for a in out["actions"]), out
    assert (lead / "w1.txt").is_file() and (lead / "w2.txt").is_file()
    assert git(lead, "log", "-1", "--format=%s") == "lead: notes"
    stop(lead, "lead")  # the next stop fast-forwards the repository's branch to the clone's
    assert git(team, "rev-parse", "main.lead") == git(lead, "rev-parse", "HEAD")
    pr = registry.invoke("pr_file", as_lead, title="lead's work").pr
    assert exo("pr", "merge", str(pr.number), "--json").exit_code == 0
    files = git(team, "ls-tree", "--name-only", "main").split()
    assert {"plan.md", "notes.md", "w1.txt", "w2.txt"} <= set(files)


def test_doctor_removes_a_clean_orphan_clone_keeps_one_with_work_and_drops_stale_refs(team: Path, exo: Exo) -> None:
    data = spawn_clone(exo, "w1", "w2")
    paths = dict(data["worktrees"])
    commit_in(Path(paths["w2"]), "mine.txt", "only here\n", "w2: only here")
    assert exo("kill", "w1").exit_code == 0 and exo("kill", "w2").exit_code == 0
    env = Env(cwd=team)
    for name in ("w1", "w2"):
        env.store.delete_agent(name)  # records lost
    git(team, "update-ref", "refs/exo/clones/ghost/base", "main")
    r = exo("doctor", "--json")
    found = {(p["kind"], p["subject"]): p for p in r.json()["problems"]}  # type: ignore[index]
    assert ("orphan-clone", paths["w1"]) in found, r.stdout
    assert found[("orphan-clone", paths["w1"])]["repaired"], r.stdout
    assert not Path(paths["w1"]).exists()
    w2 = found[("orphan-clone", paths["w2"])]
    assert not w2["repaired"] and "left alone" in w2["action"], w2
    assert Path(paths["w2"], "mine.txt").is_file()
    assert ("stale-clone-refs", "refs/exo/clones/ghost/") not in found  # an orphan clone is there: kept
    assert git(team, "for-each-ref", "--format=%(refname)", "refs/exo/clones/w2/")  # w2's work stays kept
    shutil.rmtree(paths["w2"])
    r = exo("doctor", "--json")
    kinds = {(p["kind"], p["subject"]) for p in r.json()["problems"]}  # type: ignore[index]
    for gone in ("ghost", "w1", "w2"):
        assert ("stale-clone-refs", f"refs/exo/clones/{gone}/") in kinds, kinds
    assert git(team, "for-each-ref", "refs/exo/clones/") == ""


def test_doctor_removes_a_reaped_agents_clean_clone_and_keeps_one_with_work(team: Path, exo: Exo) -> None:
    """A reaped agent's clone is handled as its worktree is: clean (what exo copied in is no work) it is removed,
    its branch kept; with work it is kept for the human, reported as no problem."""
    (team / ".env").write_text("SECRET=local\n")  # copied into each new checkout (worktree.copy)
    (team / ".exo").mkdir(exist_ok=True)
    (team / ".exo" / "config.toml").write_text('[worktree]\ncopy = [".env"]\n')  # the user's own local file
    paths = dict(spawn_clone(exo, "c1", "c2")["worktrees"])
    assert (Path(paths["c1"]) / ".env").is_file()
    (Path(paths["c2"]) / "draft.txt").write_text("unfinished\n")
    assert exo("kill", "c1").exit_code == 0 and exo("kill", "c2").exit_code == 0
    assert sorted(exo("reap", "--json").json()["reaped"]) == ["c1", "c2"]  # type: ignore[index]
    r = exo("doctor", "--json")
    doc = r.json()
    assert [(p["kind"], p["subject"], p["repaired"]) for p in doc["problems"]] == [  # type: ignore[index]
        ("reaped-worktree", paths["c1"], True)], r.stdout
    assert doc["kept"] == [paths["c2"]] and not Path(paths["c1"]).exists()  # type: ignore[index]
    assert (Path(paths["c2"]) / "draft.txt").is_file() and "main.c1" in git(team, "branch", "--list")
    again = exo("doctor", "--json")
    assert again.exit_code == 0 and again.json()["problems"] == [], again.stdout  # type: ignore[index]


@pytest.mark.parametrize("lost", ["record", "reaped"])
def test_doctor_keeps_a_clone_whose_commits_only_exos_clone_refs_hold(team: Path, exo: Exo, lost: str) -> None:
    """Commits the repository's branch cannot take (the clone rewrote what was fetched) are reached only by
    refs/exo/clones/<id>/, which go with the clone: that is no keeping. Its record lost or the agent reaped,
    doctor leaves the clone and those refs alone (removing both lost the commits)."""
    clone = Path(dict(spawn_clone(exo, "w1")["worktrees"])["w1"])
    commit_in(clone, "a.txt", "first\n", "w1: first")
    assert exo("diff", "w1", "--json").exit_code == 0  # fetched in, and the repository's branch fast-forwarded
    assert git(team, "rev-parse", "main.w1") == git(clone, "rev-parse", "HEAD")
    git(clone, "reset", "-q", "--hard", "HEAD~1")
    commit_in(clone, "b.txt", "rewritten\n", "w1: rewritten")  # diverged: the branch cannot follow
    assert exo("diff", "w1", "--json").exit_code == 0
    rewritten = git(clone, "rev-parse", "HEAD")
    assert rewritten in git(team, "for-each-ref", "--format=%(objectname)", "refs/exo/clones/w1/")
    assert exo("kill", "w1").exit_code == 0
    if lost == "record":
        Env(cwd=team).store.delete_agent("w1")
    else:
        assert exo("reap", "--json").json()["reaped"] == ["w1"]  # type: ignore[index]
    for _ in range(2):
        r = exo("doctor", "--json")
        assert clone.is_dir() and (clone / "b.txt").is_file(), r.stdout
        assert git(team, "branch", "--contains", rewritten) == "" and rewritten in git(
            team, "for-each-ref", "--format=%(objectname)", "refs/exo/clones/")  # still kept there


@pytest.mark.parametrize("point", ["spawn.worktree", "spawn.prepared"])
def test_a_clone_spawn_killed_midway_is_cleaned_by_the_retry(team: Path, point: str) -> None:
    from conftest import run_exo

    args = ("spawn", "--worker", "crashy", "--prompt", "x", "--agent", "custom", "--mux", "headless",
            "--layout", "clone", "--json")
    assert run_exo(*args, cwd=team, env={"EXO_FAULT": point}).returncode == 137
    assert (team / ".exo" / "worktrees" / "crashy" / ".git").is_dir()  # the clone was made before the kill
    r = run_exo(*args, cwd=team)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["agents"][0]["layout"] == "clone"
    doc = json.loads(run_exo("doctor", "--json", cwd=team).stdout)
    assert doc["problems"] == [], doc
    assert git(team, "for-each-ref", "--format=%(refname)", "refs/exo/clones/") == "refs/exo/clones/crashy/base"


def test_doctor_rebuilds_the_record_of_a_live_agent_in_its_clone(team: Path, exo: Exo) -> None:
    data = spawn_clone(exo, "w1")
    clone = Path(data["worktrees"][0][1])
    Env(cwd=team).store.delete_agent("w1")  # its record lost; its process runs on in its clone
    r = exo("doctor", "--json")
    kinds = [(p["kind"], p["subject"], p["repaired"]) for p in r.json()["problems"]]  # type: ignore[index]
    assert ("lost-record", "w1", True) in kinds and not any(k[0] == "orphan-clone" for k in kinds), kinds
    rows = exo("agents", "--json").json()["agents"]  # type: ignore[index]
    assert [(a["id"], a["layout"], a["branch"], a["worktree"]) for a in rows] == [
        ("w1", "clone", "main.w1", str(clone))]


def test_a_clone_whose_store_reaches_another_repository_is_refused(team: Path, exo: Exo, tmp_path: Path) -> None:
    """The clone's object store is the agent's to write: an alternate (or a link) to a repository the agent
    cannot read must not have exo import that repository's objects into this one."""
    data = spawn_clone(exo, "w1")
    clone = Path(data["worktrees"][0][1])
    secret = tmp_path / "secret"
    subprocess.run(["git", "init", "-q", str(secret)], check=True)
    (secret / "key.txt").write_text("TOPSECRET\n")
    git(secret, "add", "key.txt")
    git(secret, "commit", "-q", "-m", "secret")
    blob = git(secret, "rev-parse", "HEAD:key.txt")
    alternates = clone / ".git" / "objects" / "info" / "alternates"
    original = alternates.read_text()
    objects = clone / ".git" / "objects"

    def leaked() -> bool:
        return subprocess.run(["git", "-C", str(team), "cat-file", "-e", blob], capture_output=True).returncode == 0

    def attack(label: str) -> None:
        runs = [exo(*args) for args in (("status", "w1", "--json"), ("checkpoint", "w1", "--json"),
                                        ("complete", "w1", "--json"))]
        assert not leaked(), label
        for r in runs:
            assert r.exit_code == 5 and "does not read this clone" in r.stdout, (label, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr

    alternates.write_text(original + str(secret / ".git" / "objects") + "\n")  # a second alternate
    git(clone, "update-ref", "refs/heads/leak", git(secret, "rev-parse", "HEAD"))
    attack("alternates")
    alternates.write_text(original)
    os.unlink(clone / ".git" / "refs" / "heads" / "leak")
    (objects / "info" / "http-alternates").write_text("http://127.0.0.1:9/x\n")
    attack("http-alternates")
    os.unlink(objects / "info" / "http-alternates")
    shutil.rmtree(objects / blob[:2], ignore_errors=True)
    (objects / blob[:2]).mkdir()
    (objects / blob[:2] / blob[2:]).symlink_to(secret / ".git" / "objects" / blob[:2] / blob[2:])  # one object
    git(clone, "update-ref", "refs/tags/leak", blob)
    attack("object link")
    (objects / blob[:2] / blob[2:]).unlink()
    os.mkfifo(objects / blob[:2] / blob[2:])  # git opening it would wait for a writer
    attack("fifo")
    (objects / blob[:2] / blob[2:]).unlink()
    os.unlink(clone / ".git" / "refs" / "tags" / "leak")
    head = clone / ".git" / "HEAD"
    saved = head.read_bytes()
    head.unlink()
    head.symlink_to(secret / ".git" / "HEAD")
    attack("HEAD link")
    head.unlink()
    head.write_bytes(saved)
    with open(clone / ".git" / "packed-refs", "ab") as fh:  # sparse: read in part, its refs would be dropped
        fh.truncate(65 << 20)
    attack("huge packed-refs")
    (clone / ".git" / "packed-refs").unlink()
    r = exo("status", "w1", "--json")  # restored: read again
    assert r.exit_code == 0, r.stdout + r.stderr


def test_a_clone_agent_gets_the_main_branchs_tracker_and_its_copy_is_not_its_work(team: Path, exo: Exo) -> None:
    """Without ``bd``: reconstitute copies the main branch's ``.beads/`` JSONL into the clone (no git run there),
    the agent's context follows its bead, and complete does not count exo's copy as the agent's work."""
    (team / ".beads").mkdir()
    shutil.copyfile(BEADS / "issues.jsonl", team / ".beads" / "issues.jsonl")
    shutil.copyfile(BEADS / "config.yaml", team / ".beads" / "config.yaml")
    git(team, "add", ".beads")
    git(team, "commit", "-q", "-m", "beads")
    clone = Path(spawn_clone(exo, "w1")["worktrees"][0][1])
    Env(cwd=team).store.update_agent("w1", bead="ex-a1")
    lines = (team / ".beads" / "issues.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["status"] = "in_progress"
    (team / ".beads" / "issues.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    git(team, "commit", "-q", "-am", "ex-a1 claimed on main")
    done = registry.invoke("reconstitute", env_for(clone, "w1"))
    assert done.files_updated == [str(clone / ".beads" / "issues.jsonl")], done
    assert (clone / ".beads" / "issues.jsonl").read_bytes() == (team / ".beads" / "issues.jsonl").read_bytes()
    assert "in_progress" in (clone / ".exo" / "context.md").read_text()
    r = exo("complete", "w1", "--json")  # exo's copy of the tracker is no work of the agent's
    assert r.exit_code == 0, r.stdout + r.stderr
    assert not clone.exists()
