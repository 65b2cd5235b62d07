"""Agents past the happy path, for real (tmux on a private server, headless processes, git worktrees).

Custom agents (no hooks) go idle by quiet output, by a closed fence or an idle pattern; exit 0
is done with the last output, another exit is dead with the status; messages reach a resting
agent on every multiplexer; ``--after`` dependents fail when what they wait for dies; ``kill``
stops a done agent's process. Nobody runs ``exo agents`` here: the parent blocked in ``exo wait``
is what notices (its watcher), as an unattended team lead would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, git, stop_repo_agents, wait_for, write_trusted

# A custom agent whose name is its behaviour (the command template passes "{name}" first):
#   quiet (and any other name)  print the task, then "ready>", and answer every line it reads
#   fence   print the answer inside [exo-output]...[/exo-output] (idle at once)
#   busy    first run a child process (a "build") for a while, silently
#   ok/bad  print "bye" and exit with status 0 / 3
#   linger  run `exo done`, then keep running
AGENT = r'''
import os, subprocess, sys, time
mode, prompt = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
def say(text):
    print(text, flush=True)
say(f"{mode} got task: {prompt}")
if mode in ("ok", "bad"):
    say("bye")
    time.sleep(0.3)
    raise SystemExit(0 if mode == "ok" else 3)
if mode == "linger":
    subprocess.run([sys.executable, "-m", "exo_cli", "done", "--output", "finished early"], check=True)
    time.sleep(600)
if mode == "busy":
    subprocess.run([sys.executable, "-c", "import time; time.sleep(4)"])
if mode == "fence":
    say("[exo-output]ANSWER-" + prompt + "[/exo-output]")
else:
    say("ready>")
for line in sys.stdin:
    text = line.strip()
    if not text:
        continue
    if mode == "fence":
        say("[exo-output]ECHO " + text + "[/exo-output]")
    else:
        say("ECHO " + text)
        say("ready>")
time.sleep(600)
'''

MUXES = ["tmux", "headless"]


@pytest.fixture
def team(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository whose custom agent is the script above (mode in ``AGENT_MODE``)."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    write_trusted(repo,
        f'[agent]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, "{{name}}", "{{prompt}}"]\n'
        "idle_quiet_seconds = 2\nstart_timeout = 1\n"
    )
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-qm", "exo config")
    yield repo
    stop_repo_agents(repo)


def exo(repo: Path, *args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run exo as the human at the root (a real process, as from a shell)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full.pop("EXO_AGENT", None)
    return subprocess.run([sys.executable, "-m", "exo_cli", *args], cwd=repo, env=full, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def exo_json(repo: Path, *args: str, timeout: float = 90) -> dict:
    proc = exo(repo, *args, "--json", timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def store_agent(repo: Path, name: str):  # noqa: ANN201 - an exo_cli.records.Agent
    from exo_cli.env import Env

    return Env(cwd=repo, environ={**os.environ, "EXO_STATE_DIR": str(repo / ".git" / "exo")}).store.agent(name)


@pytest.mark.parametrize("mux", MUXES)
def test_custom_agent_goes_idle_by_quiet_output_and_gets_messages(team: Path, mux: str) -> None:
    res = exo_json(team, "spawn", "--worker", "quiet", "--agent", "custom", "--mux", mux, "--prompt", "hello")
    assert res["errors"] == []
    assert store_agent(team, "quiet").status == "working"
    # The root waits: its watcher sees the agent's output stay quiet for idle_quiet_seconds.
    waited = exo_json(team, "wait", "quiet", "--timeout", "60")
    (entry,) = waited["results"]
    assert entry["status"] == "idle", waited
    assert "quiet got task: hello" in entry["message"] and "ready>" in entry["message"]
    assert store_agent(team, "quiet").status_reason.startswith("quiet for")
    # A message to the idle agent is typed into its pane (tmux) or written to its stdin (headless).
    sent = exo_json(team, "send", "quiet", "ping-1")
    assert sent["sent"][0]["delivery"] == "typed"
    assert store_agent(team, "quiet").status == "working"
    waited = exo_json(team, "wait", "quiet", "--timeout", "60")
    assert waited["results"][0]["status"] == "idle"
    assert "ECHO [MESSAGE from root] ping-1" in waited["results"][0]["message"]


@pytest.mark.parametrize("mux", MUXES)
def test_fence_and_idle_pattern_end_a_turn_at_once(team: Path, mux: str) -> None:
    with open(team / "exo.toml", "a") as fh:
        fh.write('idle_pattern = "^ready>$"\n')
    with open(team / "exo.toml") as fh:
        text = fh.read().replace("idle_quiet_seconds = 2", "idle_quiet_seconds = 3600")
    (team / "exo.toml").write_text(text)
    exo_json(team, "spawn", "--worker", "fence", "--worker", "quiet", "--agent", "custom", "--mux", mux,
             "--prompt", "p1")
    waited = exo_json(team, "wait", "fence", "quiet", "--timeout", "60")
    by_name = {e["name"]: e for e in waited["results"]}
    assert by_name["fence"]["status"] == "idle" and by_name["fence"]["message"] == "ANSWER-p1"
    assert by_name["quiet"]["status"] == "idle" and by_name["quiet"]["message"].rstrip().endswith("ready>")
    assert store_agent(team, "fence").status_reason == "fence"
    assert store_agent(team, "quiet").status_reason == "idle pattern"


@pytest.mark.parametrize("mux", MUXES)
def test_a_busy_child_process_is_not_idleness(team: Path, mux: str) -> None:
    exo_json(team, "spawn", "--worker", "busy", "--agent", "custom", "--mux", mux, "--prompt", "build")
    wait_for(lambda: (b := store_agent(team, "busy")) and b.location.get("pid"), what="started")
    time.sleep(3)  # quiet for longer than idle_quiet_seconds, but its "build" runs
    exo(team, "agents")
    assert store_agent(team, "busy").status == "working"
    waited = exo_json(team, "wait", "busy", "--timeout", "60")
    assert waited["results"][0]["status"] == "idle"


@pytest.mark.parametrize("mux", MUXES)
def test_exit_zero_is_done_with_output_and_non_zero_is_dead(team: Path, mux: str) -> None:
    exo_json(team, "spawn", "--worker", "ok", "--worker", "bad", "--agent", "custom", "--mux", mux, "--prompt", "x")
    # The root, blocked in `exo wait` for the next message from anyone, is told of both.
    got = []
    for _ in range(4):
        res = exo_json(team, "wait", "--timeout", "60")
        got += [(e["name"], e["kind"], e["message"]) for e in res["results"]]
        if any(k == "done" for _, k, _ in got) and any("is dead" in (m or "") for _, _, m in got):
            break
    assert any(n == "ok" and k == "done" and "bye" in m for n, k, m in got), got
    assert any(n == "bad" and k == "event" and "exited with status 3" in m for n, k, m in got), got
    ok, bad = store_agent(team, "ok"), store_agent(team, "bad")
    assert ok.status == "done" and "bye" in ok.output and ok.status_reason == "exited (0)"
    assert bad.status == "dead" and bad.status_reason == "exited with status 3"


@pytest.mark.parametrize("mux", MUXES)
def test_after_fails_when_what_it_waits_for_dies(team: Path, mux: str) -> None:
    exo_json(team, "spawn", "--worker", "quiet", "--agent", "custom", "--mux", mux, "--prompt", "first")
    res = exo_json(team, "spawn", "--worker", "next", "--after", "quiet", "--agent", "custom", "--mux", mux,
                   "--prompt", "second: {{quiet.output}}")
    assert res["errors"] == []
    pending = store_agent(team, "next")
    assert pending.status == "starting" and pending.status_reason == "waiting for quiet"
    assert exo(team, "kill", "quiet").returncode == 0
    failed = store_agent(team, "next")
    assert failed.status == "dead" and failed.status_reason.startswith("not started: quiet is dead")
    found = None  # wait returns every pending message at once: look through each batch
    for _ in range(20):
        events = exo_json(team, "wait", "--timeout", "10")["results"]
        if not events:
            break
        found = next((e for e in events if "will not start" in (e["message"] or "")), None)
        if found is not None:
            break
    assert found is not None and found["name"] == "next" and "will not start: quiet is dead" in found["message"]
    # Waiting for a dead agent is refused at once.
    proc = exo(team, "spawn", "--worker", "later", "--after", "quiet", "--agent", "custom", "--mux", mux,
               "--prompt", "x", "--json")
    assert proc.returncode != 0 and "is dead" in proc.stdout + proc.stderr


def test_after_fails_when_the_dependency_exits_on_its_own(team: Path) -> None:
    exo_json(team, "spawn", "--worker", "bad", "--agent", "custom", "--mux", "headless", "--prompt", "x")
    exo_json(team, "spawn", "--worker", "next", "--after", "bad", "--agent", "custom", "--mux", "headless",
             "--prompt", "y")
    waited = exo_json(team, "wait", "bad", "--timeout", "60")  # the root's watcher sees it exit
    assert waited["results"][0]["status"] == "dead"
    nxt = store_agent(team, "next")
    assert nxt.status == "dead" and "bad is dead (exited with status 3)" in nxt.status_reason


@pytest.mark.parametrize("mux", MUXES)
def test_kill_stops_a_done_agent_whose_process_still_runs(team: Path, mux: str) -> None:
    exo_json(team, "spawn", "--worker", "linger", "--agent", "custom", "--mux", mux, "--prompt", "x")
    rec = wait_for(lambda: (a := store_agent(team, "linger")) and a.status == "done" and a, 30, "exo done")
    pid = rec.location["pid"]
    os.kill(pid, 0)  # still running
    res = exo_json(team, "kill", "linger")
    assert res["killed"] == ["linger"] and res["already_dead"] == []
    wait_for(lambda: not _alive(pid), 10, "process stopped")
    assert store_agent(team, "linger").status == "done"  # it did finish its task


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("mux", MUXES)
def test_a_message_still_queued_to_a_resting_agent_is_handed_over(team: Path, mux: str) -> None:
    """A message queued while the agent was busy (no hook took it) goes to it once it rests."""
    from exo_cli.env import Env

    exo_json(team, "spawn", "--worker", "quiet", "--agent", "custom", "--mux", mux, "--prompt", "hello")
    assert exo_json(team, "wait", "quiet", "--timeout", "60")["results"][0]["status"] == "idle"
    env = Env(cwd=team, environ={**os.environ, "EXO_STATE_DIR": str(team / ".git" / "exo")})
    env.store.post("send", "root", "quiet", "RACED-7", data={"from_name": "root"})  # queued, never typed
    # The waiting root's watcher hands it over; the agent answers it and rests again.
    waited = exo_json(team, "wait", "quiet", "--timeout", "60")
    assert "ECHO [MESSAGE from root] RACED-7" in waited["results"][0]["message"], waited
    (msg,) = [m for m in env.store.messages(recipient="quiet") if m.body == "RACED-7"]
    assert msg.delivered_at is not None


def test_pending_agents_are_settled_by_the_watcher_whatever_ended_their_dependency(team: Path) -> None:
    """A dependency completed (done) starts them; one marked dead by any path fails them."""
    from exo_cli.env import Env

    exo_json(team, "spawn", "--worker", "quiet", "--worker", "bad", "--agent", "custom", "--mux", "headless",
             "--prompt", "first")
    exo_json(team, "spawn", "--worker", "after-quiet", "--after", "quiet", "--agent", "custom", "--mux",
             "headless", "--prompt", "got {{quiet.output}}")
    exo_json(team, "spawn", "--worker", "after-bad", "--after", "bad", "--agent", "custom", "--mux", "headless",
             "--prompt", "y")
    env = Env(cwd=team, environ={**os.environ, "EXO_STATE_DIR": str(team / ".git" / "exo")})
    # Recorded directly, as another operation might: no hook or kill ran for them.
    env.store.update_agent("quiet", status="done", output="OUT-Q")
    env.store.update_agent("bad", status="dead", status_reason="gone somehow")
    exo(team, "agents")  # any watcher
    started = wait_for(lambda: (a := store_agent(team, "after-quiet")) and a.location.get("pid") and a, 30,
                       "after-quiet started")
    assert started.spec.get("phase") == "spawned" and "got OUT-Q" in (started.task or "") + json.dumps(started.spec)
    failed = store_agent(team, "after-bad")
    assert failed.status == "dead" and failed.status_reason == "not started: bad is dead (gone somehow)"
