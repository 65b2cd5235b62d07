"""Shell completion: dynamic values (agents, PRs, beads, configuration keys), the fast path a TAB
takes and its parity with Click's own completion, and `exo completion --install`.

A TAB runs `exo` with Click's protocol: `_EXO_COMPLETE=<shell>_complete`, `COMP_WORDS` (the
words typed) and `COMP_CWORD` (the index of the word being completed; fish passes the word).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.shell_completion import BashComplete

from conftest import ROOT, Exo
from exo_cli.commands import COMMANDS
from exo_cli.commands._complete import GROUPS, SPECS, answer
from exo_cli.env import Env
from exo_cli.main import cli
from exo_cli.ops import completion as kinds
from exo_cli.records import DEAD, IDLE, WORKING, Agent

NAMES = ["alpha", "beta", "bob", "carol"]


def _agent(env: Env, name: str, status: str, task: str) -> None:
    now = time.time()
    env.store.insert_agent(Agent(id=name, name=name, role="dev", parent="root", status=status, backend="custom",
                                 mux="headless", task=task, created_at=now, updated_at=now, status_at=now))


@pytest.fixture
def team(repo: Path) -> Path:
    """A repository with exo state: four agents, three PRs (two open), and a beads tracker."""
    env = Env(cwd=repo)
    for name, status in zip(NAMES, [WORKING, IDLE, DEAD, WORKING], strict=True):
        _agent(env, name, status, f"task of {name}")
    for title, state in (("Add a", "open"), ("Fix b", "merged"), ("Docs: c", "open")):
        env.store.insert_pr(forge="local", title=title, body="", head=f"main.{title[:3]}", base="main",
                            author="alpha", state=state)
    shutil.copytree(ROOT / "tests" / "fixtures" / "beads" / "small", repo / ".beads")
    return repo


def tab(cwd: Path, line: str, shell: str = "bash") -> list[str]:
    """What exo answers the shell for a TAB at the end of ``line`` (a real process)."""
    words = line.split()
    cword = len(words) - (0 if line.endswith(" ") else 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_EXO_COMPLETE": f"{shell}_complete", "COMP_WORDS": line,
           "COMP_CWORD": str(cword) if shell != "fish" else ("" if line.endswith(" ") else words[-1])}
    proc = subprocess.run([sys.executable, "-m", "exo_cli"], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


# -- what a TAB offers ------------------------------------------------------------------------------


def test_agent_names_for_every_command_that_takes_an_agent(team: Path) -> None:
    for command in ("attach", "read", "kill", "output", "status", "answer", "wait"):
        assert tab(team, f"exo {command} b") == ["plain,beta", "plain,bob"], command
    assert tab(team, "exo complete b") == ["plain,beta", "plain,bob", "plain,b1"]  # and the open bead ex-b1
    assert tab(team, "exo wait alpha c") == ["plain,carol"]
    assert tab(team, "exo spawn --worker w --after a") == ["plain,alpha"]
    assert tab(team, "exo send alpha,b") == ["plain,alpha,beta", "plain,alpha,bob"]
    assert tab(team, "exo send alpha,beta,") == ["plain,alpha,beta,bob", "plain,alpha,beta,carol"]
    assert tab(team, "exo answer alpha ") == []  # the message is free text


def test_descriptions_for_zsh_and_fish(team: Path) -> None:
    assert tab(team, "exo kill al", "zsh") == ["plain", "alpha", "working dev: task of alpha"]
    assert tab(team, "exo kill al", "fish") == ["plain,alpha\tworking dev: task of alpha"]
    assert tab(team, "exo pr show ", "zsh") == ["plain", "1", "open: Add a", "plain", "2", "merged: Fix b",
                                                "plain", "3", "open: Docs: c"]


def test_pr_numbers_bead_ids_and_config_keys(team: Path) -> None:
    assert tab(team, "exo pr merge ") == ["plain,1", "plain,3"]  # open ones only
    assert tab(team, "exo pr show ") == ["plain,1", "plain,2", "plain,3"]
    ready = tab(team, "exo spawn ")
    assert ready and all(x.startswith("plain,ex-") for x in ready)
    assert "plain,ex-a4" not in ready  # blocked by ex-a3 in the fixture
    assert tab(team, "exo spawn a1") == ["plain,a1"]  # the short form, as typed
    shown = tab(team, "exo beads show ex-")
    assert set(ready) < set(shown)
    assert tab(team, "exo config mux.") == ["plain,mux.default"]
    assert tab(team, "exo config agent.default limits.m") == ["plain,limits.max_agents", "plain,limits.max_depth"]
    assert "plain,status" in tab(team, "exo s")
    assert tab(team, "exo -C . kill c") == ["plain,carol"]


def test_no_state_no_repo_nothing_printed_nothing_written(repo: Path, tmp_path: Path) -> None:
    before = sorted(str(p) for p in repo.rglob("*"))
    for line in ("exo attach ", "exo pr merge ", "exo complete ", "exo send a,", "exo spawn --after "):
        assert tab(repo, line) == [], line
    assert sorted(str(p) for p in repo.rglob("*")) == before
    assert not (repo / ".git" / "exo").exists()
    outside = tmp_path / "nowhere"
    outside.mkdir()
    assert tab(outside, "exo kill ") == []
    assert list(outside.iterdir()) == []


PROBE = """
import sys, json
from exo_cli.main import main
try:
    main([])
except SystemExit:
    pass
sys.stderr.write('\\nMODULES=' + json.dumps(sorted(sys.modules)) + '\\n')
"""


def test_a_tab_loads_no_command_module_and_nothing_heavy(team: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_EXO_COMPLETE": "bash_complete", "COMP_WORDS": "exo attach a",
           "COMP_CWORD": "2"}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=team, env=env, capture_output=True, text=True)
    assert proc.stdout.split() == ["plain,alpha"]
    modules = json.loads(proc.stderr.rsplit("MODULES=", 1)[1])
    heavy = [m for m in modules if m.split(".")[0] in ("mcp", "rich", "git", "yaml", "tomli_w", "pydantic", "psutil")
             or m.startswith(("exo_cli.ops.spawn", "exo_cli.commands.lifecycle", "exo_cli.registry"))
             or m in ("exo_cli.env", "exo_cli.records", "exo_cli.adapters.git", "exo_cli.adapters.store.sqlite")]
    assert heavy == []
    assert kinds.STATE_DIR_VAR == __import__("exo_cli.env").env.STATE_DIR_VAR


# -- the fast path and Click agree --------------------------------------------------------------------


LINES = ["", "s", "sta", "attach ", "attach b", "read --lines 3 ", "read ", "kill x", "wait alpha ", "status ",
         "output c", "answer ", "answer alpha ", "send ", "send alpha,", "complete ", "complete ex-a", "spawn ",
         "spawn --after ", "spawn ex-a1 ", "pr merge ", "pr show 2", "beads show ", "config ", "config agent.",
         "pr ", "beads ", "attach alpha ", "init ", "-C . attach "]
CLICK_DECIDES = {"read --lines 3 ", "pr ", "beads ", "init "}  # an option before, a group's subcommands, no table entry


@pytest.mark.parametrize("line", LINES)
def test_fast_path_answers_as_click_does(team: Path, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(team)
    words = line.split()
    args, incomplete = (words, "") if line.endswith(" ") or not line else (words[:-1], words[-1])
    fast = answer(args, incomplete)
    slow = [(i.value, i.help or "") for i in BashComplete(cli, {}, "exo", "_EXO_COMPLETE").get_completions(args, incomplete)
            if i.type == "plain"]
    assert (fast is None) == (line in CLICK_DECIDES)
    if fast is not None:
        assert [(v, h or "") for v, h in fast[1]] == slow


def _positionals(cmd: click.Command) -> list[click.Argument]:
    return [p for p in cmd.params if isinstance(p, click.Argument)]


def _kind(param: click.Parameter) -> str | None:
    fn = getattr(param, "_custom_shell_complete", None)
    return getattr(fn, "kind", None) if fn is not None else None


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    out: dict[str, click.Command] = {}
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out.update({f"{name} {sub}": c for sub, c in cmd.commands.items()})
        else:
            out[name] = cmd
    return out


def test_the_fast_table_matches_the_click_commands() -> None:
    commands = _commands()
    ctx = click.Context(cli)
    assert set(GROUPS) == {n for n in COMMANDS if isinstance(cli.get_command(ctx, n), click.Group)}
    for path, cmd in commands.items():
        args = [_kind(p) for p in _positionals(cmd)]
        options = {o: _kind(p) for p in cmd.params if isinstance(p, click.Option) and _kind(p) for o in p.opts}
        spec = SPECS.get(path)
        if spec is None:
            assert not any(args) and not options, f"exo {path} completes values: add it to SPECS"
            continue
        assert tuple(args) == spec.args, path
        assert spec.repeat == bool(_positionals(cmd) and _positionals(cmd)[-1].nargs == -1), path
        assert options == dict(spec.options), path
    assert set(SPECS) <= set(commands)
    assert {k for s in SPECS.values() for k in (*s.args, *s.options.values()) if k} <= set(kinds.KINDS)


# -- exo completion --install -------------------------------------------------------------------------


def test_install_adds_one_line_once_and_says_so(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    rc = home / ".bashrc"
    rc.write_text("alias ll='ls -l'")  # no final newline
    env = {"HOME": str(home), "SHELL": "/bin/bash"}
    r = Exo(repo)("completion", "--install", env=env)
    assert r.exit_code == 0, r.stderr
    line = kinds.LINES["bash"] + "  " + kinds.MARKER
    assert r.stdout == f"Added to {rc}:\n  {line}\nOpen a new shell to use it.\n"
    assert rc.read_text() == f"alias ll='ls -l'\n{line}\n"
    again = Exo(repo)("completion", "bash", "--install", env=env)
    assert again.exit_code == 0
    assert again.stdout == f"Already in {rc}, nothing changed:\n  {line}\n"
    assert rc.read_text().count(kinds.MARKER) == 1


def test_install_for_zsh_and_fish_and_through_a_symlink(repo: Path, tmp_path: Path) -> None:
    zdot = tmp_path / "zdot"
    zdot.mkdir()
    (zdot / ".zshrc").write_text("autoload -Uz compinit && compinit\n")
    r = Exo(repo)("completion", "--install", env={"SHELL": "/usr/bin/zsh", "ZDOTDIR": str(zdot)})
    assert r.exit_code == 0 and kinds.LINES["zsh"] in (zdot / ".zshrc").read_text()
    dotfiles = tmp_path / "dotfiles" / "config.fish"
    dotfiles.parent.mkdir()
    dotfiles.write_text("set -g fish_greeting\n")
    conf = tmp_path / "xdg" / "fish" / "config.fish"
    conf.parent.mkdir(parents=True)
    conf.symlink_to(dotfiles)
    r = Exo(repo)("completion", "fish", "--install", env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert r.exit_code == 0, r.stderr
    assert conf.is_symlink() and kinds.LINES["fish"] in dotfiles.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_installed_line_gives_bash_the_completion(repo: Path, tmp_path: Path) -> None:
    rc = tmp_path / ".bashrc"
    rc.write_text("")
    assert Exo(repo)("completion", "bash", "--install", "--rc", str(rc)).exit_code == 0
    shim = tmp_path / "bin" / "exo"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m exo_cli \"$@\"\n")
    shim.chmod(0o755)
    script = f"source {rc}; complete -p exo; COMP_WORDS=(exo sta); COMP_CWORD=1; _exo_completion exo; echo ${{COMPREPLY[*]}}"
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "--norc", "-c", script], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.stdout.splitlines() == ["complete -o nosort -F _exo_completion exo", "status"], proc.stderr


def test_install_refuses_politely_without_a_writable_startup_file(repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / ".bashrc"
    r = Exo(repo)("completion", "bash", "--install", "--rc", str(missing))
    assert r.exit_code == 7 and r.stdout == ""
    assert r.stderr.startswith(f"Error: {missing} does not exist; exo does not create a shell's startup file\n")
    assert kinds.LINES["bash"] in r.stderr and "Traceback" not in r.stderr
    assert not missing.parent.exists()
    locked = Path("/proc/version")  # not writable, even for root
    if not locked.exists():
        pytest.skip("no /proc")
    r = Exo(repo)("completion", "bash", "--install", "--rc", str(locked))
    assert r.exit_code == 7 and r.stderr.startswith(("Error: /proc/version is not writable\n",
                                                      "Error: Cannot write /proc/version:"))
    assert "Hint: Add this line to your bash startup file yourself:" in r.stderr


def test_install_needs_a_known_shell_and_print_needs_a_shell(repo: Path) -> None:
    r = Exo(repo)("completion", "--install", env={"SHELL": "/bin/tcsh"})
    assert r.exit_code == 2 and "Cannot tell which shell" in r.stderr and "exo completion --install bash|zsh|fish" in r.stderr
    r = Exo(repo)("completion")
    assert r.exit_code == 2 and r.stderr.startswith("Error: Name the shell: exo completion bash|zsh|fish\n")
    r = Exo(repo)("completion", "bash", "--rc", "x")
    assert r.exit_code == 2
