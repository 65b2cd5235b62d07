"""`exo completion --install`: the man pages in ~/.local/share/man and the line in a shell's startup
file (created when missing), with real `man`, bash and fish; and the fish script that keeps each
description and value whole (real fish, `complete -C`).

Every test has its own HOME (conftest's ``isolate``): nothing reaches the developer's own files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from conftest import ROOT, Exo
from exo_cli.commands import COMMANDS
from exo_cli.env import Env
from exo_cli.ops import completion_install as inst
from exo_cli.records import IDLE, WORKING, Agent

PAGES = sorted(p.name for p in (ROOT / "man").glob("*.1"))
LINE = {shell: f"{inst.LINES[shell]}  {inst.MARKER}" for shell in inst.SHELLS}


def _install(repo: Path, *args: str, **env: str) -> tuple[int, str, str]:
    r = Exo(repo)("completion", *args, "--install", env=env)
    return r.exit_code, r.stdout, r.stderr


def _manned(home: Path) -> str:
    """The PATH of a user whose ~/.local/bin is on it (pipx and uv put `exo` there)."""
    return f"{home / '.local' / 'bin'}{os.pathsep}{os.environ['PATH']}"


def test_install_adds_one_line_once_and_says_so(repo: Path, isolate: Path) -> None:
    rc = isolate / ".bashrc"
    rc.write_text("alias ll='ls -l'")  # no final newline
    man1 = isolate / ".local/share/man/man1"
    code, out, err = _install(repo, SHELL="/bin/bash", PATH=_manned(isolate))
    assert (code, err) == (0, "")
    assert out == (f"Added to {rc}:\n  {LINE['bash']}\nMan pages: {len(PAGES)} written to {man1}\n"
                   "Open a new shell to use it.\n")
    assert rc.read_text() == f"alias ll='ls -l'\n{LINE['bash']}\n"
    code, out, _ = _install(repo, "bash", SHELL="/bin/bash", PATH=_manned(isolate))
    assert code == 0
    assert out == f"Already in {rc}, nothing changed:\n  {LINE['bash']}\nMan pages: already in {man1}\n"
    assert rc.read_text().count(inst.MARKER) == 1
    (man1 / "exo-spawn.1").write_text("an older page\n")
    code, out, _ = _install(repo, "bash", PATH=_manned(isolate))
    assert code == 0 and f"Man pages: 1 written to {man1}" in out
    assert (man1 / "exo-spawn.1").read_bytes() == (ROOT / "man" / "exo-spawn.1").read_bytes()


def test_a_missing_startup_file_is_created_and_man_finds_the_pages(repo: Path, isolate: Path) -> None:
    """A fresh account: no ~/.bashrc, no ~/.config/fish, no ~/.local; `uv tool install` put exo in ~/.local/bin."""
    code, out, err = _install(repo, SHELL="/bin/bash", PATH=_manned(isolate))
    assert (code, err) == (0, ""), out
    assert out.startswith(f"Created {isolate / '.bashrc'}:\n")
    assert (isolate / ".bashrc").read_text() == LINE["bash"] + "\n"
    man1 = isolate / ".local/share/man/man1"
    assert sorted(p.name for p in man1.iterdir()) == PAGES
    assert all((man1 / p).read_bytes() == (ROOT / "man" / p).read_bytes() for p in PAGES)
    code, out, _ = _install(repo, "fish", PATH=_manned(isolate))
    conf = isolate / ".config" / "fish" / "config.fish"
    assert code == 0 and out.startswith(f"Created {conf}:\n") and conf.read_text() == LINE["fish"] + "\n"
    if shutil.which("man") is None:
        pytest.skip("man is not installed")
    env = {k: v for k, v in os.environ.items() if k != "MANPATH"}
    env["PATH"] = _manned(isolate)  # man-db: <dir>/bin on PATH -> <dir>/share/man
    for page in ("exo", "exo-spawn", "exo-pr-merge"):
        proc = subprocess.run(["man", "-w", page], env=env, capture_output=True, text=True)
        assert proc.stdout.strip() == str(man1 / f"{page}.1"), proc.stderr


def test_install_for_zsh_and_fish_and_through_a_symlink(repo: Path, tmp_path: Path) -> None:
    zdot = tmp_path / "zdot"
    zdot.mkdir()
    (zdot / ".zshrc").write_text("autoload -Uz compinit && compinit\n")
    code, _, err = _install(repo, SHELL="/usr/bin/zsh", ZDOTDIR=str(zdot))
    assert code == 0 and LINE["zsh"] in (zdot / ".zshrc").read_text(), err
    dotfiles = tmp_path / "dotfiles" / "config.fish"
    dotfiles.parent.mkdir()
    dotfiles.write_text("set -g fish_greeting\n")
    conf = tmp_path / "xdg" / "fish" / "config.fish"
    conf.parent.mkdir(parents=True)
    conf.symlink_to(dotfiles)
    code, _, err = _install(repo, "fish", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert code == 0, err
    assert conf.is_symlink() and LINE["fish"] in dotfiles.read_text()


def test_warnings_when_man_or_a_login_shell_would_not_see_it(repo: Path, isolate: Path) -> None:
    share_man = isolate / ".local/share/man"
    profile = isolate / ".bash_profile"
    profile.write_text("export EDITOR=vi\n")  # a macOS-style login profile that does not read ~/.bashrc
    code, out, _ = _install(repo, "bash", PATH="/usr/bin:/bin")
    assert code == 0
    assert out.splitlines()[-3:] == [
        f"warning: man looks in {share_man} only when {isolate / '.local/bin'} is on PATH: add it to PATH, or "
        f"{share_man} to MANPATH, for `man exo`",
        f"warning: login shells read {profile}, which does not read {isolate / '.bashrc'}: add "
        f"`. {isolate / '.bashrc'}` to it to have the completion there too",
        "Open a new shell to use it."]
    profile.write_text("[ -f ~/.bashrc ] && . ~/.bashrc\n")
    _, out, _ = _install(repo, "bash", PATH=_manned(isolate), MANPATH="/usr/share/man")
    assert "warning:" in out and "MANPATH does not name" in out and "login shells" not in out
    for manpath in (f"{share_man}:/usr/share/man", "/usr/share/man:"):  # named, or an empty entry (man-db's own)
        _, out, _ = _install(repo, "bash", PATH=_manned(isolate), MANPATH=manpath)
        assert "warning:" not in out, manpath


def test_refusals_change_nothing(repo: Path, isolate: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / ".bashrc"  # --rc in a folder that does not exist: a typo
    code, out, err = _install(repo, "bash", "--rc", str(missing))
    assert (code, out) == (7, "")
    assert err.startswith(f"Error: The folder of {missing} does not exist\nHint: Add this line to your bash "
                          f"startup file yourself:\n  {LINE['bash']}\n")
    assert not missing.parent.exists() and not (isolate / ".local").exists()
    gone = tmp_path / "dotfiles-bashrc"
    (isolate / ".bashrc").symlink_to(gone)  # a dotfiles link to a file that is gone
    code, _, err = _install(repo, "bash")
    assert code == 7 and err.startswith(f"Error: {isolate / '.bashrc'} is a symbolic link to a file that does not exist")
    assert not gone.exists() and not (isolate / ".local").exists()
    (isolate / ".bashrc").unlink()
    for home in ("", "relative/home"):
        code, _, err = _install(repo, "bash", HOME=home)
        assert code == 7 and err.startswith(f"Error: $HOME is {home!r}, not an absolute folder"), err
    assert not (isolate / ".bashrc").exists() and not (isolate / ".local").exists()
    assert not Path(repo / ".bashrc").exists() and not Path(repo / "relative").exists()
    locked = Path("/proc/version")  # not writable, even for root (who passes the access check, then fails)
    if locked.exists():
        code, _, err = _install(repo, "bash", "--rc", str(locked))
        assert code == 7 and err.startswith(("Error: /proc/version is not writable\n",
                                             "Error: Cannot write /proc/version:")), err


def test_install_needs_a_known_shell_and_print_needs_a_shell(repo: Path) -> None:
    r = Exo(repo)("completion", "--install", env={"SHELL": "/bin/tcsh"})
    assert r.exit_code == 2 and "Cannot tell which shell" in r.stderr and "exo completion --install bash|zsh|fish" in r.stderr
    r = Exo(repo)("completion")
    assert r.exit_code == 2 and r.stderr.startswith("Error: Name the shell: exo completion bash|zsh|fish\n")
    r = Exo(repo)("completion", "bash", "--rc", "x")
    assert r.exit_code == 2


# -- the installed line, in the real shells ----------------------------------------------------------


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    """A folder with an `exo` that runs this checkout."""
    path = tmp_path / "shim" / "exo"
    path.parent.mkdir()
    path.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m exo_cli \"$@\"\n")
    path.chmod(0o755)
    return path.parent


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_installed_line_gives_bash_the_completion(repo: Path, tmp_path: Path, shim: Path) -> None:
    rc = tmp_path / ".bashrc"
    rc.write_text("")
    assert Exo(repo)("completion", "bash", "--install", "--rc", str(rc)).exit_code == 0
    script = f"source {rc}; complete -p exo; COMP_WORDS=(exo sta); COMP_CWORD=1; _exo_completion exo; echo ${{COMPREPLY[*]}}"
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "--norc", "-c", script], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.stdout.splitlines() == ["complete -o nosort -F _exo_completion exo", "status"], proc.stderr


def _fish(repo: Path, shim: Path, isolate: Path, line: str, *, source: str) -> list[str]:
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "XDG_CONFIG_HOME": str(isolate / ".config"),
           "XDG_DATA_HOME": str(isolate / ".local/share")}
    proc = subprocess.run(["fish", "--no-config", "-c", f"{source}; complete -C {line!r}"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize("how", ["shipped file", "installed line"])
def test_fish_keeps_descriptions_and_values_whole(repo: Path, isolate: Path, shim: Path, how: str) -> None:
    if how == "installed line":
        assert _install(repo, "fish")[0] == 0
        source = f"source {isolate / '.config/fish/config.fish'}"
    else:
        source = f"source {ROOT / 'completions/fish/exo.fish'}"
    commands = {f"{name}\t{click.Command(name, help=e.summary).get_short_help_str()}"
                for name, e in COMMANDS.items() if not e.hidden}
    got = _fish(repo, shim, isolate, "exo ", source=source)
    assert set(got) == commands
    assert any("," in line.split("\t")[1] for line in got)  # descriptions with a comma, whole
    env = Env(cwd=repo)
    now = time.time()
    for name in ("alpha", "beta"):
        env.store.insert_agent(Agent(id=name, name=name, role="dev", parent="root", status=IDLE if name == "beta"
                                     else WORKING, backend="custom", mux="headless", task=f"{name}, the task",
                                     created_at=now, updated_at=now, status_at=now))
    assert _fish(repo, shim, isolate, "exo send alpha,", source=source) == ["alpha,beta\tidle dev: beta, the task"]
