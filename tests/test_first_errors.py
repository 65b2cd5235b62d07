"""Errors a new user meets first, each said plainly with the right exit code.

- a spawn whose tasks fail prints `Error:`/`Hint:` on stderr per failed task and exits non-zero,
  with the whole result still printed (the table of what did spawn on stdout, or the JSON);
- `exo complete` with no argument at the root is a usage error (exit 2);
- `exo pr file` when the remote cannot be reached says so, and does not suggest rebasing;
- `exo send` to a dead agent keeps the message and says the agent is dead;
- `exo init` names an installed agent CLI as the default agent, none when none is installed, and a
  plain `exo spawn` without one says how to install it and that `--agent demo` needs nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import tomllib
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent

from conftest import Exo, agent_vars, stop_repo_agents, write_trusted
from exo_cli import registry
from exo_cli.env import Env
from exo_cli.errors import ExternalFailure
from exo_cli.records import DEAD, Agent


@pytest.fixture
def custom(repo: Path) -> Path:
    write_trusted(repo, '[agent]\ncommand = ["sleep", "60"]\n')
    yield repo
    stop_repo_agents(repo, tmux=False)


def test_spawn_failures_are_errors_on_stderr_with_the_result_on_stdout(custom: Path) -> None:
    exo = Exo(custom)
    first = exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless")
    assert first.exit_code == 0 and first.stderr == "", first.stderr
    r = exo("spawn", "--worker", "w1", "--worker", "w2", "--prompt", "x", "--agent", "custom", "--mux", "headless")
    assert r.exit_code == 5  # StateError: w1 already exists
    assert r.stderr.startswith("Error: w1: Agent w1 already exists (working)\nHint: ")
    assert "failed" not in r.stderr.split("\n")[0]
    out = r.stdout.splitlines()
    assert out[0].split()[:2] == ["AGENT", "ROLE"] and out[1].split()[0] == "w2"
    assert out[-1] == "1 of 2 task(s) spawned; failed: w1"
    assert "hint:" not in r.stdout and "Error" not in r.stdout
    j = exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
    assert j.exit_code == 5 and j.stderr == ""
    result = json.loads(j.stdout)
    assert result["failed"][0][0] == "w1" and result["errors"][0]["name"] == "StateError"


DEMO_HINT = ("or spawn another agent with --agent: --agent demo is exo's scripted agent, nothing to install. "
             "agent.default in exo.toml sets the agent a plain `exo spawn` starts.")


def test_spawn_with_a_missing_agent_cli(custom: Path, tmp_path: Path) -> None:
    r = Exo(custom)("spawn", "--worker", "g1", "--prompt", "x", "--agent", "gemini", "--mux", "headless",
                    env={"PATH": _bin(tmp_path)})
    assert r.exit_code == 7
    assert r.stderr == ("Error: g1: gemini is not installed or not on PATH\nHint: Install it (npm install -g "
                        f"@google/gemini-cli, then log in), {DEMO_HINT}\n")
    assert r.stdout.splitlines()[-1] == "0 of 1 task(s) spawned; failed: g1"


def _bin(tmp_path: Path, *clis: str) -> str:
    """A PATH with git, tmux and bubblewrap (agents are sandboxed by default: without it, init says so too),
    and stand-ins for the agent CLIs named (none other)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for tool in ("git", "tmux", "bwrap"):
        found = shutil.which(tool)
        if found and not (folder / tool).exists():
            (folder / tool).symlink_to(found)
    for cli in clis:
        (folder / cli).write_text("#!/bin/sh\nexit 0\n")
        (folder / cli).chmod(0o755)
    return str(folder)


def _init(repo: Path, path: str, *args: str) -> dict[str, object]:
    r = Exo(repo)("init", *args, "--json", env={"PATH": path})
    assert r.exit_code == 0, r.stdout + r.stderr
    return r.json()  # type: ignore[return-value]


@pytest.mark.parametrize(("clis", "args", "picked"), [
    (("codex", "gemini", "claude"), (), "claude"),  # the first installed, in the order claude, gemini, codex
    (("codex", "gemini"), (), "gemini"),
    (("codex",), (), "codex"),
    (("codex", "claude"), ("--agent", "codex"), "codex"),  # the one --agent wires, when installed
    (("gemini",), ("--agent", "claude"), "gemini"),  # ... else the first installed
])
def test_init_names_an_installed_agent_cli_as_the_default(repo: Path, tmp_path: Path, clis: tuple[str, ...],
                                                          args: tuple[str, ...], picked: str) -> None:
    out = _init(repo, _bin(tmp_path, *clis), *args)
    assert out["default_agent"] == picked
    assert tomllib.loads((repo / "exo.toml").read_text())["agent"]["default"] == picked
    assert not any("no agent CLI" in w for w in out["warnings"])  # type: ignore[attr-defined]
    r = Exo(repo)("init", env={"PATH": _bin(tmp_path, *clis)})
    assert f"Default agent: {picked} (agent.default; another with exo spawn --agent)" in r.stdout.splitlines()


def test_without_an_agent_cli_init_names_no_default_and_spawn_points_to_demo(repo: Path, tmp_path: Path) -> None:
    path = _bin(tmp_path)
    out = _init(repo, path)
    assert out["default_agent"] is None
    assert "default" not in tomllib.loads((repo / "exo.toml").read_text())["agent"]
    assert "# default = \"claude\"" in (repo / "exo.toml").read_text()
    assert out["warnings"] == [  # type: ignore[comparison-overlap]
        "no agent CLI found (claude, gemini, codex): exo.toml names no default agent. Try exo with its scripted "
        "agent: exo spawn --agent demo ...; or install one: npm install -g @anthropic-ai/claude-code (claude); "
        "npm install -g @google/gemini-cli (gemini); npm install -g @openai/codex (codex)"]
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-q", "-m", "exo.toml")
    try:
        r = Exo(repo)("spawn", "--worker", "w1", "--prompt", "x", "--mux", "headless", env={"PATH": path})
        assert r.exit_code == 7
        assert r.stderr == ("Error: w1: claude is not installed or not on PATH\nHint: Install it (npm install -g "
                            f"@anthropic-ai/claude-code, then log in), {DEMO_HINT}\n")
        r = Exo(repo)("spawn", "--worker", "w1", "--prompt", "x", "--mux", "headless", "--agent", "demo",
                      env={"PATH": f"{path}{os.pathsep}{os.environ['PATH']}"})
        assert r.exit_code == 0, r.stderr
    finally:
        stop_repo_agents(repo, tmux=False)


def test_init_warns_when_the_configured_default_agent_is_not_installed(repo: Path, tmp_path: Path) -> None:
    (repo / "exo.toml").write_text('[agent]\ndefault = "claude"\n')
    out = _init(repo, _bin(tmp_path, "codex"))
    assert out["config_written"] is False and out["default_agent"] == "claude"
    assert out["warnings"] == [  # type: ignore[comparison-overlap]
        f"agent.default is claude ({repo / 'exo.toml'}), which is not installed: a plain `exo spawn` will fail. "
        "Install it (npm install -g @anthropic-ai/claude-code), set agent.default to codex, or spawn with --agent"]
    assert (repo / "exo.toml").read_text() == '[agent]\ndefault = "claude"\n'


def test_complete_without_a_target_at_the_root_is_a_usage_error(repo: Path) -> None:
    r = Exo(repo)("complete")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == "Error: Name the bead or agent to complete\nHint: exo complete AGENT (see `exo agents`).\n"
    j = Exo(repo)("complete", "--json")
    assert j.exit_code == 2 and j.json()["error"]["name"] == "UsageError"  # type: ignore[index]
    assert not (repo / ".git" / "exo").exists()  # and nothing was created


def _github_remote(repo: Path, url: str) -> None:
    git(repo, "remote", "add", "origin", "https://github.localhost/o/r.git")
    git(repo, "config", "url." + url + ".insteadOf", "https://github.localhost/o/r.git")
    write_trusted(repo, '[forge]\nkind = "github"\n')


def test_pr_file_with_the_remote_unreachable_says_so(repo: Path) -> None:
    _github_remote(repo, "http://127.0.0.1:9/r.git")  # nothing listens on the discard port
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    with pytest.raises(ExternalFailure) as info:
        registry.invoke("pr_file", env_for(a.worktree, "w1"), title=None, body=None, draft=False)
    err = info.value
    assert err.message.startswith("The remote 'origin' is unreachable: ")
    assert "rebase" not in (err.hint or "") and "network" in (err.hint or "")
    assert err.data["reason"] == "unreachable"
    r = Exo(Path(a.worktree))("pr", "file", env=agent_vars(repo, "w1"))
    assert r.exit_code == 6
    assert r.stderr.startswith("Error: The remote 'origin' is unreachable: ") and "rebase" not in r.stderr


def test_pr_file_rejected_by_the_remote_suggests_rebasing(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    _github_remote(repo, str(bare))
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    git(other, "checkout", "-q", "-b", "main.w1")
    commit(other, "b.txt", "someone else\n")
    git(other, "push", "-q", "origin", "main.w1")
    with pytest.raises(ExternalFailure) as info:
        registry.invoke("pr_file", env_for(a.worktree, "w1"), title=None, body=None, draft=False)
    assert "rebase" in (info.value.hint or "") and info.value.data["reason"] == "rejected"


def test_send_to_a_dead_agent_keeps_the_message_and_says_it_is_dead(repo: Path) -> None:
    env = Env(cwd=repo)
    now = time.time()
    for name, status in (("gone", DEAD), ("done1", "done")):
        env.store.insert_agent(Agent(id=name, name=name, role="dev", parent="root", status=status, backend="custom",
                                     mux="headless", created_at=now, updated_at=now, status_at=now))
    r = Exo(repo)("send", "gone", "are you there?")
    assert r.exit_code == 0
    assert r.stdout.splitlines() == [
        "Sent to gone (message #1, queued for its next turn or `exo wait`).",
        "warning: gone is dead: the message is kept and reaches it only if it starts again "
        "(see `exo agents`; `exo spawn` starts a new agent)",
    ]
    j = Exo(repo)("send", "gone,done1", "still?", "--json").json()
    assert [p["delivery"] for p in j["sent"]] == ["queued", "queued"]  # type: ignore[index]
    assert [w.split(":")[0] for w in j["warnings"]] == ["gone is dead", "done1 is done (its task is finished)"]  # type: ignore[index]
    assert [m.body for m in env.store.messages(recipient="gone", unconsumed=True)] == ["are you there?", "still?"]
