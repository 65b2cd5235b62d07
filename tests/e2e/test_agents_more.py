"""The real Claude Code, Gemini CLI and Codex CLI past the happy path (issue 22, items 1, 7, 8, 9).

- Headless agents get their messages: each CLI in its print mode, one turn per process, and a
  message continues the same session (Claude ``-p --resume``, Codex ``exec resume``, Gemini
  ``-p --resume``); the model sees the whole conversation.
- Codex starts without the footer warnings exo's configuration used to cause.
- Claude with an ``ANTHROPIC_API_KEY`` starts without the "Detected a custom API key" dialog and no
  part of the key reaches the disk; when the user's own settings bring the dialog back, exo
  reports the agent blocked-on-dialog to its waiting parent.
- An API error that ends a turn leaves the agent ``failed-turn`` with the error, and the waiting
  parent is told (Claude's StopFailure hook, Gemini's AfterAgent with its transcript, Codex's
  rollout file).

The test process is the root; nobody runs ``exo agents``: the parent's ``exo wait`` watches. Every
agent runs sandboxed (``[sandbox] mode = "on"`` in the user's local configuration): in bubblewrap,
its own clone and private HOME, its model reached through exo's allow-list proxy.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import string
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.agents import AgentHome
from e2e.lifecycle import CLAUDE_DIALOGS
from e2e.lifecycle_more import Lifecycle, assert_no_egress, lifecycle_env, make_repo, sandbox_on
from e2e.model_server import ModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.tmux,
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")]


@pytest.fixture
def world(require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
          tmp_path: Path) -> Iterator[Callable[..., Lifecycle]]:
    """make(cli, extra_env=None) -> a Lifecycle: a repository that sandboxes its agents, that CLI's home, exo as
    the root."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    made: list[Lifecycle] = []

    def make(cli: str, extra_env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> Lifecycle:
        require_cli(cli)
        repo = make_repo(tmp_path / "repo")
        sandbox_on(repo)
        home = agent_home(cli)
        lc = Lifecycle(repo, home, model_server, lifecycle_env(home, drop=drop, extra=extra_env))
        made.append(lc)
        return lc

    yield make
    for lc in made:
        lc.exo("kill", "w1", check=False)
        lc.close()


def agent_texts(entry: dict) -> str:
    return json.dumps(entry["body"])


# ----------------------------------------------------------------------------------- 1. headless


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini"])
def test_headless_agent_continues_its_session_with_each_message(world: Callable[..., Lifecycle], cli: str) -> None:
    lc = world(cli)
    lc.server.script({"text": f"FIRST-{cli}"}, {"text": f"SECOND-{cli}"})
    res = lc.exo_json("spawn", "--worker", "w1", "--agent", cli, "--skip-permissions", "--mux", "headless",
                      "--prompt", "first task", timeout=120)
    assert res["errors"] == [] and res["agents"][0]["sandboxed"] is True, res  # each turn's process in its sandbox
    waited = lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)
    assert waited["results"][0]["status"] == "idle", lc.describe()
    assert waited["results"][0]["message"] == f"FIRST-{cli}"
    sent = lc.exo_json("send", "w1", "second message")
    assert sent["sent"][0]["delivery"] == "typed"  # handed to the agent's runner: its next turn
    waited = lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)
    assert waited["results"][0]["status"] == "idle" and waited["results"][0]["message"] == f"SECOND-{cli}", \
        lc.describe()
    first, second = lc.server.agent_requests()[:2]
    text = agent_texts(second)
    # The same conversation: the first prompt and answer, then the message.
    assert "first task" in text and f"FIRST-{cli}" in text and "[MESSAGE from root] second message" in text
    assert "first task" in agent_texts(first)
    rec = lc.agent("w1")
    assert rec["status"] == "idle" and rec["turns"] == 2
    assert_no_egress(lc.server)


@pytest.mark.slow
def test_gemini_headless_session_survives_gemini_s_session_cleanup(world: Callable[..., Lifecycle]) -> None:
    """Gemini deletes a session resumed in a later minute when another session starts; exo turns that off.

    Unsandboxed: the other session shares the agent's HOME (a sandboxed agent's sessions are in its private one).
    """
    lc = world("gemini")
    lc.server.script({"text": "A0"}, {"text": "A1"}, {"text": "UNRELATED"}, {"text": "A2"})
    lc.exo_json("spawn", "--worker", "w1", "--agent", "gemini", "--skip-permissions", "--no-sandbox", "--mux",
                "headless", "--prompt", "first", timeout=120)
    assert lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)["results"][0]["message"] == "A0"
    minute = time.strftime("%H:%M")
    while time.strftime("%H:%M") == minute:  # the next turn starts in a later minute
        time.sleep(1)
    lc.exo_json("send", "w1", "second")
    assert lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)["results"][0]["message"] == "A1"
    # Another Gemini session in the same project: its startup cleanup would delete w1's session.
    worktree = Path(lc.agent("w1")["worktree"])
    env = {k: v for k, v in lc.env.items() if not k.startswith("EXO_")}
    other = subprocess.run(["gemini", "-p", "unrelated"], cwd=worktree, env=env, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert other.returncode == 0, other.stderr
    lc.exo_json("send", "w1", "third")
    waited = lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)
    assert waited["results"][0]["message"] == "A2", lc.describe()
    last = agent_texts(lc.server.agent_requests()[-1])
    assert "A0" in last and "A1" in last and "third" in last


# ----------------------------------------------------------------------------------- 7. Codex warnings


def test_codex_starts_without_warnings_about_exo_s_configuration(world: Callable[..., Lifecycle]) -> None:
    lc = world("codex")
    lc.server.script({"text": "HELLO-CODEX"})
    lc.exo_json("spawn", "--worker", "w1", "--agent", "codex", "--skip-permissions", "--mux", "tmux",
                "--prompt", "say hello", timeout=120)
    lc.wait_status("w1", "idle", timeout=90, since_turns=0)
    screen = lc.wait_screen("w1", "HELLO-CODEX")
    pane = json.loads(lc.agent("w1")["location"])["pane"]
    warnings = []
    lc.tmux("send-keys", "-t", pane, "F2")
    for _ in range(6):  # read every warning of the panel
        time.sleep(1.0)
        shown = lc.screen("w1")
        warnings.append(shown)
        if "Warnings" not in shown:
            break
        lc.tmux("send-keys", "-t", pane, "Right")
    text = "\n".join([screen, *warnings])
    assert "Warnings" in warnings[0], warnings[0]
    assert "shared background server" not in text and "requires embedded mode" not in text
    assert "bypass-hook-trust" not in text and "Hooks need review" not in text
    assert lc.agent("w1")["session_id"]  # exo's hooks ran (trusted without the bypass flag)


# ----------------------------------------------------------------------------------- 8. Claude's key


def _key() -> str:
    # Upper-case letters only at the end, so no SHA-256 hex digest can contain a piece of it.
    return "sk-ant-api03-" + secrets.token_urlsafe(60) + "".join(secrets.choice(string.ascii_uppercase)
                                                                 for _ in range(25))


def test_claude_api_key_without_the_dialog_and_never_on_disk(world: Callable[..., Lifecycle], tmp_path: Path) -> None:
    key = _key()
    lc = world("claude", extra_env={"ANTHROPIC_API_KEY": key})
    claude_json = lc.home.home / ".claude.json"
    data = json.loads(claude_json.read_text())
    data.pop("customApiKeyResponses")  # a user who never approved the key
    claude_json.write_text(json.dumps(data))
    lc.server.script({"text": "HELLO-KEY"})
    lc.exo_json("spawn", "--worker", "w1", "--agent", "claude", "--skip-permissions", "--mux", "tmux",
                "--prompt", "say hello", timeout=120)
    screens = []
    deadline = time.monotonic() + 90
    while lc.agent("w1").get("status") != "idle":
        screens.append(lc.screen("w1"))
        assert time.monotonic() < deadline, lc.describe()
        time.sleep(0.3)
    assert not any("custom api key" in s.lower() for s in screens), [s for s in screens if "API key" in s]
    assert lc.agent("w1")["output"] == "HELLO-KEY"
    digest = hashlib.sha256(key.encode()).hexdigest()
    requests = lc.server.agent_requests()
    assert requests and all(e["auth"].get("x-api-key") == digest for e in requests)
    # Nothing of the key anywhere on disk: the agent's HOME, the repository and worktree, exo's state, TMPDIR.
    needles = [key.encode(), key[-20:].encode(), key[-10:].encode()]
    leaks = []
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                data_bytes = path.read_bytes()
            except OSError:
                continue
            leaks += [str(path) for n in needles if n in data_bytes]
    assert leaks == []


def test_claude_dialog_exo_cannot_pre_empt_is_reported_to_the_waiting_parent(world: Callable[..., Lifecycle]) -> None:
    lc = world("claude")
    settings = lc.home.home / ".claude" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["env"] = {"ANTHROPIC_API_KEY": _key()}  # the user's own settings bring the key (and the dialog)
    settings.write_text(json.dumps(doc))
    claude_json = lc.home.home / ".claude.json"
    data = json.loads(claude_json.read_text())
    data.pop("customApiKeyResponses")
    claude_json.write_text(json.dumps(data))
    sandbox_on(lc.repo, "[agent]\nstart_timeout = 3\n")
    lc.exo_json("spawn", "--worker", "w1", "--agent", "claude", "--skip-permissions", "--mux", "tmux",
                "--prompt", "say hello", timeout=120)
    got = []
    deadline = time.monotonic() + 90
    while not any("[BLOCKED" in (m or "") for m in got):
        assert time.monotonic() < deadline, (got, lc.describe())
        res = lc.exo_json("wait", "--timeout", "60", timeout=90)  # the root's next message from anyone
        got += [e["message"] for e in res["results"]]
    assert any("[BLOCKED w1] its CLI shows a dialog: detected a custom api key" in (m or "") for m in got), got
    rec = lc.agent("w1")
    assert rec["status"] == "blocked-on-dialog" and "custom api key" in rec["status_reason"]
    assert "custom api key" in CLAUDE_DIALOGS


# ----------------------------------------------------------------------------------- 9. failed turns


@pytest.mark.parametrize("cli", ["claude", "gemini", "codex"])
def test_an_api_error_is_a_failed_turn_and_the_waiting_parent_is_told(world: Callable[..., Lifecycle],
                                                                      cli: str) -> None:
    lc = world(cli)
    lc.server.script({"error": 400, "message": "fake bad request"}, {"text": "RECOVERED"})
    lc.exo_json("spawn", "--worker", "w1", "--agent", cli, "--skip-permissions", "--mux", "tmux",
                "--prompt", "do the thing", timeout=120)
    waited = lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)
    (entry,) = waited["results"]
    assert entry["status"] == "failed", lc.describe()
    assert "fake bad request" in entry["message"]
    rec = lc.agent("w1")
    assert rec["status"] == "failed-turn" and "fake bad request" in rec["status_reason"]
    assert [e["kind"] for e in lc.events("w1")].count("failed-turn") == 1
    # A message starts its next turn, which answers.
    sent = lc.exo_json("send", "w1", "try again")
    assert sent["sent"][0]["delivery"] == "typed"
    waited = lc.exo_json("wait", "w1", "--timeout", "120", timeout=150)
    assert waited["results"][0]["status"] == "idle" and waited["results"][0]["message"] == "RECOVERED", \
        lc.describe()
