"""Attention signals: the ``[notify] command`` gets every event kind exactly once, as JSON on stdin."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, make_agent

from conftest import wait_for, write_trusted
from exo_cli import registry
from exo_cli.ops import agentctl
from exo_cli.ops.attention import KINDS


def recorder(repo: Path, out: Path, *, extra: str = "") -> None:
    """Configure a notify command that appends what it reads to ``out`` (one JSON line per event)."""
    code = f"import sys; data = sys.stdin.buffer.read(); open({str(out)!r}, 'ab').write(data)"
    cmd = json.dumps([sys.executable, "-c", code])
    write_trusted(repo, f"[notify]\ncommand = {cmd}\n{extra}")


def events(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def hook(wt: str, agent: str, event: str, payload: dict) -> None:
    registry.invoke("hook", env_for(wt, agent), event=event, cli="claude", payload=json.dumps(payload))


def over_budget(repo: Path, name: str) -> None:
    """Agent ``name`` ends a turn past its token budget (its record says what it spent; no transcript here)."""
    env = env_for(repo)
    a = env.store.agent(name)
    env.store.update_agent(name, tokens=100, spec={**a.spec, "budget": {"tokens": 10}})
    hook(a.worktree, name, "stop", {"stop_hook_active": False, "last_assistant_message": "spent"})


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_every_event_kind_reaches_the_command_exactly_once(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    a = make_agent(repo, "w1")
    # off by default: nothing is run
    registry.invoke("question", env_for(a.worktree, "w1"), message="Anyone there?", timeout=0.05)
    recorder(repo, out, extra="[agent]\nstart_timeout = 0\n")

    # a question to the root (asked twice: the same ticket, one event)
    registry.invoke("question", env_for(a.worktree, "w1"), message="Which port?", timeout=0.05)
    registry.invoke("question", env_for(a.worktree, "w1"), message="Which port?", timeout=0.05)
    # waiting for a permission
    hook(a.worktree, "w1", "notification", {"notification_type": "permission_prompt", "message": "Bash: rm x"})
    # a failed turn (told twice: one event)
    hook(a.worktree, "w1", "stop-failure", {"error": "rate_limit", "last_assistant_message": "API Error: 429"})
    hook(a.worktree, "w1", "stop-failure", {"error": "rate_limit", "last_assistant_message": "API Error: 429"})
    # a PR filed to the root (filed again: an update, no new event)
    commit(a.worktree, "a.txt", "a\n", "add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1"), title="Add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1"), title="Add a, v2")
    # a startup dialog (an agent still starting, its pane showing a trust prompt)
    env = env_for(repo)
    b = make_agent(repo, "w2")
    loc = agentctl.mux_for(env, "tmux").start(
        "w2", ["sh", "-c", "echo 'Do you trust the contents of this directory?'; sleep 600"], cwd=b.worktree,
        env=dict(os.environ))
    env.store.update_agent("w2", status="starting", location=loc.to_dict(), mux="tmux",
                           spec={"phase": "spawned", "worktree_created": True})
    try:
        wait_for(lambda: "trust" in agentctl.mux_for(env, "tmux").capture(loc, 10), what="the dialog on screen")
        registry.invoke("agents", env_for(repo))
        registry.invoke("agents", env_for(repo))  # seen again: no second event
        # dead: its process is gone, found by the next listing (twice: one event)
        c = make_agent(repo, "w3", start=["sleep", "600"])
        pid = env_for(repo).store.agent("w3").location["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: registry.invoke("agents", env_for(repo)).by_status.get("dead") == 1, what="w3 dead")
        registry.invoke("agents", env_for(repo))
        assert c.id == "w3"
        # over its budget at the end of a turn
        make_agent(repo, "w4")
        over_budget(repo, "w4")
        # done
        registry.invoke("done", env_for(a.worktree, "w1"), output="all done")
        wait_for(lambda: len(events(out)) >= len(KINDS), what="every event recorded")
        time.sleep(0.5)  # a duplicate would have arrived by now
    finally:
        agentctl.mux_for(env_for(repo), "tmux").kill_server()
    got = events(out)
    assert sorted(e["event"] for e in got) == sorted(KINDS), got
    by = {e["event"]: e for e in got}
    assert by["question"]["agent"] == "w1" and by["question"]["text"] == "Which port?"
    assert by["waiting-permission"]["text"] == "Bash: rm x"
    assert by["failed-turn"]["text"] == "API Error: 429" and by["failed-turn"]["error_kind"] == "rate_limit"
    assert by["pr-filed"]["pr"] == 1 and "Add a" in by["pr-filed"]["text"]
    assert by["blocked-on-dialog"]["agent"] == "w2" and by["dead"]["agent"] == "w3"
    assert by["done"]["text"] == "all done" and by["done"]["branch"] == "main.w1"


def test_a_broken_notifier_never_breaks_the_operation(repo: Path, tmp_path: Path) -> None:
    write_trusted(repo, '[notify]\ncommand = ["/nonexistent/notifier"]\ndesktop = true\n')
    a = make_agent(repo, "w1")
    r = registry.invoke("question", env_for(a.worktree, "w1"), message="Still fine?", timeout=0.05)
    assert r.status == "timeout"


def test_bad_notify_config_is_an_error_naming_the_key(repo: Path) -> None:
    from exo_cli.errors import InvalidInput

    (repo / "exo.toml").write_text('[notify]\ncommand = "notify-me"\n')
    with pytest.raises(InvalidInput, match="notify.command"):
        env_for(repo).config  # noqa: B018


def test_an_agent_with_a_huge_task_still_reaches_the_notifier(repo: Path, tmp_path: Path) -> None:
    """The payload is written to the notifier's pipe at once: every long field (the task too) is cut, so a
    70 KB task of wide characters cannot make the event too big to send (it was lost without a word)."""
    out = tmp_path / "events.jsonl"
    a = make_agent(repo, "w1")
    env_for(repo).store.update_agent("w1", task="任务" * 35000)
    recorder(repo, out)
    registry.invoke("done", env_for(a.worktree, "w1"), output="finished")
    got = wait_for(lambda: events(out), what="the done event")
    assert [e["event"] for e in got] == ["done"] and got[0]["task"].startswith("任务任务")
    assert len(json.dumps(got[0], ensure_ascii=False).encode()) < 60000


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_board_flags_exactly_the_agents_that_raised_one_attention_event(repo: Path, tmp_path: Path) -> None:
    """Every status that needs the human (``attention.NEEDS_HUMAN``, the rule the board reads), entered by each
    real path that sets it, raises exactly one event, and told again raises none; an agent the board does not
    flag raised none (a question to a TL parent is the TL's to answer)."""
    import threading
    from collections import Counter

    from exo_cli.errors import StateError
    from exo_cli.ops.attention import NEEDS_HUMAN
    from exo_cli.records import Agent

    out = tmp_path / "events.jsonl"
    recorder(repo, out, extra="[agent]\nstart_timeout = 0\n")
    env = env_for(repo)
    tmux = agentctl.mux_for(env, "tmux")
    entered: dict[str, str] = {}  # agent -> the status a path drove it into
    asking: list[threading.Thread] = []

    def ask(agent: Agent) -> None:
        t = threading.Thread(target=registry.invoke, args=("question", env_for(agent.worktree, agent.id)),
                             kwargs={"message": f"{agent.id}: which port?", "timeout": 120}, daemon=True)
        t.start()
        asking.append(t)
        wait_for(lambda: env.store.agent(agent.id).status == "asking", what=f"{agent.id} asking")

    try:
        # dead, found by exo doctor (before anything else looks at the team)
        z = make_agent(repo, "zombie", start=["sleep", "600"])
        os.kill(env.store.agent("zombie").location["pid"], signal.SIGKILL)
        wait_for(lambda: not agentctl.mux_for(env, "headless").alive(agentctl.location(env.store.agent("zombie"))),
                 what="zombie's process gone")
        registry.invoke("doctor", env_for(repo))
        registry.invoke("doctor", env_for(repo))
        entered[z.id] = "dead"
        # asking: a question to the root; and one to a TL parent (not the human's)
        ask(make_agent(repo, "asker"))
        entered["asker"] = "asking"
        make_agent(repo, "lead", role="tl")
        ask(make_agent(repo, "kid", parent="lead", base="main.lead"))
        entered["kid"] = "asking"
        # waiting for a permission, told twice
        p = make_agent(repo, "perm")
        for _ in range(2):
            hook(p.worktree, "perm", "notification", {"notification_type": "permission_prompt", "message": "Bash"})
        entered["perm"] = "waiting-permission"
        # a failed turn (Claude's StopFailure), told twice, then another error of the same failed turn
        f = make_agent(repo, "failer")
        for error in ("rate_limit", "rate_limit", "overloaded"):
            hook(f.worktree, "failer", "stop-failure", {"error": error, "last_assistant_message": f"API {error}"})
        entered["failer"] = "failed-turn"
        # a startup dialog
        d = make_agent(repo, "dialog")
        loc = tmux.start("dialog", ["sh", "-c", "echo 'Do you trust the contents of this directory?'; sleep 600"],
                         cwd=d.worktree, env=dict(os.environ))
        env.store.update_agent("dialog", status="starting", location=loc.to_dict(), mux="tmux",
                               spec={"phase": "spawned", "worktree_created": True})
        wait_for(lambda: "trust" in tmux.capture(loc, 10), what="the dialog on screen")
        entered["dialog"] = "blocked-on-dialog"
        # dead: its process gone (seen by a watcher); an agent waiting --after it will never start
        make_agent(repo, "gone", start=["sleep", "600"])
        w = make_agent(repo, "waiter")
        env.store.update_agent("waiter", status="starting", spec={"phase": "pending", "after": ["gone"]})
        os.kill(env.store.agent("gone").location["pid"], signal.SIGKILL)
        entered["gone"] = entered[w.id] = "dead"
        # dead: its session ended; killed; stopped by a complete that then refused
        e = make_agent(repo, "ender")
        hook(e.worktree, "ender", "session-end", {"reason": "exit"})
        hook(e.worktree, "ender", "session-end", {"reason": "exit"})
        make_agent(repo, "killed", start=["sleep", "600"])
        registry.invoke("kill", env_for(repo), agent="killed")
        ready = tmp_path / "trap-set"
        c = make_agent(repo, "refused", start=["sh", "-c", f"trap 'echo late > late.txt; exit 0' TERM; touch {ready}; "
                                                             "while :; do sleep 0.1; done"])
        wait_for(ready.exists, what="refused's trap set")
        with pytest.raises(StateError, match="would lose work"):
            registry.invoke("complete", env_for(repo), target="refused")
        assert Path(c.worktree, "late.txt").exists()
        entered["ender"] = entered["killed"] = entered["refused"] = "dead"
        # over its budget: alive and idle, its messages held
        make_agent(repo, "spender")
        over_budget(repo, "spender")
        entered["spender"] = "over-budget"
        # a PR filed to the root: ready for the human to merge
        pr = make_agent(repo, "filer")
        commit(pr.worktree, "a.txt", "a\n", "add a")
        registry.invoke("pr_file", env_for(pr.worktree, "filer"), title="Add a")
        wait_for(lambda: registry.invoke("agents", env_for(repo)).by_status.get("dead") == 6, what="6 dead agents")
        board = registry.invoke("board", env_for(repo))
        board_again = registry.invoke("board", env_for(repo))
        flagged = {r.agent.id: r.needs for r in board.rows if r.needs}
        statuses = {a: env.store.agent(a).status for a in entered}
        assert flagged == {r.agent.id: r.needs for r in board_again.rows if r.needs}
        deadline = time.monotonic() + 30
        while len(events(out)) < len(flagged) and time.monotonic() < deadline:  # the comparison below says what lacks
            time.sleep(0.05)
        time.sleep(0.5)  # a duplicate would have arrived by now
    finally:
        for a in ("asker", "kid"):
            if env.store.agent(a) and env.store.agent(a).status == "asking":
                registry.invoke("answer", env_for(repo) if a == "asker" else env_for(repo, "lead"), agent=a,
                                message="8080")
        for t in asking:
            t.join(60)
        tmux.kill_server()
        for a in env.store.agents():
            if a.location.get("mux") == "headless":
                agentctl.stop_agent(env, a)
    got = Counter((e["agent"], e["event"]) for e in events(out))
    assert set(entered.values()) >= set(NEEDS_HUMAN), "a status that needs the human has no scenario here"
    board_kind = {"asking": "question", "permission": "waiting-permission", "dialog": "blocked-on-dialog",
                  "failed": "failed-turn", "dead": "dead", "pr-ready": "pr-filed", "budget": "over-budget"}
    assert got == Counter({(a, board_kind[n]): 1 for a, n in flagged.items()}), (got, flagged)
    assert flagged == {"zombie": "dead", "asker": "asking", "perm": "permission", "failer": "failed",
                       "dialog": "dialog", "gone": "dead", "waiter": "dead", "ender": "dead", "killed": "dead",
                       "refused": "dead", "filer": "pr-ready", "spender": "budget"}, flagged
    assert statuses == entered


# A notifier that records what it was given: its environment, its folder, its ancestry (pid, pgid, sid and
# command line of each ancestor) and what `exo wait --timeout 0` answers it.
PROBE = r'''
import json, os, subprocess, sys
def stat(pid):
    raw = open(f"/proc/{pid}/stat", "rb").read()
    rest = raw[raw.rfind(b")") + 2:].split()
    return int(rest[1]), int(rest[2]), int(rest[3])
chain, pid = [], os.getpid()
while pid > 1:
    ppid, pgid, sid = stat(pid)
    chain.append({"pid": pid, "pgid": pgid, "sid": sid, "cmd": open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")})
    pid = ppid
event = sys.stdin.read()
waited = subprocess.run([sys.argv[2], "wait", "--timeout", "0", "--json"], capture_output=True, text=True, timeout=120)
json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "chain": chain, "event": event,
           "wait": [waited.returncode, waited.stdout, waited.stderr]}, open(sys.argv[1] + ".tmp", "w"))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
'''


def test_the_notifier_runs_as_the_human_never_as_the_agent_that_raised_the_event(repo: Path, tmp_path: Path) -> None:
    """An agent's event (its own `exo done`, a child of its process) starts the notify command: the notifier
    gets none of the agent's identity or keys, only the human's session variables, starts in the
    repository, descends from no agent process, and an `exo wait` it runs is the human's (a TL's tool)."""
    from conftest import agent_vars
    from exo_cli.ops import attention
    from exo_cli.ops.agentctl import mux_for

    exo_bin = str(Path(sys.executable).parent / "exo")
    out = tmp_path / "probe.json"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    write_trusted(repo, f"[notify]\ncommand = {json.dumps([sys.executable, str(probe), str(out), exo_bin])}\n")
    # The human ran exo with their session (and a key that must not be written anywhere nor reach the notifier).
    attention.remember_human(env_for(repo, extra={"DISPLAY": ":7", "HUMAN_API_KEY": "human-canary"}))
    a = make_agent(repo, "w1")
    agent_env = {**os.environ, **agent_vars(repo, "w1"), "EXO_PARENT": "root", "EXO_ROLE": "dev",
                 "EXO_STATE_DIR": str(repo / ".git" / "exo"), "ANTHROPIC_API_KEY": "agent-canary",
                 "DISPLAY": ":99", "PYTHONPATH": str(tmp_path / "agent-owned")}
    script = f"import subprocess, time; subprocess.run([{exo_bin!r}, 'done', '--output', 'finished']); time.sleep(600)"
    env = env_for(repo)
    loc = mux_for(env, "headless").start("w1", [sys.executable, "-c", script], cwd=a.worktree, env=agent_env)
    env.store.update_agent("w1", location=loc.to_dict())
    try:
        seen = wait_for(lambda: out.exists() and json.loads(out.read_text()), what="the notifier's report")
        agent_pids = {p for p in (loc.pid, loc.pgid) if p}
        agent_chain = set(agent_pids)
        for p in list(agent_pids):  # the agent's process and its descendants, as far as they still run
            agent_chain.update(int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()
                               if Path(f"/proc/{p}").exists())
    finally:
        mux_for(env_for(repo), "headless").kill(loc, grace=0.5)
    assert json.loads(seen["event"])["event"] == "done"
    got_env = seen["env"]
    assert not [k for k in got_env if k.startswith("EXO_") and k != "EXO_CONFIG_DIR"], got_env
    assert "agent-canary" not in json.dumps(got_env) and "human-canary" not in json.dumps(got_env)
    assert "PYTHONPATH" not in got_env and got_env["DISPLAY"] == ":7" and got_env["PATH"] == os.environ["PATH"]
    assert "human-canary" not in (repo / ".git" / "exo" / "human-env.json").read_text()
    assert seen["cwd"] == str(repo)
    chain = seen["chain"]
    assert not {c["pid"] for c in chain[1:]} & agent_chain, chain
    assert not any("done" in c["cmd"].split("\0") for c in chain[1:]), chain  # not the `exo done` that raised it
    assert chain[0]["sid"] == chain[0]["pid"] and chain[0]["sid"] not in agent_pids and chain[0]["pgid"] not in agent_pids
    code, stdout, stderr = seen["wait"]
    assert code == 0, (stdout, stderr)
    assert "results" in json.loads(stdout), stdout  # the root's inbox: as the human, not refused as w1


def test_the_notifier_of_an_unrecorded_human_gets_the_account_and_a_default_path(repo: Path, tmp_path: Path) -> None:
    """Before the human ever ran exo here, an agent's event still reaches the notifier, with HOME, USER and
    SHELL from the user database and the system's default PATH, never the agent's variables."""
    import pwd

    out = tmp_path / "env.json"
    code = f"import json, os, sys; sys.stdin.read(); json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    write_trusted(repo, f"[notify]\ncommand = {json.dumps([sys.executable, '-c', code])}\n")
    a = make_agent(repo, "w1")
    registry.invoke("done", env_for(a.worktree, "w1", extra={"OPENAI_API_KEY": "agent-canary"}), output="x")
    got = wait_for(lambda: out.exists() and out.stat().st_size and json.loads(out.read_text()), what="the notifier")
    assert got["HOME"] == pwd.getpwuid(os.getuid()).pw_dir and got["PATH"] == os.defpath
    assert "OPENAI_API_KEY" not in got and not [k for k in got if k.startswith("EXO_")]


def test_a_hostile_record_of_the_humans_session_passes_only_allow_listed_variables(repo: Path, tmp_path: Path) -> None:
    """The record is a file any process of the user can write: what it says beyond the allow-list is dropped, and
    a link (to a device that never ends, say) or a fifo is not read at all."""
    from exo_cli.adapters import notify

    out = tmp_path / "env.json"
    code = f"import json, os, sys; sys.stdin.read(); json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    write_trusted(repo, f"[notify]\ncommand = {json.dumps([sys.executable, '-c', code])}\n")
    a = make_agent(repo, "w1")
    record = repo / ".git" / "exo" / notify.HUMAN_FILE
    record.write_text(json.dumps({"PATH": os.environ["PATH"], "LD_PRELOAD": "/tmp/evil.so", "EXO_AGENT": "w1",
                                  "PYTHONPATH": "/tmp/evil", "LC_ALL": "C.UTF-8", "DISPLAY": ":3\u0000x"}))
    registry.invoke("done", env_for(a.worktree, "w1"), output="x")
    got = wait_for(lambda: out.exists() and out.stat().st_size and json.loads(out.read_text()), what="the notifier")
    assert got["LC_ALL"] == "C.UTF-8" and "DISPLAY" not in got
    assert not {"LD_PRELOAD", "EXO_AGENT", "PYTHONPATH"} & set(got)
    record.unlink()
    record.symlink_to("/dev/zero")
    assert notify.recall(record.parent) is None
    record.unlink()
    os.mkfifo(record)
    assert notify.recall(record.parent) is None  # no writer: a read would block forever


def test_a_started_notifier_descends_from_no_process_of_its_starter(tmp_path: Path) -> None:
    """notify.start_detached from a process that lives on (a hook of a long-running agent, here a Python process
    that sleeps after starting it): the notifier's parent is not that process, nor any of its ancestors, and it
    leads a session of its own."""
    out = tmp_path / "chain.json"
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os, sys\n"
        "data = sys.stdin.read()\n"
        "chain, pid = [], os.getpid()\n"
        "while pid > 1:\n"
        "    raw = open(f'/proc/{pid}/stat', 'rb').read()\n"
        "    rest = raw[raw.rfind(b')') + 2:].split()\n"
        "    chain.append([pid, int(rest[2]), int(rest[3])])\n"
        "    pid = int(rest[1])\n"
        f"json.dump({{'chain': chain, 'stdin': data, 'cwd': os.getcwd()}}, open({str(out)!r} + '.tmp', 'w'))\n"
        f"os.replace({str(out)!r} + '.tmp', {str(out)!r})\n")
    starter = ("import sys, time\nfrom exo_cli.adapters import notify\n"
               f"ok = notify.start_detached([sys.executable, {str(probe)!r}], stdin=b'payload', "
               f"environ={{'PATH': '/usr/bin:/bin'}}, cwd={str(tmp_path)!r})\n"
               "print(ok, flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        seen = wait_for(lambda: out.exists() and json.loads(out.read_text()), what="the notifier's chain")
        assert proc.poll() is None  # the starter still runs: reparenting did not wait for it to end
    finally:
        proc.kill()
        proc.wait()
    me = os.getpid()
    pids = [c[0] for c in seen["chain"]]
    assert proc.pid not in pids and me not in pids, seen
    pid, pgid, sid = seen["chain"][0]
    assert sid == pid and pgid == pid
    assert seen["stdin"] == "payload" and seen["cwd"] == str(tmp_path)
