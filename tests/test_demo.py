"""``exo demo``: the whole lifecycle on a scratch repository, run as a real subprocess.

Each run gets its own TMPDIR, XDG_RUNTIME_DIR and TMUX_TMPDIR under the test's tmp folder,
so the test can check that the demo leaves no tmux server, no process and no file behind,
and that nothing in HOME changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, git, run_exo

README_SETUP = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/exo demo"
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime."""
    out = {}
    for p in sorted(root.rglob("*")):
        try:
            st = p.lstat()
        except OSError:
            continue
        out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(autouse=True)
def _short_dirs(tmp_path: Path) -> Iterator[list[Path]]:
    """Socket folders must be short (AF_UNIX paths): private ones under /tmp, removed afterwards."""
    made: list[Path] = []
    _SHORT[str(tmp_path)] = made
    yield made
    _SHORT.pop(str(tmp_path), None)
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


_SHORT: dict[str, list[Path]] = {}


def _sandbox(tmp_path: Path) -> dict[str, str]:
    """Own TMPDIR (under tmp_path), XDG_RUNTIME_DIR and TMUX_TMPDIR (short, under /tmp) for one run."""
    env = {}
    d = tmp_path / "tmpdir"
    d.mkdir(mode=0o700)
    env["TMPDIR"] = str(d)
    for var in ("XDG_RUNTIME_DIR", "TMUX_TMPDIR"):
        short = Path(tempfile.mkdtemp(prefix="exd-", dir="/tmp"))
        _SHORT[str(tmp_path)].append(short)
        env[var] = str(short)
    return env


def _procs_in(folder: Path) -> list[str]:
    """Processes whose working folder is inside ``folder`` (deleted or not)."""
    found = []
    prefix = str(folder)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + "/"):
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                cmd = "?"
            found.append(f"{entry}: {cmd}")
    return found


def _socket_name(repo: str) -> str:
    state = Path(repo) / ".git" / "exo"
    return "exo-" + hashlib.sha1(str(state.resolve()).encode()).hexdigest()[:10]


def _check_result(r: dict, mux: str, sandboxed: bool | None = shutil.which("bwrap") is not None) -> None:
    assert r["mux"] == mux
    assert sorted(r["beads_closed"]) == ["demo-bye", "demo-cfg", "demo-doc", "demo-test"]
    agents = {a["id"]: a for a in r["agents"]}
    assert set(agents) == {"bye", "cfg", "test", "doc"}
    if sandboxed is not None:  # sandboxing is on by default: wherever bubblewrap works, every demo agent is in it
        assert {a["sandboxed"] for a in agents.values()} == {sandboxed}, agents
    assert all(a["completed"] and a["status"] == "done" for a in agents.values())
    assert agents["doc"]["waited_for"] == "demo-bye"  # the blocked bead ran after its blocker closed
    assert len(r["prs"]) == 4 and all(p["strategy"] == "squash" and p["base"] == "main" for p in r["prs"])
    assert {p["agent"] for p in r["prs"]} == set(agents)
    assert r["questions"] and r["questions"][0]["agent"] == "cfg" and r["questions"][0]["answer"]
    own = [n for n in r["notes"] if "committed it" in n["message"]]
    assert {n["agent"] for n in own} == set(agents)
    # the merged work is on main, one squash commit per PR, with the bead id in the subject
    subjects = "\n".join(r["log"])
    for bead in ("demo-bye", "demo-cfg", "demo-test", "demo-doc"):
        assert f"[{bead}]" in subjects


# `exo` whose demo agents each first sleep far longer than any test waits (the demo agent's own
# `sleep` step), so the demo cannot finish within its --timeout however fast the machine is.
# The lead process writes the agents' scripts, so the patch is made there.
SLOW_AGENTS_EXO = (
    "import exo_cli.ops.demo as demo; script = demo.agent_script; "
    "demo.agent_script = lambda bead: [{'sleep': {'seconds': 600}}, *script(bead)]; "
    "from exo_cli.main import main; main()"
)


def _run_demo(tmp_path: Path, *args: str, timeout: float = 100, extra: dict[str, str] | None = None,
              slow_agents: bool = False) -> tuple[subprocess.CompletedProcess[str], dict]:
    home = Path(os.environ["HOME"])
    before = _files(home)
    env = {**_sandbox(tmp_path), **(extra or {})}
    if slow_agents:
        proc = subprocess.run([sys.executable, "-c", SLOW_AGENTS_EXO, "demo", "--json", *args], cwd=tmp_path,
                              env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                              timeout=timeout)
    else:
        proc = run_exo("demo", "--json", *args, cwd=tmp_path, env=env, timeout=timeout)
    assert _files(home) == before, "the demo changed files in HOME"
    return proc, env


@pytest.mark.parametrize("mux", ["headless", pytest.param("tmux", marks=needs_tmux)])
def test_demo_runs_the_whole_lifecycle_and_leaves_nothing(tmp_path: Path, mux: str) -> None:
    proc, env = _run_demo(tmp_path, "--no-keep", "--mux", mux)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    r = json.loads(proc.stdout)
    _check_result(r, mux)
    repo = Path(r["repo"])
    assert repo.parent == Path(env["TMPDIR"]) and not repo.exists() and not r["kept"]
    assert _procs_in(repo) == []
    assert list(Path(env["XDG_RUNTIME_DIR"]).iterdir()) == []  # runtime folder removed too
    assert list(Path(env["TMPDIR"]).iterdir()) == []
    if mux == "tmux":
        name = _socket_name(r["repo"])
        listed = subprocess.run(["tmux", "-L", name, "ls"], capture_output=True, text=True,
                                env={**os.environ, "TMUX_TMPDIR": env["TMUX_TMPDIR"]})
        assert listed.returncode != 0, "the demo's tmux server is still running"
        sockets = list(Path(env["TMUX_TMPDIR"]).rglob(name))
        assert sockets == []
    # progress went to stderr (plain lines: not a TTY), the result alone to stdout
    assert "demo: merged PR #" in proc.stderr


def test_demo_keeps_the_repo_with_the_merged_work(tmp_path: Path) -> None:
    target = tmp_path / "scratch"
    # Run with another repository's state folder, forge, hangar and user config: none of them may
    # leak into the demo. (An agent's own identity variables are refused: see the next test.)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text('[forge]\nkind = "github"\n[worktree]\nroot = "/nonexistent"\n')
    extra = {"EXO_STATE_DIR": str(tmp_path / "other"),
             "EXO_FORGE": "github", "HANGAR_ROOT": str(tmp_path / "hangar"), "EXO_CONFIG_DIR": str(tmp_path / "cfg"),
             "BEADS_DIR": str(tmp_path / "otherbeads")}
    proc, env = _run_demo(tmp_path, "--mux", "headless", "--dir", str(target), extra=extra)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    _check_result(r, "headless")
    assert r["kept"] and Path(r["repo"]) == target
    log = git(target, "log", "--oneline", "main")
    assert "[demo-doc] Document goodbye() in the README" in log
    assert (target / "goodbye.py").is_file() and "goodbye" in (target / "README.md").read_text()
    assert git(target, "status", "--porcelain") == ""  # clean: beads and .exo are excluded
    assert git(target, "worktree", "list").count("\n") == 0  # every agent worktree removed
    assert git(target, "branch", "--format=%(refname:short)") == "main"
    assert _procs_in(target) == []
    assert not (tmp_path / "other").exists() and not (tmp_path / "hangar").exists()
    beads = [json.loads(line) for line in (target / ".beads" / "issues.jsonl").read_text().splitlines()]
    assert {b["id"]: b["status"] for b in beads} == dict.fromkeys(
        ("demo-bye", "demo-cfg", "demo-test", "demo-doc"), "closed")


@pytest.mark.parametrize("markers", [{"EXO_AGENT": "bye", "EXO_ROLE": "dev", "EXO_PARENT": "root"},
                                     {"EXO_ROLE": "tl"}])
@pytest.mark.parametrize("state", [True, False])
def test_demo_refused_to_an_agent_that_left_its_repository(tmp_path: Path, markers: dict[str, str],
                                                           state: bool) -> None:
    """The demo is the human's: a process with an agent's variables is refused even outside any repository."""
    extra = {**markers, "EXO_STATE_DIR": str(tmp_path / "other")} if state else markers
    proc, _env = _run_demo(tmp_path, "--mux", "headless", "--dir", str(tmp_path / "scratch"), extra=extra)
    err = json.loads(proc.stdout)["error"]
    if state:  # a state folder that is no repository's: refused as such
        assert proc.returncode == 4 and err["code"] == -32002 and "EXO_STATE_DIR" in err["message"], err
    else:
        assert proc.returncode == 5 and err["code"] == -32004 and "cannot tell who is calling" in err["message"]
    assert not (tmp_path / "scratch").exists() and not (tmp_path / "other").exists()


def test_demo_human_output(tmp_path: Path) -> None:
    env = _sandbox(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "exo_cli", "demo", "--mux", "headless", "--no-keep"], cwd=tmp_path,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=100)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"exo demo finished in [\d.]+ s \(headless\)", out)
    assert "Agents spawned: 4" in out and "PRs merged: 4" in out and "Question from cfg" in out
    assert (", sandboxed" in out) == (shutil.which("bwrap") is not None)
    assert "was removed (--no-keep)" in out


def test_demo_runs_unsandboxed_with_a_note_where_bubblewrap_is_missing(tmp_path: Path) -> None:
    """README's first command on a machine without bubblewrap (a PATH without bwrap): the demo still runs, its
    agents unsandboxed, and says so in one line; where bubblewrap works the other demo tests see them sandboxed."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "sh"):
        (bare / tool).symlink_to(shutil.which(tool) or tool)
    proc, _env = _run_demo(tmp_path, "--mux", "headless", "--no-keep",
                           extra={"PATH": f"{bare}{os.pathsep}{Path(sys.executable).parent}"})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    _check_result(json.loads(proc.stdout), "headless", sandboxed=False)
    notes = [line for line in proc.stderr.splitlines() if "agents run unsandboxed" in line]
    assert len(notes) == 1 and "bubblewrap is not installed" in notes[0] and "install bubblewrap" in notes[0]


def test_demo_refuses_a_folder_inside_a_repository(repo: Path, tmp_path: Path) -> None:
    proc = run_exo("demo", "--json", "--dir", str(repo / "scratch"), cwd=repo)
    assert proc.returncode == 4  # a value exo's own validation rejects: InvalidInput (docs/errors.md)
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == -32002
    assert "inside the git repository" in err["message"]
    assert not (repo / "scratch").exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    proc = run_exo("demo", "--json", "--dir", str(full), cwd=tmp_path)
    assert proc.returncode == 4 and (full / "mine.txt").read_text() == "keep me"


def test_demo_timeout_stops_every_agent(tmp_path: Path) -> None:
    proc, env = _run_demo(tmp_path, "--no-keep", "--mux", "headless", "--timeout", "1.5", slow_agents=True)
    assert proc.returncode == 5, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert "did not finish within 1.5 s" in err["message"]
    assert "--timeout" in err["hint"]
    agents = err["data"]["agents"]  # every ready bead had its agent, each stopped while it slept
    assert sorted(a["bead"] for a in agents) == ["demo-bye", "demo-cfg", "demo-test"]
    assert {a["status"] for a in agents} == {"dead"} and err["data"]["beads_closed"] == []
    repo = Path(err["data"]["repo"])
    assert not repo.exists() and _procs_in(repo) == []


@pytest.mark.parametrize("mux", ["headless", pytest.param("tmux", marks=needs_tmux)])
def test_demo_ctrl_c_leaves_nothing_running(tmp_path: Path, mux: str) -> None:
    env = {**os.environ, **_sandbox(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "exo_cli", "demo", "--mux", mux, "--dir", str(tmp_path / "s")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # Ctrl-C as at a terminal, even when the suite runs in the background (SIGINT ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("demo: spawned"):
            break
    assert any(x.startswith("demo: spawned") for x in lines), "".join(lines)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "every demo agent was stopped" in rest
    scratch = tmp_path / "s"
    assert scratch.is_dir()  # kept (the default), nothing running in it
    assert _procs_in(scratch) == []
    if mux == "tmux":
        listed = subprocess.run(["tmux", "-L", _socket_name(str(scratch)), "ls"], capture_output=True, env=env)
        assert listed.returncode != 0


def test_readme_setup_command_runs_from_a_fresh_clone(tmp_path: Path) -> None:
    """The README's first command, minus the venv install (the suite's venv has the packages).

    The full command (`python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/exo
    demo`) needs the package index and about a minute; here the clone's own code runs through
    `python -m exo_cli demo` with PYTHONPATH at the clone.
    """
    readme = (ROOT / "README.md").read_text()
    assert README_SETUP in readme
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    head = git(ROOT, "rev-parse", "HEAD")
    subprocess.run(["git", "checkout", "-q", head], cwd=clone, check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(_sandbox(tmp_path), PYTHONPATH=str(clone))
    proc = subprocess.run([sys.executable, "-m", "exo_cli", "demo", "--no-keep", "--json"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert len(r["beads_closed"]) == 4 and len(r["prs"]) == 4
    assert git(clone, "status", "--porcelain") == ""  # nothing written into the repository it ran from


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("EXO_TEST_README_INSTALL") != "1",
                    reason="needs the package index and ~45 s: set EXO_TEST_README_INSTALL=1 to run it")
def test_readme_setup_command_verbatim(tmp_path: Path) -> None:
    """The README's set-up command exactly as written, in a fresh clone (venv + pip install + exo demo)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(_sandbox(tmp_path))
    proc = subprocess.run(["sh", "-c", README_SETUP + " --no-keep"], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PRs merged: 4" in proc.stdout and "Beads closed:" in proc.stdout
