"""`exo deinit`: exo leaves a repository exactly as it found it, and never with anyone's work.

Real repositories, real agents (sleeping custom agents in tmux and headless), the real tmux
server, the real files of the user's home. Every refusal changes nothing (the whole repository
and home compared byte for byte); `--force` keeps the work where it says, and its restore
commands bring it back; a deinit killed at any step finishes when run again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, Exo, git, run_exo, stop_repo_agents
from exo_cli.env import Env

# Parts of .git that git itself rewrites as it works (objects, the index's stat cache, logs): not exo's.
GIT_OWN = (".git/objects", ".git/logs", ".git/index", ".git/COMMIT_EDITMSG", ".git/ORIG_HEAD",
           # exo's reading of a sandboxed agent's clone: its folder and the refs that mirror the clone's commits,
           # refreshed by every look at the clone as git's index stat cache is by `git status` in a worktree
           ".git/exo/clones", ".git/refs/exo/clones")
CLONE_MIRROR = re.compile(r"^refs/exo/clones/[^/]+/(?!base )")
USER_MCP = '{\n    "mcpServers": {"mine": {"command": "my-server"}}\n}\n'  # the user's own formatting
USER_CLAUDE = '{"numStartups": 3, "projects": {"/somewhere": {"allowedTools": []}}}'


def snapshot(*roots: Path) -> dict[str, object]:
    """Every file, folder and link under ``roots`` (bytes and mode), and every ref of each repository."""
    out: dict[str, object] = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root).as_posix()
            if any(rel == g or rel.startswith(g + "/") for g in GIT_OWN):
                continue
            if rel.startswith(".git/exo/state.db"):  # SQLite's files change as it is read: its rows count
                out[f"{root}:rows"] = Env(cwd=root).store.dump()
                continue
            st = os.lstat(p)
            key = f"{root}:{rel}"
            if p.is_symlink():
                out[key] = ("link", os.readlink(p))
            elif p.is_dir():
                out[key] = ("dir", st.st_mode)
            elif p.name == ".claude.json":  # Claude's own state file, which Claude (and exo's trust entries) rewrite
                out[key] = ("json", st.st_mode, json.loads(p.read_text()))
            else:
                out[key] = ("file", st.st_mode, p.read_bytes())
        if (root / ".git").is_dir():
            refs = git(root, "for-each-ref", "--format=%(refname) %(objectname)")
            out[f"{root}:refs"] = "\n".join(x for x in refs.splitlines() if not CLONE_MIRROR.match(x))
            out[f"{root}:worktrees"] = git(root, "worktree", "list", "--porcelain")
    return out


@pytest.fixture
def home(isolate: Path) -> Path:
    """The test's HOME, with the user's own Claude state and exo's agent command in their config."""
    (isolate / ".claude.json").write_text(USER_CLAUDE)
    cfg = isolate / ".config" / "exo"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text('[agent]\ncommand = ["sleep", "600"]\n')
    return isolate


@pytest.fixture
def team(repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield repo
    stop_repo_agents(repo)


def spawn(exo: Exo, name: str, mux: str = "headless") -> None:
    r = exo("spawn", "--worker", name, "--prompt", "x", "--agent", "custom", "--mux", mux)
    assert r.exit_code == 0, r.stderr


def tmux_runs(repo: Path, repo_id: str) -> bool:
    return subprocess.run(["tmux", "-L", f"exo-{repo_id}", "list-sessions"], capture_output=True).returncode == 0


def trust_entry(repo: Path, agent: str, home: Path) -> None:
    """What the claude backend writes for a worktree exo made: a trust entry in ~/.claude.json, with its undo."""
    from exo_cli.adapters.agents.base import add_json_entry
    from exo_cli.adapters.agents.claude import TRUST_KEYS

    env = Env(cwd=repo)
    a = env.store.agent(agent)
    assert a is not None and a.worktree
    record = add_json_entry(home / ".claude.json", ["projects", a.worktree], TRUST_KEYS)
    assert record is not None
    env.store.update_agent(agent, undo=[*a.undo, record])


# --------------------------------------------------------------------------- as before init


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_repository_is_left_exactly_as_before_init(team: Path, home: Path) -> None:
    repo = team
    (repo / ".mcp.json").write_text(USER_MCP)
    before = snapshot(repo, home)
    exo = Exo(repo)
    assert exo("init", "--agent", "claude").exit_code == 0
    assert (repo / "exo.toml").exists() and (repo / ".claude" / "settings.local.json").exists()
    repo_id = Env(cwd=repo).repo_id
    runtime = Env(cwd=repo).runtime_dir
    spawn(exo, "w1", "tmux")
    spawn(exo, "w2")
    assert exo("complete", "w1").exit_code == 0
    assert exo("kill", "w2").exit_code == 0
    trust_entry(repo, "w2", home)
    assert "/.exo/worktrees/w2" in (home / ".claude.json").read_text()
    spawn(exo, "w3", "tmux")
    assert exo("kill", "w3").exit_code == 0  # its dead pane keeps the server up
    assert tmux_runs(repo, repo_id)

    r = exo("deinit", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    out = r.json()
    assert out["holds"] == {} and out["blocked"] == {}  # type: ignore[index]
    assert snapshot(repo, home) == before
    assert not tmux_runs(repo, repo_id) and not runtime.exists()
    again = exo("deinit")
    assert (again.exit_code, again.stdout) == (0, "Nothing of exo is left in this repository.\n")
    assert snapshot(repo, home) == before  # and that second run made nothing either


def test_a_settings_file_edited_since_init_keeps_the_users_entries(repo: Path, home: Path) -> None:
    exo = Exo(repo)
    (repo / ".mcp.json").write_text(USER_MCP)
    assert exo("init", "--agent", "claude").exit_code == 0
    local = repo / ".claude" / "settings.local.json"
    data = json.loads(local.read_text())
    data["permissions"] = {"allow": ["Bash(ls)"]}  # the user's own key, added after init
    data["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "my-stop-hook"}]})
    local.write_text(json.dumps(data))
    r = exo("deinit", "--json")
    assert r.exit_code == 0, r.stderr
    assert (repo / ".mcp.json").read_text() == USER_MCP  # untouched since init: exactly the user's again
    assert json.loads(local.read_text()) == {"permissions": {"allow": ["Bash(ls)"]},
                                             "hooks": {"Stop": [{"hooks": [{"type": "command",
                                                                            "command": "my-stop-hook"}]}]}}
    assert f"{local}: exo's entries taken out, the rest kept" in r.json()["removed"]  # type: ignore[index]
    assert not (repo / ".git" / "exo").exists() and "/.exo/" not in (repo / ".git/info/exclude").read_text()


def test_exo_toml_goes_only_when_exo_wrote_it(repo: Path, home: Path) -> None:
    exo = Exo(repo)
    assert exo("init").exit_code == 0
    (repo / "exo.toml").write_text((repo / "exo.toml").read_text() + "# mine\n")
    r = exo("deinit", "--json")
    assert r.exit_code == 0 and (repo / "exo.toml").exists()
    assert r.json()["kept"] == [f"{repo / 'exo.toml'}: not as exo init wrote it, so kept (--config removes it)"]  # type: ignore[index]
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-qm", "exo config")
    assert exo("init").exit_code == 0
    r = exo("deinit", "--json")
    assert r.json()["kept"] == [f"{repo / 'exo.toml'}: committed, so kept (--config removes it)"]  # type: ignore[index]
    assert exo("init").exit_code == 0
    r = exo("deinit", "--config", "--json")
    assert r.exit_code == 0 and not (repo / "exo.toml").exists()
    assert f"{repo / 'exo.toml'} (committed: git shows it deleted)" in r.json()["removed"]  # type: ignore[index]
    assert git(repo, "status", "--porcelain") == "D exo.toml"


# --------------------------------------------------------------------------- refusals


def refused(repo: Path, home: Path, *args: str) -> dict[str, list[str]]:
    """Run a deinit that must refuse; check it changed nothing; return what it listed."""
    before = snapshot(repo, home)
    r = Exo(repo)("deinit", *args, "--json")
    assert r.exit_code == 5, r.stdout + r.stderr
    err = r.json()["error"]  # type: ignore[index]
    assert err["name"] == "StateError" and err["code"] == -32004
    assert snapshot(repo, home) == before
    return {**err["data"]["holds"], **err["data"]["blocked"]}


def test_refuses_while_an_agent_is_live(team: Path, home: Path) -> None:
    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    r = exo("deinit")
    assert r.exit_code == 5
    assert r.stderr.startswith("Error: exo holds work in this repository: live agents: w1 (")
    assert r.stderr.endswith("\nHint: Stop the agents (exo kill, or exo complete when their work is merged). Or run "
                             "`exo deinit --force`, which stops the agents and keeps all of it (it says where); nothing "
                             "was changed.\n")
    assert list(refused(team, home)) == ["live_agents"]


def test_refuses_while_a_worktree_holds_work(team: Path, home: Path) -> None:
    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    assert exo("kill", "w1").exit_code == 0
    (team / ".exo" / "worktrees" / "w1" / "notes.txt").write_text("unsaved\n")
    assert refused(team, home) == {"work": ["w1: untracked: notes.txt"]}


def test_refuses_while_archives_and_checkpoints_hold_work(repo: Path, home: Path) -> None:
    exo = Exo(repo)
    assert exo("init").exit_code == 0
    git(repo, "update-ref", "refs/exo/archive/main.old", "HEAD")
    assert refused(repo, home) == {"archives": ["refs/exo/archive/main.old"]}
    git(repo, "update-ref", "-d", "refs/exo/archive/main.old")
    git(repo, "update-ref", "refs/exo/checkpoints/w1/1", "HEAD")
    assert refused(repo, home) == {"checkpoints": ["refs/exo/checkpoints/w1/1"]}
    git(repo, "update-ref", "-d", "refs/exo/checkpoints/w1/1")
    archive = repo / ".git" / "exo" / "archive" / "20260101-000000-main.w1"
    archive.mkdir(parents=True)
    (archive / "RESTORE.txt").write_text("# what exo archived\n")
    assert refused(repo, home) == {"archives": [str(archive)]}


def test_an_agent_s_checkpoints_hold_while_its_checkout_does_and_go_with_it(team: Path, home: Path) -> None:
    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    wt = team / ".exo" / "worktrees" / "w1"
    (wt / "notes.txt").write_text("unsaved\n")
    r = exo("checkpoint", "w1", "--json")
    assert r.exit_code == 0 and r.json()["taken"], r.stdout + r.stderr  # type: ignore[index]
    ref = r.json()["checkpoint"]["ref"]  # type: ignore[index]
    assert exo("kill", "w1").exit_code == 0
    assert refused(team, home) == {"work": ["w1: untracked: notes.txt"], "checkpoints": [ref]}
    (wt / "notes.txt").unlink()  # nothing to lose now: its checkpoints go with exo
    r = exo("deinit", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "1 checkpoint ref(s) of agents that ended with nothing to lose" in r.json()["removed"]  # type: ignore[index]
    assert git(team, "for-each-ref", "refs/exo/") == ""


def test_refuses_while_a_pull_request_is_open(repo: Path, home: Path) -> None:
    exo = Exo(repo)
    assert exo("init").exit_code == 0
    Env(cwd=repo).store.insert_pr(forge="local", title="t", body="", head="main.w1", base="main", author="root",
                                  state="open", draft=0, url=None, remote_number=None)
    assert refused(repo, home) == {"open_prs": ["#1 main.w1 -> main"]}


def test_what_is_in_the_way_refuses_even_with_force(team: Path, home: Path) -> None:
    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    assert exo("kill", "w1").exit_code == 0
    wt = team / ".exo" / "worktrees" / "w1"
    proc = subprocess.Popen(["sleep", "600"], cwd=wt)
    try:
        assert refused(team, home, "--force") == {"processes": ["w1: sleep 600"]}
    finally:
        proc.kill()
        proc.wait()
    stray = team / ".exo" / "worktrees" / "stray"
    stray.mkdir()
    (stray / "mine.txt").write_text("not exo's\n")
    assert refused(team, home, "--force") == {"unrecorded": [str(stray)]}


# --------------------------------------------------------------------------- --dry-run and --force


def test_dry_run_lists_and_changes_nothing(team: Path, home: Path) -> None:
    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    before = snapshot(team, home)
    r = exo("deinit", "--dry-run", "--json")
    assert r.exit_code == 5  # it would refuse: w1 runs
    out = r.json()
    assert out["dry_run"] is True and list(out["holds"]) == ["live_agents"]  # type: ignore[index]
    assert f"worktree {team / '.exo' / 'worktrees' / 'w1'}" in out["removed"]  # type: ignore[index]
    assert f"exo's state {team / '.git' / 'exo'}" == out["removed"][-1]  # type: ignore[index]
    assert snapshot(team, home) == before
    assert exo("kill", "w1").exit_code == 0
    human = exo("deinit", "--dry-run")
    assert human.exit_code == 0 and human.stdout.startswith("Would remove:\n  ")
    assert (team / ".git" / "exo").is_dir()


def test_force_stops_archives_and_says_how_to_restore(team: Path, home: Path) -> None:
    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    wt = team / ".exo" / "worktrees" / "w1"
    (wt / "done.txt").write_text("committed work\n")
    git(wt, "add", "done.txt")
    git(wt, "commit", "-qm", "w1: work")
    (wt / "wip.txt").write_text("uncommitted\n")
    (wt / ".gitignore").write_text("secret.env\n")
    (wt / "secret.env").write_text("TOKEN=1\n")
    r = exo("deinit", "--force", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    out = r.json()
    assert sorted(out["holds"]) == ["live_agents", "work"]  # type: ignore[index]
    folder = out["archive_folder"]  # type: ignore[index]
    assert folder == str(team / ".git" / "exo-archive")
    assert not (team / ".git" / "exo").exists() and not wt.exists()
    assert "main.w1" not in git(team, "branch", "--list")
    assert any(k.startswith("the archive") or "archive ref" in k for k in out["kept"])  # type: ignore[union-attr]
    for cmd in out["restore"]:  # type: ignore[index]
        subprocess.run(cmd, shell=True, check=True, capture_output=True)
    assert (wt / "done.txt").read_text() == "committed work\n"
    assert (wt / "wip.txt").read_text() == "uncommitted\n"
    assert (wt / "secret.env").read_text() == "TOKEN=1\n"


# --------------------------------------------------------------------------- kill -9 at each step


@pytest.mark.parametrize("point", ["deinit.agents", "deinit.trees", "deinit.stopped", "deinit.unwired",
                                   "deinit.files"])
def test_a_killed_deinit_finishes_when_run_again(team: Path, home: Path, point: str) -> None:
    repo = team
    before = snapshot(repo, home)
    exo = Exo(repo)
    assert exo("init", "--agent", "codex").exit_code == 0
    spawn(exo, "w1")
    assert exo("kill", "w1").exit_code == 0
    trust_entry(repo, "w1", home)
    env = {"PYTHONPATH": str(ROOT), "EXO_FAULT": point}
    killed = run_exo("deinit", cwd=repo, env=env)
    assert killed.returncode == 137, killed.stderr
    done = run_exo("deinit", cwd=repo, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert snapshot(repo, home) == before


# --------------------------------------------------------------------------- PostgreSQL


def test_postgres_loses_only_this_repositorys_rows(repo: Path, home: Path, tmp_path: Path, pg_cluster: object,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXO_STORE_URL", pg_cluster.url())  # type: ignore[attr-defined]
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "f").write_text("x")
    git(other, "add", "f")
    git(other, "commit", "-qm", "x")
    for r in (repo, other):
        assert Exo(r)("init").exit_code == 0
        Env(cwd=r).store.post("note", "root", "root", f"hello from {r.name}")
    kept = Env(cwd=other).store.counts()
    assert kept["messages"] == 1
    r = Exo(repo)("deinit", "--json")
    assert r.exit_code == 0, r.stderr
    assert "this repository's rows in the PostgreSQL store" in r.json()["removed"]  # type: ignore[index]
    assert not (repo / ".git" / "exo").exists()
    assert not Env(cwd=repo).store.exists()  # (that Env writes the store's pointer again: look first)
    assert Env(cwd=other).store.counts() == kept
    assert [m.body for m in Env(cwd=other).store.messages()] == ["hello from other"]


def test_deinit_is_the_humans(repo: Path) -> None:
    from exo_cli import registry

    op = registry.get("deinit")
    assert op.roles == ("human",) and op.tools == ()


def test_a_committed_settings_file_is_never_changed(repo: Path, home: Path) -> None:
    exo = Exo(repo)
    assert exo("init", "--agent", "claude").exit_code == 0
    team_file = (repo / ".mcp.json").read_text()  # the team commits exo's server entry for everyone
    git(repo, "add", "-f", ".mcp.json")
    git(repo, "commit", "-qm", "exo for everyone")
    assert exo("init", "--agent", "claude").exit_code == 0  # nothing to change: exo's entry is there
    r = exo("deinit", "--json")
    assert r.exit_code == 0, r.stderr
    assert (repo / ".mcp.json").read_text() == team_file and git(repo, "status", "--porcelain", ".mcp.json") == ""
    assert f"{repo / '.mcp.json'}: committed, so exo's entries in it are kept" in r.json()["kept"]  # type: ignore[index]
    assert not (repo / ".claude").exists()


def test_folders_of_others_beside_exos_worktrees_are_not_in_the_way(repo: Path, home: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "worktrees"
    (shared / "another-project").mkdir(parents=True)
    (shared / "another-project" / "file").write_text("theirs\n")
    monkeypatch.setenv("EXO_WORKTREE_ROOT", str(shared))
    assert Exo(repo)("init").exit_code == 0
    r = Exo(repo)("deinit", "--json")
    assert r.exit_code == 0, r.stdout
    assert (shared / "another-project" / "file").read_text() == "theirs\n"


def test_a_committed_settings_file_exo_changed_goes_back_to_the_commit(repo: Path, home: Path) -> None:
    (repo / ".mcp.json").write_text(USER_MCP)
    git(repo, "add", ".mcp.json")
    git(repo, "commit", "-qm", "our servers")
    exo = Exo(repo)
    assert exo("init", "--agent", "claude").exit_code == 0
    assert git(repo, "status", "--porcelain", ".mcp.json") == "M .mcp.json"
    r = exo("deinit", "--json")
    assert r.exit_code == 0, r.stderr
    assert f"{repo / '.mcp.json'}: put back as committed" in r.json()["removed"]  # type: ignore[index]
    assert git(repo, "status", "--porcelain") == ""


def test_a_state_folder_named_elsewhere_loses_only_exos_files(repo: Path, home: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "my-folder"
    state.mkdir()
    (state / "notes.txt").write_text("mine\n")
    monkeypatch.setenv("EXO_STATE_DIR", str(state))
    assert Exo(repo)("init").exit_code == 0
    assert (state / "state.db").exists()
    r = Exo(repo)("deinit", "--json")
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in state.iterdir()) == ["notes.txt"]
    assert f"{state}: it holds files exo did not make (EXO_STATE_DIR names it), so the folder is kept" in \
        r.json()["kept"]  # type: ignore[index]


def test_an_agent_whose_process_is_gone_is_not_live(team: Path, home: Path) -> None:
    import signal

    exo = Exo(team)
    assert exo("init").exit_code == 0
    spawn(exo, "w1")
    record = Env(cwd=team).store.agent("w1")
    assert record is not None and record.status not in ("dead", "done")
    os.killpg(int(record.location["pgid"]), signal.SIGKILL)  # gone behind exo's back: its record still says live

    def gone() -> bool:  # exited (a zombie until its parent, this test's process, reaps it) or reaped
        try:
            return Path(f"/proc/{record.location['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    from conftest import wait_for

    wait_for(gone, what="the agent's process group to go")
    r = exo("deinit", "--json")
    assert r.exit_code == 0, r.stdout
    assert not (team / ".git" / "exo").exists()


def test_a_forged_record_cannot_aim_deinit_at_other_files(repo: Path, home: Path, tmp_path: Path) -> None:
    """The record sits in .git/exo: a process that wrote it still only reaches exo's own files and lines."""
    from exo_cli.ops import footprint

    assert Exo(repo)("init").exit_code == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (repo / ".git" / "info" / "exclude").write_text("# mine\n*.log\n/.exo/\n")

    def forge(data: dict[str, object]) -> None:
        data["files"] = {"../victim.txt": {"existed": True, "original": "pwned\n",
                                           "written": footprint.digest("precious\n")}}
        data["dirs"] = ["..", ".git"]
        data["exclude"] = ["*.log"]

    footprint.update(repo / ".git" / "exo", forge)
    r = Exo(repo)("deinit", "--json")
    assert r.exit_code == 0, r.stdout
    assert victim.read_text() == "precious\n" and (repo / ".git").is_dir()
    assert (repo / ".git" / "info" / "exclude").read_text() == "# mine\n*.log\n"
