"""The headless backend with real child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import wait_for
from exo_cli.adapters.mux import get_mux
from exo_cli.adapters.mux.headless import Headless
from exo_cli.adapters.proc import pid_alive
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError

PY = sys.executable


@pytest.fixture
def hl(tmp_path):
    h = Headless(tmp_path / "rt")
    yield h
    for loc in h.locations():
        if h.alive(loc):
            h.kill(loc, grace=0.2)


@pytest.fixture
def env(tmp_path):
    return {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "HOME": str(tmp_path)}


def test_exact_env_log_and_stdin(hl, tmp_path, env, monkeypatch):
    monkeypatch.setenv("EXO_TEST_CANARY", "must-not-leak")
    prog = textwrap.dedent(
        """
        import json, os, sys
        print(json.dumps({"env": dict(os.environ), "stdin": sys.stdin.read(), "cwd": os.getcwd(),
                          "pgid": os.getpgid(0), "sid": os.getsid(0)}), flush=True)
        print("to stderr", file=sys.stderr)
        """
    )
    given = dict(env, EXO_AGENT="h1", TRICKY="a 'b' $(c) `d`")
    loc = hl.start("h1", [PY, "-c", prog], cwd=tmp_path, env=given)
    assert loc.mux == "headless" and loc.pid == loc.pgid and loc.log
    wait_for(lambda: not hl.alive(loc), what="exit")
    log = hl.capture(loc, 50)
    seen = json.loads(log.splitlines()[0])
    assert seen["env"] == given
    assert seen["stdin"] == ""
    assert seen["cwd"] == str(tmp_path)
    assert seen["pgid"] == loc.pid == seen["sid"]
    assert "to stderr" in log
    assert (os.stat(loc.log).st_mode & 0o777) == 0o600
    assert hl.list_states()[loc.key].dead_status == 0


def test_states_from_records_in_another_instance(hl, tmp_path, env):
    live = hl.start("live", [PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env=env)
    done = hl.start("done", [PY, "-c", "raise SystemExit(3)"], cwd=tmp_path, env=env)
    wait_for(lambda: not hl.alive(done), what="exit")
    assert hl.list_states()[done.key].dead_status == 3
    other = Headless(tmp_path / "rt")  # a later exo process: knows only the records
    states = other.list_states()
    assert set(states) == {live.key, done.key}
    assert states[live.key].alive and states[live.key].current_command == os.path.basename(PY)[:15]
    assert not states[done.key].alive
    assert other.list_states([live])[live.key].alive
    with pytest.raises(StateError):
        other.close(live)
    other.kill(live, grace=0.5)
    assert not other.alive(live)
    other.close(live)
    assert live.key not in other.list_states()


def test_kill_group_with_stubborn_child(hl, tmp_path, env):
    pidfile = tmp_path / "child.pid"
    prog = textwrap.dedent(
        f"""
        import subprocess, sys, time
        # The child reports its pid once it ignores SIGTERM: only SIGKILL can stop it then.
        code = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
                "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(120)")
        child = subprocess.Popen([sys.executable, "-c", code, {str(pidfile)!r}])
        time.sleep(120)
        """
    )
    loc = hl.start("fam", [PY, "-c", prog], cwd=tmp_path, env=env)
    child = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="child pid"))
    assert pid_alive(child)
    hl.kill(loc, grace=0.3)
    assert not pid_alive(child) and not hl.alive(loc)


def test_capture_tail_and_attach(hl, tmp_path, env):
    prog = "for i in range(1, 5001): print(f'row {i}')"
    loc = hl.start("rows", [PY, "-c", prog], cwd=tmp_path, env=env, log_path=tmp_path / "rows.log")
    wait_for(lambda: not hl.alive(loc), what="exit")
    assert hl.capture(loc, 3).splitlines() == ["row 4998", "row 4999", "row 5000"]
    assert len(hl.capture(loc, 2000).splitlines()) == 2000
    assert hl.attach_argv(loc) == [sys.executable, "-m", "exo_cli.adapters.mux._follow", str(tmp_path / "rows.log"),
                                   "200"]


def test_attach_follows_the_log_and_nothing_in_it_acts_on_the_terminal(tmp_path):
    """exo attach of a headless agent: the last lines, then what is appended, escape sequences made visible,
    across a truncated and a replaced log, read through a real terminal (a pty)."""
    import pty
    import select
    import signal

    log = tmp_path / "agent.log"
    hostile = b"\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\xc2\x9b31m\xff"  # OSC title, clipboard, clear, CSI, not UTF-8
    log.write_bytes(b"".join(b"old %d\n" % i for i in range(300)) + b"first " + hostile + b"\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the follower, as exo attach runs it (SIGINT as at a terminal, even under nohup)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execv(sys.executable, [sys.executable, "-m", "exo_cli.adapters.mux._follow", str(log), "200"])
    seen = bytearray()

    def read_until(needle: bytes) -> None:
        def more() -> bool:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen.extend(os.read(fd, 65536))
                except OSError:
                    pass
            return needle in seen
        wait_for(more, what=f"{needle!r} on the terminal")

    try:
        read_until(b"first ")
        with open(log, "ab") as fh:
            fh.write(b"appended " + hostile + b"\n")
        read_until(b"appended ")
        log.write_bytes(b"truncated\n")  # a new, shorter log: read again from its start
        read_until(b"truncated")
        (tmp_path / "new.log").write_bytes(b"replaced " + hostile + b"\n")
        os.replace(tmp_path / "new.log", log)
        read_until(b"replaced ")
    finally:
        os.kill(pid, signal.SIGINT)
        os.waitpid(pid, 0)
        os.close(fd)
    text = bytes(seen)
    assert b"old 100\r\n" not in text and b"old 101\r\n" in text  # the last 200 lines of 301
    assert b"\x1b" not in text and b"\x07" not in text and b"\xc2\x9b" not in text  # nothing acts on the terminal
    assert text.count(b"^[]0;pwned^G^[]52;c;ZXZpbA==^G^[[2JM-^[31m\xef\xbf\xbd") == 3


def test_send_text_refused_and_bad_input(hl, tmp_path, env):
    loc = hl.start("quiet", [PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env=env)
    with pytest.raises(StateError) as err:
        hl.send_text(loc, "hello")
    assert err.value.hint
    with pytest.raises(InvalidInput):
        hl.send_text(loc, "a\x00b")
    with pytest.raises(InvalidInput):
        hl.start("../evil", [PY], cwd=tmp_path, env=env)
    with pytest.raises(InvalidInput):
        hl.start("x", [], cwd=tmp_path, env=env)
    with pytest.raises(EnvironmentError_):
        hl.start("nobin", ["/nonexistent/agent-cli"], cwd=tmp_path, env=env)


def test_zombie_counts_as_dead(tmp_path):
    proc = subprocess.Popen([PY, "-c", "pass"])
    wait_for(lambda: open(f"/proc/{proc.pid}/stat").read().split(")")[1].split()[0] == "Z", what="zombie")
    assert not pid_alive(proc.pid, reap_child=False)
    proc.wait()


def test_get_mux_headless(tmp_path):
    mux = get_mux("headless", repo_id="r", runtime_dir=tmp_path / "rt", session="main")
    assert isinstance(mux, Headless) and mux.list_states() == {}


def test_launcher_request_round_trip():
    from exo_cli.adapters.mux import _launch
    from exo_cli.adapters.mux.base import encode_spec

    spec = {
        "argv": ["agent", "", "a\nb", "ü $(x)"],
        "env": {"K": "v=w", "EMPTY": "", "NL": "1\n2"},
        "cwd": "/w d",
        "keep": ["TERM", "TMUX"],
        "pid_file": "",
        "exit_file": "",
        "keeper": "",
    }
    assert _launch.decode(encode_spec(spec)) == spec
    assert _launch.decode(encode_spec(dict(spec, keeper="0a1b")))["keeper"] == "0a1b"
    assert _launch.decode(encode_spec(dict(spec, exit_file="/rt/a.exit")))["exit_file"] == "/rt/a.exit"
    with pytest.raises(InvalidInput):
        encode_spec(dict(spec, argv=["a\x00b"]))
    with pytest.raises(ValueError):
        _launch.decode(b"EXO1\0/\0\0" + b"3\0only-one")
