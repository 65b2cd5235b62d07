"""The tmux backend against a real tmux server on a private socket."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from conftest import wait_for
from exo_cli.adapters.mux import Location, get_mux, runtime_dir_for
from exo_cli.adapters.mux.tmux import PANE_VARS, Tmux
from exo_cli.adapters.proc import pid_alive
from exo_cli.errors import InvalidInput, NotFound, StateError

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

PY = sys.executable
TRICKY = 'it\'s "quoted" $(touch /tmp/pwned) `id` $HOME \\ back; -leading ünïcødé 日本 ✓;'


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(f"exo-test-{uuid.uuid4().hex[:10]}", "exotest", runtime_dir=tmp_path / "rt")
    yield t
    t.kill_server()


@pytest.fixture
def env(tmp_path):
    return {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "HOME": str(tmp_path)}


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [PY, str(path)]


SLEEPER = [PY, "-c", "import time; time.sleep(120)"]

# Reads the terminal in raw mode after asking for bracketed paste; appends every byte to OUT.
RAW_READER = """
    import os, sys, tty
    out = sys.argv[1]
    tty.setraw(0)
    os.write(1, b"\\x1b[?2004hREADY\\r\\n")
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        with open(out, "ab") as fh:
            fh.write(data)
"""

# A plain line reader in the terminal's normal (cooked) mode.
COOKED_READER = """
    import sys
    out = sys.argv[1]
    print("READY", flush=True)
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            break
        with open(out, "ab") as fh:
            fh.write(line)
"""


def test_three_windows_one_batched_list_call(tmux, tmp_path, env):
    locs = [tmux.start(f"agent{i}", SLEEPER, cwd=tmp_path, env=env) for i in range(3)]
    # start() returns once the launcher has its request; the pane shows the launcher's shell
    # until it execs the agent, which a loaded machine may take a while to do.
    wait_for(lambda: all("python" in (s.current_command or "") for s in tmux.list_states().values()),
             what="every pane to run the agent")
    calls = []
    real = tmux._exec

    def counting(*args, **kw):
        calls.append(args)
        return real(*args, **kw)

    tmux._exec = counting
    states = tmux.list_states()
    tmux._exec = real
    assert len(calls) == 1 and calls[0][0] == "list-panes"
    assert set(states) == {loc.pane for loc in locs}
    for loc in locs:
        st = states[loc.pane]
        assert st.alive and st.dead_status is None
        assert st.pid == loc.pid == loc.pgid and pid_alive(loc.pid, loc.start_time)
        assert st.location.name == loc.name and st.location.window == loc.window
        assert "python" in (st.current_command or "")
        assert tmux.alive(loc)
    assert Location.from_dict(json.loads(json.dumps(locs[0].to_dict()))) == locs[0]


def test_agent_gets_exactly_the_given_env_argv_and_cwd(tmux, tmp_path, env, monkeypatch):
    monkeypatch.setenv("EXO_TEST_CANARY", "must-not-leak")
    out = tmp_path / "seen.json"
    prog = script(
        tmp_path,
        "dump",
        """
        import json, os, sys, time
        json.dump({"env": dict(os.environ), "argv": sys.argv[2:], "cwd": os.getcwd(),
                   "pid": os.getpid(), "pgid": os.getpgid(0)}, open(sys.argv[1] + ".tmp", "w"))
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(60)
        """,
    )
    work = tmp_path / "work dir"
    work.mkdir()
    given = dict(env, EXO_AGENT="a1", WEIRD="a b 'c' \"d\" $(e) `f`\nline2", EMPTY="")
    args = ["two words", "$(rm -rf x)", "-leading", "semi;", TRICKY]
    loc = tmux.start("a1", [*prog, str(out), *args], cwd=work, env=given)
    seen = wait_for(lambda: out.exists() and json.loads(out.read_text()), what="agent output")
    assert "EXO_TEST_CANARY" not in seen["env"]
    extra = set(seen["env"]) - set(given)
    assert extra <= set(PANE_VARS)
    assert {k: seen["env"][k] for k in given} == given
    assert seen["env"]["TMUX_PANE"] == loc.pane
    assert seen["argv"] == args
    assert seen["cwd"] == str(work)
    assert seen["pid"] == loc.pid and seen["pgid"] == loc.pid
    # The long-running server itself never got the caller's environment either.
    assert "EXO_TEST_CANARY" not in tmux._exec("show-environment", "-g").stdout
    # The FIFO that carried the environment is gone.
    assert not any((tmux.runtime_dir / "fifo").iterdir())


def test_dead_pane_stays_readable_with_exit_status(tmux, tmp_path, env):
    loc = tmux.start(
        "quitter", [PY, "-c", "print('goodbye from agent'); raise SystemExit(7)"], cwd=tmp_path, env=env
    )
    state = wait_for(
        lambda: (s := tmux.list_states().get(loc.pane)) and not s.alive and s.dead_status is not None and s,
        what="pane death",
    )
    assert state.dead_status == 7
    assert not tmux.alive(loc)
    assert "goodbye from agent" in tmux.capture(loc, 100)
    with pytest.raises(StateError):
        tmux.send_text(loc, "hello")
    tmux.kill(loc)  # already dead: nothing to do
    tmux.close(loc)
    assert loc.pane not in tmux.list_states()


def test_close_refuses_live_agent_unless_forced(tmux, tmp_path, env):
    loc = tmux.start("live", SLEEPER, cwd=tmp_path, env=env)
    with pytest.raises(StateError):
        tmux.close(loc)
    tmux.close(loc, force=True)
    assert loc.pane not in tmux.list_states()
    assert not pid_alive(loc.pid)


def test_send_text_to_line_reader_arrives_intact(tmux, tmp_path, env):
    out = tmp_path / "got.bin"
    loc = tmux.start("cooked", [*script(tmp_path, "cooked", COOKED_READER), str(out)], cwd=tmp_path, env=env)
    wait_for(lambda: "READY" in tmux.capture(loc, 5), what="reader ready")
    text = TRICKY + "\nsecond line\n-third;"
    tmux.send_text(loc, text, enter_delay=0.1)
    expected = (text + "\n").encode("utf-8")
    got = wait_for(
        lambda: out.exists() and out.read_bytes().count(b"\n") >= 3 and out.read_bytes(), what="lines"
    )
    # A program that did not ask for bracketed paste gets no paste markers; the
    # terminal turns the pasted CRs back into newlines, Enter adds the last one.
    assert got == expected
    assert b"\x1b[200~" not in got
    assert not (Path("/tmp/pwned")).exists()


# Hostile text -> the exact bytes a raw-mode reader in the pane receives inside the paste.
HOSTILE_PASTES = [
    ("end the paste \x1b[201~then type", b"end the paste ^[[201~then type"),
    ("\x1b[Z shift-tab", b"^[[Z shift-tab"),
    ("stop\x03 it\x04", b"stop^C it^D"),
    ("carriage\rreturn", b"carriage^Mreturn"),
    ("windows\r\nline", b"windows\rline"),  # CRLF is a newline; tmux pastes a newline as CR
    ("clip\x1b]52;c;aGVsbG8=\x07 title\x1b]0;pwned\x1b\\", b"clip^[]52;c;aGVsbG8=^G title^[]0;pwned^[\\"),
    ("c1 csi \x9b31m nel \x85 st \x9c", b"c1 csi M-^[31m nel M-^E st M-^\\"),
    ("clear \x1b[2J\x1b[H del\x7f bell\x07 bs\x08", b"clear ^[[2J^[[H del^? bell^G bs^H"),
    ("bad utf-8 \udcff\udcfe end", "bad utf-8 \ufffd\ufffd end".encode()),
    ("tab\tand\nnewline stay", b"tab\tand\rnewline stay"),
]


@pytest.mark.parametrize(("text", "inside"), HOSTILE_PASTES, ids=[f"p{i}" for i in range(len(HOSTILE_PASTES))])
def test_hostile_text_reaches_a_raw_reader_as_visible_text(tmux, tmp_path, env, text, inside):
    """No C0/C1 control character but newline and tab reaches the pane: the paste cannot be ended early
    and nothing in it acts as a key; what arrives is exactly the bracketed paste, then one Enter."""
    out = tmp_path / "raw.bin"
    loc = tmux.start("raw", [*script(tmp_path, "raw", RAW_READER), str(out)], cwd=tmp_path, env=env)
    wait_for(lambda: "READY" in tmux.capture(loc, 5), what="reader ready")
    tmux.send_text(loc, text, enter_delay=0.05, confirm=False)
    got = wait_for(lambda: out.exists() and out.read_bytes().endswith(b"\x1b[201~\r") and out.read_bytes())
    assert got == b"\x1b[200~" + inside + b"\x1b[201~\r"
    assert got.count(b"\x1b") == 2 and not any(0x80 <= ord(c) <= 0x9F for c in got.decode("utf-8"))


def test_send_text_bracketed_paste_is_byte_exact(tmux, tmp_path, env):
    out = tmp_path / "raw.bin"
    loc = tmux.start("raw", [*script(tmp_path, "raw", RAW_READER), str(out)], cwd=tmp_path, env=env)
    wait_for(lambda: "READY" in tmux.capture(loc, 5), what="reader ready")
    text = TRICKY + "\nline two\n\n-x ;"
    tmux.send_text(loc, text, enter_delay=0.1)
    expected = b"\x1b[200~" + text.replace("\n", "\r").encode("utf-8") + b"\x1b[201~\r"
    got = wait_for(lambda: out.exists() and out.read_bytes().endswith(b"\x1b[201~\r") and out.read_bytes())
    # A TUI that asked for bracketed paste sees one paste (newlines as CR, as a
    # terminal pastes them) and then exactly one separate Enter.
    assert got == expected
    tmux.send_text(loc, "no enter", submit=False)
    wait_for(lambda: out.read_bytes().endswith(b"no enter\x1b[201~"), what="paste without Enter")


def test_concurrent_senders_do_not_interleave(tmux, tmp_path, env):
    out = tmp_path / "raw.bin"
    loc = tmux.start("busy", [*script(tmp_path, "raw", RAW_READER), str(out)], cwd=tmp_path, env=env)
    wait_for(lambda: "READY" in tmux.capture(loc, 5), what="reader ready")
    texts = [f"<{t}-{m}>" + (f"{t}{m} " * 300) + f"</{t}-{m}>" for t in range(4) for m in range(3)]
    errors = []

    def sender(t: int) -> None:
        try:
            for m in range(3):
                tmux.send_text(loc, texts[t * 3 + m], enter_delay=0.02)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    got = wait_for(lambda: out.read_bytes().count(b"\x1b[201~\r") >= len(texts) and out.read_bytes())
    segments = got.split(b"\x1b[200~")
    assert segments[0] == b""
    received = []
    for seg in segments[1:]:
        assert seg.endswith(b"\x1b[201~\r"), seg[-40:]
        received.append(seg[: -len(b"\x1b[201~\r")].decode())
    assert sorted(received) == sorted(texts)


def test_enter_is_retried_but_text_never_repasted(tmux, tmp_path, env):
    out = tmp_path / "raw.bin"
    # Echoes what it gets, ignores the first Enter (a swallowed Enter), accepts the second.
    prog = script(
        tmp_path,
        "swallow",
        """
        import os, sys, tty
        out = sys.argv[1]
        tty.setraw(0)
        os.write(1, b"\\x1b[?2004hREADY\\r\\n")
        enters = 0
        while True:
            data = os.read(0, 65536)
            with open(out, "ab") as fh:
                fh.write(data)
            shown = data.replace(b"\\x1b[200~", b"").replace(b"\\x1b[201~", b"").replace(b"\\r", b"")
            if shown:
                os.write(1, shown)
            enters += data.count(b"\\r")
            if enters >= 2:
                os.write(1, b"\\r\\nSUBMITTED\\r\\n")
                enters = -100
        """,
    )
    loc = tmux.start("swallow", [*prog, str(out)], cwd=tmp_path, env=env)
    wait_for(lambda: "READY" in tmux.capture(loc, 5), what="reader ready")
    tmux.confirm_timeout = 0.4
    tmux.send_text(loc, "hello agent", enter_delay=0.2)
    wait_for(lambda: "SUBMITTED" in tmux.capture(loc, 10), what="submission")
    got = out.read_bytes()
    assert got.count(b"\x1b[200~") == 1 and got.count(b"hello agent") == 1
    assert got.endswith(b"\x1b[201~\r\r")


def test_send_text_leaves_copy_mode_first(tmux, tmp_path, env):
    out = tmp_path / "got.bin"
    loc = tmux.start("copy", [*script(tmp_path, "cooked", COOKED_READER), str(out)], cwd=tmp_path, env=env)
    wait_for(lambda: "READY" in tmux.capture(loc, 5), what="reader ready")
    tmux._exec("copy-mode", "-t", loc.pane)
    assert tmux.list_states()[loc.pane].in_mode
    tmux.send_text(loc, "after copy mode", enter_delay=0.05)
    assert wait_for(lambda: out.exists() and out.read_bytes()) == b"after copy mode\n"
    assert not tmux.list_states()[loc.pane].in_mode


def test_send_text_refuses_nul_and_missing_pane(tmux, tmp_path, env):
    loc = tmux.start("nul", SLEEPER, cwd=tmp_path, env=env)
    with pytest.raises(InvalidInput):
        tmux.send_text(loc, "a\x00b")
    gone = Location(mux="tmux", session="exotest", pane="%999", pid=1)
    with pytest.raises(NotFound):
        tmux.send_text(gone, "hello")
    assert not tmux.alive(gone)


def test_kill_stops_the_whole_process_group(tmux, tmp_path, env):
    pids = tmp_path / "pids.json"
    prog = script(
        tmp_path,
        "family",
        """
        import json, os, signal, subprocess, sys, time
        # The stubborn child says when it ignores SIGTERM (a line on its stdout): only SIGKILL stops it then.
        stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                    "time.sleep(120)")
        child = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE)
        other_group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], process_group=0)
        child.stdout.readline()
        json.dump([child.pid, other_group.pid], open(sys.argv[1] + ".tmp", "w"))
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(120)
        """,
    )
    loc = tmux.start("family", [*prog, str(pids)], cwd=tmp_path, env=env)
    children = wait_for(lambda: pids.exists() and json.loads(pids.read_text()), what="children")
    assert all(pid_alive(p) for p in children)
    tmux.kill(loc, grace=0.5)
    assert not any(pid_alive(p) for p in [loc.pid, *children])
    state = wait_for(
        lambda: (s := tmux.list_states().get(loc.pane)) and not s.alive and s.dead_status is not None and s,
        what="dead pane",
    )
    assert state.dead_status in (-15, -9)  # killed by a signal; window kept (remain-on-exit)


def test_capture_returns_the_tail(tmux, tmp_path, env):
    prog = [PY, "-c", "import time\nfor i in range(1, 301): print(f'line {i}')\ntime.sleep(60)"]
    loc = tmux.start("chatty", prog, cwd=tmp_path, env=env)
    wait_for(lambda: "line 300" in tmux.capture(loc, 5), what="output")
    tail = tmux.capture(loc, 10)
    assert tail.splitlines() == [f"line {i}" for i in range(291, 301)]
    assert "line 200" in tmux.capture(loc, 120)


def test_no_server_means_no_agents(tmp_path):
    t = Tmux(f"exo-none-{uuid.uuid4().hex[:8]}", "nothing", runtime_dir=tmp_path / "rt")
    assert t.list_states() == {}
    assert not t.server_running()
    assert not t.alive(Location(mux="tmux", session="nothing", pane="%0", pid=1))
    t.kill_server()


def test_attach_argv_and_get_mux(tmp_path, monkeypatch):
    monkeypatch.delenv("TMUX", raising=False)
    rt = runtime_dir_for(f"test-{uuid.uuid4().hex}")
    try:
        assert (rt.stat().st_mode & 0o777) == 0o700 and len(str(rt)) < 60
        mux = get_mux("tmux", repo_id="r1", runtime_dir=rt, session="main")
        assert isinstance(mux, Tmux) and mux.socket_name == "exo-r1"
        loc = Location(mux="tmux", session="main", window="@2", pane="%2", pid=1)
        assert mux.attach_argv(loc) == [
            "tmux", "-S", mux.socket_path(), "select-window", "-t", "%2", ";", "attach-session", "-t", "=main",
        ]  # fmt: skip
        monkeypatch.setenv("TMUX", f"{mux.socket_path()},123,0")
        assert mux.attach_argv(loc)[-3:] == ["switch-client", "-t", "%2"]
        with pytest.raises(InvalidInput):
            get_mux("screen", repo_id="r1", runtime_dir=rt, session="main")
    finally:
        shutil.rmtree(rt, ignore_errors=True)


def test_every_process_reaches_the_same_server_whatever_its_tmux_tmpdir(tmp_path, env, monkeypatch):
    """The server's socket is pinned in the repository's runtime folder when the first server starts: an exo
    process whose TMUX_TMPDIR differs (an agent CLI that drops it, another terminal) still reaches that server
    and never starts a second one; a rewritten pin that names no exo socket is ignored."""
    name, rt = f"exo-test-{uuid.uuid4().hex[:10]}", tmp_path / "rt"
    first_dir, other_dir = tmp_path / "t1", tmp_path / "t2"
    first_dir.mkdir()
    other_dir.mkdir()
    monkeypatch.setenv("TMUX_TMPDIR", str(first_dir))
    first = Tmux(name, "exotest", runtime_dir=rt)
    try:
        loc = first.start("agent", SLEEPER, cwd=tmp_path, env=env)
        assert first.socket_path() == str(first_dir / f"tmux-{os.getuid()}" / name)
        monkeypatch.setenv("TMUX_TMPDIR", str(other_dir))
        later = Tmux(name, "exotest", runtime_dir=rt)  # another process of the same repository
        assert later.socket_path() == first.socket_path()
        assert later.server_running() and later.alive(loc)
        later.start("agent2", SLEEPER, cwd=tmp_path, env=env)  # into the same server, not a second one
        assert len(first.list_states()) == 2
        assert not (other_dir / f"tmux-{os.getuid()}" / name).exists()
        monkeypatch.delenv("TMUX_TMPDIR")
        assert Tmux(name, "exotest", runtime_dir=rt).socket_path() == first.socket_path()
        # a pin rewritten to another server's socket (the user's own tmux) is not followed
        for hostile in ("/tmp/tmux-0/default", f"{tmp_path}/elsewhere/{name}", f"relative/tmux-{os.getuid()}/{name}"):
            (rt / "tmux-socket").write_text(hostile + "\n")
            assert Tmux(name, "exotest", runtime_dir=rt).socket_path() == str(Path("/tmp") / f"tmux-{os.getuid()}" / name)
    finally:
        (rt / "tmux-socket").write_text(str(first_dir / f"tmux-{os.getuid()}" / name) + "\n")
        Tmux(name, "exotest", runtime_dir=rt).kill_server()
