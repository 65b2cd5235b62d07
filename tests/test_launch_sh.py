"""The shell launcher (dash + env -i + a script read from a FIFO) against real processes and a real tmux."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from conftest import wait_for
from exo_cli.adapters.mux import _launch
from exo_cli.adapters.mux.base import deliver_spec, make_fifo
from exo_cli.adapters.mux.tmux import PANE_VARS, Tmux
from exo_cli.errors import InvalidInput

PROGRAMS = _launch.shell_programs()
needs_dash = pytest.mark.skipif(PROGRAMS is None, reason="dash and env are needed for the shell launcher")
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

PY = sys.executable
HOSTILE = [
    "two words", "$(touch pwned)", "`id`", "-leading", "semi;", "it's", 'say "hi"', "back\\slash",
    "new\nline", "ünïcødé 日本", "", "*", "~", "$HOME", "a'b'c", "'", "\\", "#{pane_id}",
]  # fmt: skip
DUMP = """
    import json, os, sys
    with open(sys.argv[1] + ".tmp", "w") as fh:
        json.dump({"env": dict(os.environ), "argv": sys.argv[2:], "cwd": os.getcwd()}, fh)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
"""


def dumper(tmp_path: Path) -> list[str]:
    path = tmp_path / "dump.py"
    path.write_text(textwrap.dedent(DUMP))
    return [PY, str(path)]


def run_launcher(tmp_path: Path, spec: dict, outer_env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """Start the pane command the way tmux does (outer env), deliver the script, wait for the exit."""
    assert PROGRAMS is not None
    fifo = make_fifo(tmp_path / f"fifo-{uuid.uuid4().hex[:6]}")
    argv = _launch.sh_argv(str(fifo), list(spec.get("keep", [])), PROGRAMS)
    proc = subprocess.Popen(argv, env=outer_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    payload = _launch.encode_sh(spec)
    assert payload is not None
    deliver_spec(fifo, payload, timeout=60)
    out, err = proc.communicate(timeout=60)
    assert not fifo.exists()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@needs_dash
def test_env_argv_cwd_are_exact_with_hostile_values(tmp_path):
    out = tmp_path / "seen.json"
    work = tmp_path / "work dir 'q'"
    work.mkdir()
    given = {f"V{i}": v for i, v in enumerate(HOSTILE)}
    given.update(PATH=os.environ["PATH"], LC_ALL="C.UTF-8", PWD="/spawner/cwd", OLDPWD="/old", IFS="x",
                 OPTIND="9", LINENO="7", PPID="1", SHLVL="4", _="underscore", TERM="given-term", ENV="/nonexistent")
    spec = {"argv": [*dumper(tmp_path), str(out), *HOSTILE], "env": given, "cwd": str(work), "keep": list(PANE_VARS)}
    # The pane's own environment: tmux's values for the kept variables, a secret that must not pass.
    outer = {"TERM": "tmux-256color", "TMUX_PANE": "%7", "SECRET_OF_SERVER": "no", "PATH": "/usr/bin:/bin"}
    proc = run_launcher(tmp_path, spec, outer)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(out.read_text())
    expected = dict(given, TERM="tmux-256color", TMUX_PANE="%7")  # the pane's values win, as in _launch.py
    assert seen["env"] == expected
    assert seen["argv"] == HOSTILE
    assert seen["cwd"] == str(work)


@needs_dash
def test_invalid_utf8_bytes_pass_through(tmp_path):
    out = tmp_path / "seen.json"
    raw = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")
    prog = tmp_path / "b.py"
    prog.write_text("import os, sys\nopen(sys.argv[1], 'wb').write(os.environb[b'RAW'] + b'|' + os.fsencode(sys.argv[2]))\n")
    spec = {"argv": [PY, str(prog), str(out), raw], "env": {"RAW": raw, "PATH": os.environ["PATH"]},
            "cwd": str(tmp_path), "keep": []}
    proc = run_launcher(tmp_path, spec, {})
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == b"caf\xe9 \xff|caf\xe9 \xff"


@needs_dash
def test_missing_program_and_missing_folder_fail_cleanly(tmp_path):
    spec = {"argv": ["/nonexistent/agent"], "env": {}, "cwd": str(tmp_path), "keep": []}
    proc = run_launcher(tmp_path, spec, {})
    assert proc.returncode == 127
    spec = {"argv": ["true"], "env": {}, "cwd": str(tmp_path / "gone"), "keep": []}
    proc = run_launcher(tmp_path, spec, {})
    assert proc.returncode == 126 and b"cannot enter" in proc.stderr


@needs_dash
def test_truncated_script_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    payload = _launch.encode_sh({"argv": ["touch", str(marker)], "env": {"PATH": os.environ["PATH"]},
                                 "cwd": str(tmp_path), "keep": []})
    assert payload is not None
    fifo = make_fifo(tmp_path / "fifo")
    proc = subprocess.Popen(_launch.sh_argv(str(fifo), [], PROGRAMS), stderr=subprocess.PIPE)
    cut = payload.rindex(b"}")  # everything but the closing brace of the group
    deliver_spec(fifo, payload[:cut], timeout=60)
    proc.communicate(timeout=60)
    assert proc.returncode != 0 and not marker.exists()


def test_encode_sh_refuses_what_the_shell_cannot_say():
    base = {"argv": ["a"], "env": {"OK": "1"}, "cwd": "/", "keep": []}
    assert _launch.encode_sh(base) is not None
    assert _launch.encode_sh(dict(base, env={"A-B": "1"})) is None  # not a shell name: Python launcher
    assert _launch.encode_sh(dict(base, env={"ÄB": "1"})) is None
    assert _launch.encode_sh(dict(base, env={"1A": "1"})) is None
    assert _launch.encode_sh(dict(base, argv=["a\x00b"])) is None
    assert _launch.encode_sh(dict(base, pid_file="/x")) is None  # only the Python launcher reports a pid
    script = _launch.encode_sh(dict(base, env={"S": "$(rm -rf /) `x` '\n"}, argv=["p", "'; echo"]))
    assert script is not None
    # Builtins only: nothing but the agent itself is ever executed by the script.
    for line in script.decode().split("\n"):
        if line.startswith(("export ", "exec ")) or not line:
            continue
        assert line.split(" ")[0] in ("{", "}", "cd", "unset", "exit", "[", "'"), line
    assert _launch.sh_quote("a'b") == "'a'\\''b'"


@needs_dash
@needs_tmux
@pytest.mark.tmux
@pytest.mark.parametrize("launcher", ["sh", "python"])
def test_tmux_agent_env_is_exact_and_secret_never_on_a_command_line(tmp_path, launcher, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("EXO_TEST_CANARY", "must-not-leak")
    tmux = Tmux(f"exo-test-{uuid.uuid4().hex[:10]}", "exotest", runtime_dir=tmp_path / "rt", launcher=launcher)
    needle = secret.encode()
    scans: list[int] = []  # command lines read per pass over /proc
    leaked: list[bytes] = []
    stop = threading.Event()

    def watch() -> None:  # every process's command line, as often as we can, while agents start
        while not stop.is_set():
            read = 0
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        cmdline = Path(entry.path, "cmdline").read_bytes()
                    except OSError:
                        continue
                    read += 1
                    if needle in cmdline:
                        leaked.append(cmdline)
            scans.append(read)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        outs = []
        dump = dumper(tmp_path)  # written once: rewriting it could truncate it under a starting agent
        for i in range(3):
            out = tmp_path / f"seen{i}.json"
            env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "HOME": str(tmp_path), "API_KEY": secret,
                   "WEIRD": "a\nb 'c' $(d)"}
            tmux.start(f"a{i}", [*dump, str(out), "x"], cwd=tmp_path, env=env)
            outs.append((out, env))
        for out, env in outs:
            seen = json.loads(wait_for(lambda out=out: out.exists() and out.read_text(),
                                       what=f"{out.name} from the agent"))
            assert set(seen["env"]) - set(env) <= set(PANE_VARS)
            assert {k: seen["env"][k] for k in env} == env
            assert "EXO_TEST_CANARY" not in seen["env"]
        assert "EXO_TEST_CANARY" not in tmux._exec("show-environment", "-g").stdout
        assert secret not in tmux._exec("show-environment", "-g").stdout
    finally:
        stop.set()
        watcher.join()
        tmux.kill_server()
    assert sum(scans), "the watcher saw no processes"
    assert leaked == []


def test_launcher_choice(tmp_path):
    with pytest.raises(InvalidInput):
        Tmux("exo-test-x", "s", runtime_dir=tmp_path, launcher="perl")
    tmux = Tmux("exo-test-x", "s", runtime_dir=tmp_path, launcher="python")
    command, payload = tmux._launch_command(tmp_path / "f", {"argv": ["a"], "env": {}, "cwd": "/", "keep": []})
    assert command[-2].endswith("_launch.py") and payload.startswith(b"EXO1")
    if PROGRAMS is not None:
        auto = Tmux("exo-test-x", "s", runtime_dir=tmp_path)
        command, payload = auto._launch_command(tmp_path / "f", {"argv": ["a"], "env": {}, "cwd": "/", "keep": []})
        assert command[0] == PROGRAMS[0] and payload.startswith(b"{")
        # A name the shell cannot export: the Python launcher takes over.
        command, payload = auto._launch_command(tmp_path / "f", {"argv": ["a"], "env": {"A-B": "1"}, "cwd": "/",
                                                                 "keep": []})
        assert command[-2].endswith("_launch.py")
        strict = Tmux("exo-test-x", "s", runtime_dir=tmp_path, launcher="sh")
        with pytest.raises(InvalidInput):
            strict._launch_command(tmp_path / "f", {"argv": ["a"], "env": {"A-B": "1"}, "cwd": "/", "keep": []})
