"""The merge queue's gates in bubblewrap (issue 34 item 3): a gate attacks, the sandbox refuses, an honest gate passes.

One gate script (Python, run by the real runner in the real candidate clone) tries what a hostile
PR's test suite would: write the repository's refs, object store and ``.git/config``, the state
store, the main checkout and a sibling's checkout, read a canary in the user's ``~/.ssh``, reach
a host outside ``[sandbox] allow_hosts``; and does what an honest one does: write its clone,
its HOME, /tmp and the package cache, read its own history, reach an allowed host through the
proxy. With ``[sandbox] mode = "on"`` every attack is refused and the PR lands; with ``"off"``
the same script's attacks all succeed (so each assertion can fail). The results go to a folder
named in ``[sandbox] paths`` (the one place outside the clone a gate may write).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import env_for, git
from test_merge_queue import enqueue, entry, passed, pr_of

from conftest import wait_for
from exo_cli.errors import EnvironmentError_
from exo_cli.ops import gatesandbox
from exo_cli.ops import mergequeue as mq
from exo_cli.ops.queuerun import advance

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")

ATTACKS = ("refs", "objects", "git_config", "state_store", "main_checkout", "sibling", "ssh_canary", "outside_host")
HONEST = ("own_clone", "own_history", "own_commit", "home", "tmp", "cache", "allowed_host")
SECRET = "ssh-canary-7c1e"

GATE = r'''
import json, os, sqlite3, subprocess, sys, urllib.request
cfg = json.loads(open(sys.argv[1]).read())
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok" if fn() else "refused: no effect"
    except Exception as exc:
        out[name] = "refused: %s" % (exc,)
def git(*args):
    return subprocess.run(["git", *args], capture_output=True, timeout=60).returncode == 0
def write(path):
    with open(path, "a") as fh: fh.write("pwned\n")
    return True
def fetch(port, host="127.0.0.1"):
    return urllib.request.urlopen("http://%s:%d/" % (host, port), timeout=20).read() == b"hello"
attempt("refs", lambda: git("-C", cfg["repo"], "update-ref", "refs/heads/pwned", "HEAD"))
attempt("objects", lambda: subprocess.run(["git", "-C", cfg["repo"], "hash-object", "-w", "--stdin"], input=b"pwned",
                                          capture_output=True, timeout=60).returncode == 0)
attempt("git_config", lambda: git("-C", cfg["repo"], "config", "exo.pwned", "yes"))
attempt("state_store", lambda: sqlite3.connect(cfg["db"]).execute("CREATE TABLE IF NOT EXISTS pwned(x)") and True)
attempt("main_checkout", lambda: write(cfg["repo"] + "/pwned.txt"))
attempt("sibling", lambda: write(cfg["sibling"] + "/pwned.txt"))
attempt("ssh_canary", lambda: cfg["secret"] in open(cfg["home"] + "/.ssh/id_ed25519").read())
attempt("outside_host", lambda: fetch(cfg["outside"]))
attempt("own_clone", lambda: write("built.txt"))
attempt("own_history", lambda: git("log", "-1", "--format=%H"))
attempt("own_commit", lambda: git("commit", "-q", "--allow-empty", "-m", "a gate's own commit"))
attempt("home", lambda: write(os.path.expanduser("~/.gate-home")))
attempt("tmp", lambda: write("/tmp/gate-tmp"))
attempt("cache", lambda: os.makedirs(os.environ.get("npm_config_cache", "/tmp/npm"), exist_ok=True) or True)
attempt("allowed_host", lambda: fetch(cfg["allowed"]))
attempt("pinned_host", lambda: fetch(cfg["allowed"], "mirror.example.test"))  # [sandbox] resolve: no lookup
with open(cfg["out"], "w") as fh: json.dump(out, fh)
sys.exit(0 if all(out[k] == "ok" for k in HONEST_NAMES) else 9)
'''.replace("HONEST_NAMES", repr(HONEST))


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[int, int]]:
    """(an allowed port, a port outside the allow-list): two HTTP servers on 127.0.0.1."""
    made = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello) for _ in range(2)]
    for s in made:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield made[0].server_address[1], made[1].server_address[1]
    for s in made:
        s.shutdown()
        s.server_close()


@pytest.fixture
def world(repo: Path, tmp_path: Path, servers: tuple[int, int]) -> Iterator[dict[str, Any]]:
    from exo_cli.adapters.git import add_exclude

    add_exclude(repo / ".git", "/.exo/")
    shared = tmp_path / "shared"  # the [sandbox] paths folder: the gate's script and what it reports
    shared.mkdir()
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET)
    sibling = pr_of(repo, "sib", {"s.txt": "s\n"})
    (shared / "gate.py").write_text(GATE)
    cfg = {"repo": str(repo), "db": str(env_for(repo).state_dir / "exo.db"), "home": str(home),
           "secret": SECRET, "sibling": str(repo / ".exo" / "worktrees" / "sib"), "allowed": servers[0],
           "outside": servers[1]}
    yield {"repo": repo, "shared": shared, "cfg": cfg, "sibling_pr": sibling, "servers": servers}


def configure(w: dict[str, Any], mode: str) -> Path:
    """The gate runs ``gate.py`` with ``mode``; where its report goes."""
    out = w["shared"] / f"report-{mode}.json"
    (w["shared"] / f"cfg-{mode}.json").write_text(json.dumps({**w["cfg"], "out": str(out)}))
    gate = f"python3 {w['shared'] / 'gate.py'} {w['shared'] / f'cfg-{mode}.json'}"
    setup = f"touch {w['repo'] / f'setup-{mode}.txt'} 2>/dev/null; true"  # [merge] setup: the same walls
    (w["repo"] / ".exo" / "config.toml").write_text(
        f'[sandbox]\nmode = "{mode}"\npaths = [{json.dumps(str(w["shared"]))}]\n'
        f'allow_hosts = ["127.0.0.1:{w["servers"][0]}", "mirror.example.test:{w["servers"][0]}"]\n'
        f'resolve = {{ "mirror.example.test" = "127.0.0.1:{w["servers"][0]}" }}\n'
        f"[merge]\nwindow = 0\nsetup = [{json.dumps(setup)}]\n"
        f"[[merge.gates]]\ncommand = {json.dumps(gate)}\ntimeout = 120\n")
    return out


def test_a_sandboxed_gate_is_refused_every_attack_and_passes_honest_work(world: dict[str, Any]) -> None:
    repo = world["repo"]
    report = configure(world, "on")
    n = pr_of(repo, "w0", {"a.txt": "a\n"})
    enqueue(repo, n)
    assert advance(env_for(repo), "main") == 1
    got = json.loads(report.read_text())
    assert {k: got[k] for k in HONEST} == dict.fromkeys(HONEST, "ok")
    assert got["pinned_host"] == "ok"  # a name [sandbox] resolve pins, reached through the proxy
    refused = {k: got[k].startswith("refused") for k in ATTACKS}
    assert refused == dict.fromkeys(ATTACKS, True), got
    assert entry(repo, n)["pr_state"] == "merged" and git(repo, "rev-parse", "main") in passed(repo)
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/pwned", check=False) == ""
    assert git(repo, "config", "exo.pwned", check=False) == "" and not (repo / "pwned.txt").exists()
    assert not (repo / "setup-on.txt").exists()
    env = env_for(repo)
    assert os.listdir(Path(mq.folder(env, "main"), "clones")) == []  # the clone and its HOME are gone
    assert os.path.isdir(Path(mq.folder(env, "main"), "cache", "npm"))  # the package cache stays for the next run

    # the same gate unsandboxed: each attack succeeds, so each refusal above was the sandbox's
    report = configure(world, "off")
    m = pr_of(repo, "w1", {"b.txt": "b\n"})
    enqueue(repo, m)
    assert advance(env_for(repo), "main") == 1
    got = json.loads(report.read_text())
    assert {k: got[k] for k in ATTACKS} == dict.fromkeys(ATTACKS, "ok"), got
    assert git(repo, "config", "exo.pwned") == "yes" and (repo / "pwned.txt").exists()
    assert (repo / "setup-off.txt").exists()


def test_the_deadline_ends_the_whole_sandbox(world: dict[str, Any], tmp_path: Path) -> None:
    from exo_cli.adapters.gates import make_clone, run_gate

    repo = world["repo"]
    configure(world, "on")
    env = env_for(repo)
    clone = os.path.join(mq.folder(env, "main"), "clones", "deadline")
    make_clone(env.repo.common_dir, clone, git(repo, "rev-parse", "main"))
    marker = "31337"  # a sleeper started inside, in a session of its own: found on the host by its argv
    command = f"setsid sleep {marker} & sleep {marker} & echo started; sleep {marker}"
    with gatesandbox.sandboxed(env, "main", clone, {"PATH": os.environ["PATH"]}) as plan:
        run = run_gate(clone, command, 2, {}, tmp_path / "gate.log", plan=plan)
    assert run.timed_out and not run.ok and "started" in run.tail

    wait_for(lambda: not sleepers(marker), timeout=60, what="every process of the sandbox ended")


def sleepers(marker: str) -> list[int]:
    """The processes running ``sleep <marker>`` (found on the host whatever pid namespace they are in)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == f"sleep\0{marker}\0".encode():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_kill_9_of_the_runner_mid_gate_ends_the_sandbox(world: dict[str, Any]) -> None:
    import signal
    import subprocess
    import sys

    repo = world["repo"]
    configure(world, "on")
    started, marker = world["shared"] / "started", "31338"
    gate = f"setsid sleep {marker} & sleep {marker} & touch {started}; sleep {marker}"
    (repo / ".exo" / "config.toml").write_text(
        f'[sandbox]\nmode = "on"\npaths = [{json.dumps(str(world["shared"]))}]\n'
        f"[merge]\nwindow = 0\n[[merge.gates]]\ncommand = {json.dumps(gate)}\ntimeout = 600\n")
    n = pr_of(repo, "w0", {"a.txt": "a\n"})
    enqueue(repo, n)
    runner = subprocess.Popen([sys.executable, "-m", "exo_cli", "pr", "queue", "--run", "--base", "main"], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(started.exists, timeout=120, what="the gate to start in its sandbox")
        wait_for(lambda: len(sleepers(marker)) == 3, timeout=60, what="the gate's three sleepers")
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=60)
    wait_for(lambda: not sleepers(marker), timeout=60, what="the sandbox to die with its runner")
    assert entry(repo, n)["pr_state"] == "open"  # the next runner tests it again


def test_mode_on_without_bubblewrap_stops_the_queue_and_bounces_nobody(world: dict[str, Any], tmp_path: Path) -> None:
    repo = world["repo"]
    configure(world, "on")
    n = pr_of(repo, "w0", {"a.txt": "a\n"})
    enqueue(repo, n)
    nobwrap = tmp_path / "bin"
    nobwrap.mkdir()
    for tool in ("git", "sh", "python3"):
        (nobwrap / tool).symlink_to(shutil.which(tool) or tool)
    env = env_for(repo, extra={"PATH": str(nobwrap)})
    with pytest.raises(EnvironmentError_, match="Cannot run the merge gates sandboxed"):
        gatesandbox.decide(env)
    assert advance(env, "main") == 0
    assert (entry(repo, n)["state"], entry(repo, n)["pr_state"]) == ("queued", "open")  # waits; nobody bounced
    told = [m.body for m in env_for(repo).store.messages(recipient="root", kinds=["pr-queued"])]
    assert any("Cannot run the merge gates sandboxed" in b and "stay queued" in b for b in told), told
    configure(world, "auto")  # where bubblewrap does not work, "auto" runs them unsandboxed
    assert gatesandbox.decide(env_for(repo, extra={"PATH": str(nobwrap)})) is False
    # [sandbox] mode left at its default: gates run as under auto (they run code agents wrote), "off" set is followed
    (repo / ".exo" / "config.toml").write_text("")
    assert gatesandbox.decide(env_for(repo)) is (shutil.which("bwrap") is not None)
    assert gatesandbox.decide(env_for(repo, extra={"PATH": str(nobwrap)})) is False
    (repo / ".exo" / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    assert gatesandbox.decide(env_for(repo)) is False


def test_the_gate_plan_hides_what_an_agents_plan_hides(world: dict[str, Any]) -> None:
    """What hides each target above is the plan's own rule (pytest's /tmp is hidden from every sandbox too)."""
    repo = world["repo"]
    configure(world, "on")
    env = env_for(repo)
    clone = os.path.join(mq.folder(env, "main"), "clones", "plan")
    home = os.environ["HOME"]
    with gatesandbox.sandboxed(env, "main", clone, {"PATH": "/usr/bin", "SSH_AUTH_SOCK": "/x/agent.sock",
                                                    "SECRET_TOKEN": "t", "GIT_AUTHOR_NAME": "Exo Test",
                                                    "GIT_AUTHOR_EMAIL": "exo@example.invalid"}) as plan:
        hidden = set(plan.hidden) | set(plan.hidden_files)
        real = os.path.realpath
        assert {real(repo), real(env.state_dir), real(env.worktree_root), real(home + "/.ssh")} <= hidden
        assert plan.readable == (os.path.join(real(repo), ".git"),)  # its objects, read-only; never its config:
        assert (str(Path(mq.folder(env, "main"), "git-config")), os.path.join(real(repo), ".git", "config")) in plan.files
        assert plan.writable[:3] == (real(clone), real(gatesandbox.home_of(clone)), real(Path(mq.folder(env, "main"), "cache")))
        assert plan.cwd == clone and plan.env["HOME"] == gatesandbox.home_of(clone)
        assert 'name = "Exo Test"' in Path(gatesandbox.home_of(clone), ".gitconfig").read_text()  # the user's identity
        assert "SSH_AUTH_SOCK" not in plan.env and "SECRET_TOKEN" not in plan.env
        assert plan.network.kind == "bridge" and os.path.isdir(plan.network.binds[0][0])  # the proxy's socket folder
    (world["repo"] / ".exo" / "config.toml").write_text('[sandbox]\nmode = "on"\n')
    with gatesandbox.sandboxed(env_for(repo), "main", clone, {}) as plan:
        assert plan.network.kind == "none"  # no allow_hosts: no network at all
