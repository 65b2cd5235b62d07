"""The Zellij backend with an injected runner (Zellij cannot be installed here).

The fake runner records every argv and plays Zellij's part for ``new-tab``: it
parses the generated KDL layout and starts the agent pane's command the way
Zellij would, so the launcher, environment and pid reporting run for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_zellij import child, find_pane, panes, parse_kdl

from conftest import wait_for
from exo_cli.adapters.mux import get_mux
from exo_cli.adapters.mux.zellij import (
    NOT_IN_ZELLIJ,
    PANE_VARS,
    Zellij,
    in_zellij,
    layout_kdl,
    require_zellij,
)
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError

PY = sys.executable

# --------------------------------------------------------------------------- fake zellij


class FakeZellij:
    """Records argv lists; runs every pane of a new tab like Zellij would; plays a screen.

    ``echo`` makes typed characters and Enter show on the screen (a program that echoes its
    input); ``ignore_enters`` swallows that many Enter presses first (a TUI not ready yet).
    """

    def __init__(self, tmp_path: Path, pane_env: dict[str, str]) -> None:
        self.calls: list[list[str]] = []
        self.layouts: list[str] = []
        self.children: list[subprocess.Popen] = []
        self.pane_env = pane_env
        self.screen = "line a\nline b\nlast line\n"
        self.echo = False
        self.ignore_enters = 0

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        action = argv[4:]
        if action[0] == "new-tab":
            layout = Path(action[action.index("--layout") + 1]).read_text()
            self.layouts.append(layout)
            for name in ("agent", "process-compose", "logs"):
                pane = find_pane(parse_kdl(layout), name)
                if pane is None:
                    continue
                cmd = [child(pane, "command")["args"][0], *child(pane, "args")["args"]]
                cwd = child(pane, "cwd")["args"][0]
                self.children.append(
                    subprocess.Popen(
                        cmd, cwd=cwd, env=self.pane_env, start_new_session=True, stdin=subprocess.DEVNULL
                    )
                )
        elif action[0] == "dump-screen":
            Path(action[-1]).write_text(self.screen)
        elif action[0] == "write-chars" and self.echo:
            self.screen += action[-1]
        elif action[:2] == ["write", "13"] and self.echo:
            if self.ignore_enters:
                self.ignore_enters -= 1
            else:
                self.screen += "\n(submitted)\n"
        return subprocess.CompletedProcess(argv, 0, "", "")

    def actions(self) -> list[list[str]]:
        return [c[4:] for c in self.calls]


@pytest.fixture
def fake(tmp_path):
    pane_env = {
        "PATH": os.environ["PATH"],
        "ZELLIJ": "0",
        "ZELLIJ_SESSION_NAME": "work",
        "ZELLIJ_PANE_ID": "3",
        "TERM": "xterm-256color",
        "SERVER_ONLY_SECRET": "zellij server env must not leak",
    }
    f = FakeZellij(tmp_path, pane_env)
    yield f
    for p in f.children:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture
def zj(tmp_path, fake):
    return Zellij("work", runtime_dir=tmp_path / "rt", run=fake, environ={})


def test_environment_checks(tmp_path):
    assert not in_zellij({})
    assert in_zellij({"ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "s"})
    assert require_zellij({"ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "s"}) == "s"
    with pytest.raises(EnvironmentError_) as err:
        Zellij(None, runtime_dir=tmp_path, run=lambda a: None, environ={})
    assert str(err.value) == NOT_IN_ZELLIJ == (
        "exo is not running inside a Zellij session: --mux zellij opens agents as tabs of the session it runs in")
    assert err.value.rpc_code == -32005
    with pytest.raises(EnvironmentError_):
        Zellij("s", runtime_dir=tmp_path, binary="zellij-does-not-exist-here")
    monkey_env = {"ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "cur"}
    z = Zellij(None, runtime_dir=tmp_path, run=lambda a: None, environ=monkey_env)
    assert z.session == "cur"


def test_start_command_lines_env_and_pid(zj, fake, tmp_path, monkeypatch):
    monkeypatch.setenv("EXO_TEST_CANARY", "must-not-leak")
    out = tmp_path / "seen.json"
    prog = textwrap.dedent(
        """
        import json, os, sys, time
        json.dump({"env": dict(os.environ), "argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(),
                   "ppid": os.getppid(), "pgid": os.getpgid(0)},
                  open(os.environ["OUT"] + ".tmp", "w"))
        os.replace(os.environ["OUT"] + ".tmp", os.environ["OUT"])
        time.sleep(60)
        """
    )
    given = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "OUT": str(out), "API_KEY": "sk-secret"}
    args = ["-x", "$(y)", "a b;"]
    loc = zj.start("agent1", [PY, "-c", prog, *args], cwd=tmp_path, env=given)
    (new_tab,) = fake.calls
    assert new_tab[:5] == ["zellij", "--session", "work", "action", "new-tab"]
    layout_path = new_tab[6]
    assert new_tab[4:] == ["new-tab", "--layout", layout_path, "--cwd", str(tmp_path), "--name", "agent1"]
    assert not Path(layout_path).exists()  # cleaned up after the tab opened
    assert "sk-secret" not in fake.layouts[0]  # secrets never in the layout file
    seen = wait_for(lambda: out.exists() and json.loads(out.read_text()), what="agent output")
    assert seen["argv"] == args and seen["cwd"] == str(tmp_path)
    assert "EXO_TEST_CANARY" not in seen["env"] and "SERVER_ONLY_SECRET" not in seen["env"]
    assert set(seen["env"]) - set(given) <= set(PANE_VARS)
    assert {k: seen["env"][k] for k in given} == given
    assert seen["env"]["ZELLIJ_PANE_ID"] == "3"
    # the pane's process is exo's launcher, which runs the agent as its child to report its exit status
    assert loc.pid == seen["ppid"] == seen["pgid"] == loc.pgid and loc.tab == "agent1" and loc.mux == "zellij"
    assert zj.alive(loc)
    states = zj.list_states()
    assert list(states) == ["agent1"] and states["agent1"].alive
    assert len(fake.calls) == 1  # listing and liveness need no zellij call


def test_send_capture_close_command_lines(zj, fake, tmp_path):
    loc = zj.start(
        "a2", [PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env={"PATH": os.environ["PATH"]}
    )
    fake.calls.clear()
    zj.send_text(loc, "-leading; $(x) `y` 'q'\nnext", enter_delay=0.0)
    actions = fake.actions()
    assert [a for a in actions if a[0] != "dump-screen"] == [
        ["go-to-tab-name", "a2"],
        ["write-chars", "--", "-leading; $(x) `y` 'q'\nnext"],
        ["write", "13"],
    ]
    # the screen did not change when typing (no echo): nothing to confirm against, one Enter
    assert [a[0] for a in actions].count("write") == 1
    fake.calls.clear()
    zj.send_text(loc, "x" * 40000, submit=False)
    assert [a[0] for a in fake.actions()] == ["go-to-tab-name", "write-chars", "write-chars", "write-chars"]
    assert "".join(a[2] for a in fake.actions()[1:]) == "x" * 40000
    with pytest.raises(InvalidInput):
        zj.send_text(loc, "nul\x00")
    # Control characters are typed as visible text: nothing in a message acts as a key.
    fake.calls.clear()
    zj.send_text(loc, "a\x1b[Z\x03\rb\x9b2J\udcff\tc", enter_delay=0.0)
    assert [a for a in fake.actions() if a[0] != "dump-screen"] == [
        ["go-to-tab-name", "a2"], ["write-chars", "--", "a^[[Z^C^MbM-^[2J\ufffd\tc"], ["write", "13"]]
    fake.calls.clear()
    assert zj.capture(loc, 2) == "line b\nlast line\n"
    (goto, dump) = fake.actions()
    assert goto == ["go-to-tab-name", "a2"] and dump[:2] == ["dump-screen", "--full"]
    assert not Path(dump[2]).exists()
    with pytest.raises(StateError):
        zj.close(loc)
    fake.calls.clear()
    zj.close(loc, force=True)
    assert fake.actions() == [["go-to-tab-name", "a2"], ["close-tab"]]
    assert not zj.alive(loc) and zj.list_states() == {}
    with pytest.raises(StateError):
        zj.send_text(loc, "too late")


def test_attach_argv(tmp_path, fake):
    inside = Zellij(
        "work", runtime_dir=tmp_path, run=fake, environ={"ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "work"}
    )
    outside = Zellij("work", runtime_dir=tmp_path, run=fake, environ={})
    from exo_cli.adapters.mux import Location

    loc = Location(mux="zellij", session="work", tab="4hj", name="4hj", pid=1)
    assert inside.attach_argv(loc) == ["zellij", "--session", "work", "action", "go-to-tab-name", "4hj"]
    assert outside.attach_argv(loc) == ["zellij", "attach", "work"]


def test_layout_with_services_has_agent_and_services_panes():
    argv = [PY, "-I", "-S", "/x/_launch.py", '/run/a "quoted"\\path\n']
    nodes = parse_kdl(layout_kdl(argv, "/work/tree", services=True))
    (layout,) = nodes
    assert layout["name"] == "layout"
    template = child(layout, "default_tab_template")
    assert [c["name"] for c in template["children"]] == ["pane", "children", "pane"]
    (split,) = panes(layout)
    assert split["props"] == {"split_direction": "vertical"}
    agent, side = panes(split)
    assert agent["props"] == {"name": "agent", "size": "60%", "focus": True}
    assert child(agent, "command")["args"] == [PY]
    assert child(agent, "args")["args"] == argv[1:]  # escaping round-trips
    assert child(agent, "cwd")["args"] == ["/work/tree"]
    assert side["props"] == {"split_direction": "horizontal", "size": "40%", "stacked": True}
    pc, logs = panes(side)
    assert pc["props"]["name"] == "process-compose" and logs["props"]["name"] == "logs"
    assert child(pc, "command")["args"] == ["process-compose"]
    pc_args = child(pc, "args")["args"]
    assert pc_args[0] == "up" and "--log-file" in pc_args
    log = pc_args[pc_args.index("--log-file") + 1]
    assert child(logs, "command")["args"] == ["tail"] and child(logs, "args")["args"] == ["-F", log]


def test_layout_without_services_and_escaping():
    weird = 'a"b\\c\td\x01e'
    nodes = parse_kdl(layout_kdl(["agent", weird], "/w", services=False, tab_bars=False))
    (layout,) = nodes
    (agent,) = panes(layout)
    assert agent["props"] == {"name": "agent", "focus": True}
    assert child(agent, "args")["args"] == [weird]
    with pytest.raises(InvalidInput):
        layout_kdl([], "/w", services=False)


def test_get_mux_zellij_works_outside_zellij(tmp_path, monkeypatch, zj, fake):
    """Listing and stopping recorded Zellij agents needs no Zellij session (issue: exit 7 from a shell)."""
    monkeypatch.delenv("ZELLIJ", raising=False)
    monkeypatch.delenv("ZELLIJ_SESSION_NAME", raising=False)
    loc = zj.start("far", [PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    mux = get_mux("zellij", repo_id="r", runtime_dir=tmp_path / "rt", session="main")
    states = mux.list_states([loc])
    assert states["far"].alive and isinstance(states["far"].activity, str)
    mux.kill(loc, grace=0.5)
    assert not mux.list_states([loc])["far"].alive
    # an action that needs Zellij targets the session recorded in the location
    outside = Zellij(None, runtime_dir=tmp_path / "rt", run=fake, environ={}, require=False)
    fake.calls.clear()
    outside.capture(loc, 1)
    assert fake.calls[0][:3] == ["zellij", "--session", "work"]


def test_typing_is_confirmed_like_tmux(zj, fake, tmp_path):
    loc = zj.start("tty", [PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    fake.echo = True
    fake.ignore_enters = 1  # the first Enter is lost: it is pressed again, the text is never retyped
    fake.calls.clear()
    zj.send_text(loc, "hello", enter_delay=0.0)
    kinds = [a[0] for a in fake.actions()]
    assert kinds.count("write-chars") == 1 and kinds.count("write") == 2
    assert fake.screen.endswith("hello\n(submitted)\n")
    fake.calls.clear()
    zj.send_text(loc, "again", enter_delay=0.0)
    kinds = [a[0] for a in fake.actions()]
    assert kinds.count("write-chars") == 1 and kinds.count("write") == 1


def test_exit_status_and_services_panes(zj, fake, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pc = bindir / "process-compose"
    pc.write_text(f"#!{PY}\nimport json, os, sys, time\n"
                  f"open({str(tmp_path / 'pc.json')!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'cwd': os.getcwd(), "
                  f"'port': os.environ.get('WEB_PORT')}}))\ntime.sleep(60)\n")
    pc.chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "WEB_PORT": "4100"}
    svc_argv = ["process-compose", "up", "--config", str(tmp_path / ".exo" / "process-compose.yaml")]
    loc = zj.start("svc", [PY, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"], cwd=tmp_path, env=env,
                   services_argv=svc_argv, services_log=str(tmp_path / ".exo" / "logs" / "pc.log"))
    seen = wait_for(lambda: (tmp_path / "pc.json").exists() and json.loads((tmp_path / "pc.json").read_text()),
                    what="process-compose started")
    assert seen["argv"] == svc_argv[1:] and seen["port"] == "4100"  # the agent's environment, config by path
    services = zj.service_locations(loc)
    assert [s.name for s in services] == ["svc:process-compose", "svc:logs"]
    assert all(zj.alive(s) for s in services)
    wait_for(lambda: not zj.alive(loc), what="agent exit")
    assert zj.list_states([loc])["svc"].dead_status == 3
    zj.close(loc, force=True)
    assert not any(zj.alive(s) for s in services)
