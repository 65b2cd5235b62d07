"""Attacks from a shell inside a sandboxed dev agent (issue 31, item 6), each refused by the sandbox.

One world, as a team of agents leaves it: a repository (packed, with a ``.env``) and exo's
state in it (SQLite, and PostgreSQL through its socket with the run's private cluster), the
agent's own ``git clone --shared`` and a sibling's, the team broker's runtime folder with this
agent's socket and another's, a tmux server, the user's real HOME with a canary in ``~/.ssh``,
``~/.claude/settings.json`` and ``~/.bashrc``, and a canary in the spawning environment. The same
script runs first inside the sandbox (every attack refused, the agent's own commit and socket
work, nothing changed on the host) and then without it (every attack succeeds: each test
can fail).

pytest's folders live under /tmp, which every sandbox hides; the world's folder is shown again
read-only (as a repository under /home is), so what hides each target is the plan's own rule.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from exo_cli.adapters import sandbox
from exo_cli.adapters.sandbox_home import make_home

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")

ATTACKS = ("sqlite", "postgres", "hooks_path", "move_main", "delete_pack", "write_sibling", "write_main",
           "read_env", "other_socket", "tmux", "ssh_canary", "env_canary", "claude_settings", "bashrc",
           "replace_own_socket")
SECRET = "sk-canary-4f1d"

SCRIPT = r'''
import json, os, socket, subprocess, sys
cfg = json.loads(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok" if fn() else "refused: no effect"
    except Exception as exc:  # every refusal is an exception: permission, read-only, missing
        out[name] = "refused: %s" % (exc,)
def sqlite():
    import sqlite3
    db = sqlite3.connect(cfg["db"]); db.execute("CREATE TABLE pwned(x)"); db.commit(); return True
def postgres():
    import psycopg
    with psycopg.connect(cfg["pg"], connect_timeout=5, autocommit=True) as c:
        c.execute("CREATE TABLE pwned_%d()" % os.getpid()); return True
def git(*args):
    return subprocess.run(["git", *args], capture_output=True, timeout=60).returncode == 0
def write(path):
    with open(path, "a") as fh: fh.write("pwned\n")
    return True
def talk(path):
    s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(path); return s.recv(2) == b"hi"
def commit():
    with open("agent.txt", "a") as fh: fh.write("work\n")
    return git("add", "agent.txt") and git("commit", "-q", "-m", "agent work")
attempt("commit", commit)  # first: the attacks below break the repository it borrows objects from
attempt("sqlite", sqlite)
attempt("postgres", postgres)
attempt("hooks_path", lambda: git("-C", cfg["repo"], "config", "core.hooksPath", "/nowhere"))
attempt("move_main", lambda: git("-C", cfg["repo"], "update-ref", "refs/heads/main", cfg["first"]))
attempt("delete_pack", lambda: os.unlink(cfg["pack"]) or True)
attempt("write_sibling", lambda: write(cfg["sibling"] + "/README.md"))
attempt("write_main", lambda: write(cfg["repo"] + "/README.md"))
attempt("read_env", lambda: open(cfg["repo"] + "/.env").read().strip() == cfg["secret"])
attempt("other_socket", lambda: talk(cfg["other"]))
attempt("tmux", lambda: subprocess.run(["tmux", "-S", cfg["tmux"], "new-window", "-d", "touch " + cfg["marker"]],
                                       capture_output=True, timeout=30).returncode == 0)
attempt("ssh_canary", lambda: cfg["secret"] in open(cfg["home"] + "/.ssh/id_ed25519").read())
attempt("env_canary", lambda: cfg["secret"] in os.environ.get("CANARY_TOKEN", ""))
attempt("claude_settings", lambda: write(cfg["home"] + "/.claude/settings.json"))
attempt("bashrc", lambda: write(cfg["home"] + "/.bashrc"))
attempt("own_socket", lambda: talk(cfg["own"]))
attempt("replace_own_socket", lambda: os.unlink(cfg["own"]) or True)
print(json.dumps(out))
'''


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _serve(path: Path) -> socket.socket:
    """A socket that answers ``hi`` to each connection (an agent's socket to the broker)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"hi")
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return srv


@pytest.fixture
def world(tmp_path: Path, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    w = tmp_path / "world"
    repo = w / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# r\n")
    (repo / ".env").write_text(SECRET + "\n")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-q", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "b.txt").write_text("b\n")
    _git(repo, "add", "b.txt")
    _git(repo, "commit", "-q", "-m", "two")
    _git(repo, "gc", "-q")
    pack = next((repo / ".git" / "objects" / "pack").glob("*.pack"))
    from exo_cli.env import Env

    store = Env(cwd=repo).store  # exo's real SQLite state, in the repository's .git/exo
    store.agents()
    db = next((repo / ".git" / "exo").glob("*.db"))
    checkouts = w / "checkouts"
    checkouts.mkdir()
    for name in ("me", "sib"):
        subprocess.run(["git", "clone", "-q", "--shared", str(repo), str(checkouts / name)], check=True)
        _git(checkouts / name, "checkout", "-q", "-b", f"exo/{name}")
    home = Path(os.environ["HOME"])  # the test's HOME: the user's real one, as far as the sandbox knows
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text(SECRET)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text("{}")
    (home / ".bashrc").write_text("# mine\n")
    runtime = w / "rt"
    servers = [_serve(runtime / "s" / "me" / "sock"), _serve(runtime / "s" / "other" / "sock")]
    tmux_dir = w / "tt"
    tmux_dir.mkdir()
    monkeypatch.setenv("TMUX_TMPDIR", str(tmux_dir))
    subprocess.run(["tmux", "-L", "exo-sbx", "new-session", "-d", "-s", "x", "sleep 600"], check=True)
    tmux_sock = str(tmux_dir / f"tmux-{os.getuid()}" / "exo-sbx")
    monkeypatch.setenv("TMUX", f"{tmux_sock},1,0")
    monkeypatch.setenv("CANARY_TOKEN", SECRET)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(w / "agent-sock-folder" / "agent.1"))
    private, cache = w / "agents" / "me" / "home", w / "agents" / "me" / "cache"
    cache.mkdir(parents=True)
    binds = make_home(private, real_home=home, cli="claude", clone=str(checkouts / "me"), environ=os.environ,
                      identity={"name": "Agent", "email": "agent@example.invalid"})
    git_config = w / "agents" / "me" / "git-config"
    git_config.write_text(sandbox.clean_git_config((repo / ".git" / "config").read_text()))
    agent = sandbox.Agent(clone=str(checkouts / "me"), repository=str(repo), state_dir=str(repo / ".git" / "exo"),
                          runtime_dir=str(runtime), home=str(home), private_home=str(private), cache=str(cache),
                          empty=sandbox.ensure_empty_file(w / "empty"), socket_dir=str(runtime / "s" / "me"),
                          checkouts=str(checkouts), git_config=str(git_config), credentials=tuple(binds))
    cfg = {"db": str(db), "pg": pg_cluster.url(), "repo": str(repo), "first": first, "pack": str(pack),
           "sibling": str(checkouts / "sib"), "secret": SECRET, "other": str(runtime / "s" / "other" / "sock"),
           "own": str(runtime / "s" / "me" / "sock"), "tmux": tmux_sock, "marker": str(w / "tmux-marker"),
           "home": str(home)}
    argv = [sys.executable, "-c", SCRIPT, json.dumps(cfg)]
    plan = sandbox.assemble(agent, argv, cli="claude", environ=os.environ, store_url=pg_cluster.url(),
                            tmux_socket=tmux_sock)
    # the world's folder, the HOME and the cluster's folder are seen as they would be outside /tmp: read-only, not hidden
    plan = dataclasses.replace(plan, readable=(*plan.readable, str(w), str(home), str(pg_cluster.root)))
    yield plan, cfg, argv
    subprocess.run(["tmux", "-L", "exo-sbx", "kill-server"], capture_output=True)
    for srv in servers:
        srv.close()


def _host_state(cfg: dict[str, str]) -> dict[str, object]:
    repo = Path(cfg["repo"])
    return {"main": _git(repo, "rev-parse", "main"), "hooks": _git(repo, "config", "--default", "", "core.hooksPath"),
            "pack": os.path.exists(cfg["pack"]), "readme": (repo / "README.md").read_text(),
            "sibling": (Path(cfg["sibling"]) / "README.md").read_text(), "marker": os.path.exists(cfg["marker"]),
            "bashrc": (Path(cfg["home"]) / ".bashrc").read_text(),
            "settings": (Path(cfg["home"]) / ".claude" / "settings.json").read_text()}


def test_every_attack_refused_inside_and_succeeds_outside(world: Any) -> None:
    plan, cfg, argv = world
    before = _host_state(cfg)
    done = sandbox.run(plan, timeout=120)
    assert done.code == 0, done.err.decode()
    inside = json.loads(done.out.decode().strip().splitlines()[-1])
    assert {k: v.split(":")[0] for k, v in inside.items()} == {
        **dict.fromkeys(ATTACKS, "refused"), "own_socket": "ok", "commit": "ok"}, inside
    assert _host_state(cfg) == before  # nothing changed on the host
    clone = Path(plan.cwd)
    assert _git(clone, "log", "-1", "--format=%s") == "agent work"
    repo = Path(cfg["repo"])
    _git(repo, "fetch", "-q", str(clone), "+refs/heads/exo/me:refs/exo/me/exo/me")  # the work comes back
    assert _git(repo, "log", "-1", "--format=%s", "refs/exo/me/exo/me") == "agent work"

    # the same script without the sandbox: every attack works (so each one above could have failed)
    outside = subprocess.run(argv, cwd=clone, capture_output=True, text=True, timeout=120)
    results = json.loads(outside.stdout.strip().splitlines()[-1])
    assert results == dict.fromkeys([*ATTACKS, "own_socket", "commit"], "ok"), results


def test_tiocsti_cannot_type_into_the_terminal(tmp_path: Path) -> None:
    """A keystroke pushed into the shared terminal (TIOCSTI) is refused inside; it lands without the sandbox."""
    import fcntl
    import select
    import termios

    try:
        legacy = Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip()
    except OSError:
        legacy = "1"
    if legacy == "0":
        pytest.skip("this kernel refuses TIOCSTI for everyone (dev.tty.legacy_tiocsti = 0)")
    inject = ("import fcntl, termios\n"
              "for c in b'echo INJECTED\\n':\n"
              "    fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))\n")
    empty = sandbox.ensure_empty_file(tmp_path / "empty")
    plan = sandbox.Plan(argv=(sys.executable, "-c", inject), cwd="/", env=dict(os.environ), empty=empty)

    def typed(argv: list[str]) -> tuple[int, bytes]:
        leader, follower = os.openpty()
        try:
            child = subprocess.Popen(argv, stdin=follower, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True,  # the pty is the child's controlling terminal
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
            _, err = child.communicate(timeout=60)
            got = b""
            while select.select([follower], [], [], 0.5)[0]:  # what the terminal's next reader would get
                got += os.read(follower, 1024)
                if b"\n" in got:
                    break
            return child.returncode, got + err
        finally:
            os.close(leader)
            os.close(follower)

    argv, _ = sandbox.build(plan)
    code, got = typed(argv)
    assert b"INJECTED" not in got.split(b"Traceback")[0] and b"Operation not permitted" in got and code != 0
    code, got = typed([sys.executable, "-c", inject])
    assert code == 0 and got.startswith(b"echo INJECTED")
