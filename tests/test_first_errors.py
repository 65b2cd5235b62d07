"""Errors a new user meets first, each said plainly with the right exit code.

- a spawn whose tasks fail prints `Error:`/`Hint:` on stderr per failed task and exits non-zero,
  with the whole result still printed (the table of what did spawn on stdout, or the JSON);
- `exo complete` with no argument at the root is a usage error (exit 2);
- `exo pr file` when the remote cannot be reached says so, and does not suggest rebasing;
- `exo send` to a dead agent keeps the message and says the agent is dead.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent

from conftest import Exo, agent_vars, stop_repo_agents
from exo_cli import registry
from exo_cli.env import Env
from exo_cli.errors import ExternalFailure
from exo_cli.records import DEAD, Agent


@pytest.fixture
def custom(repo: Path) -> Path:
    (repo / "exo.toml").write_text('[agent]\ncommand = ["sleep", "60"]\n')
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


def test_spawn_with_a_missing_agent_cli(custom: Path) -> None:
    r = Exo(custom)("spawn", "--worker", "g1", "--prompt", "x", "--agent", "gemini", "--mux", "headless",
                    env={"PATH": "/usr/bin:/bin"})
    assert r.exit_code == 7
    assert "Error: g1: gemini is not installed or not on PATH\nHint: " in r.stderr
    assert r.stdout.splitlines()[-1] == "0 of 1 task(s) spawned; failed: g1"


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
    (repo / "exo.toml").write_text('[forge]\nkind = "github"\n')


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
