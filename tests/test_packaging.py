"""The wheel: what `pip install` / `pipx install` / `uv tool install` put on a user's machine.

The wheel is built offline from a copy of the sources (`pip wheel --no-build-isolation
--no-index`, with the setuptools of the test extra), then installed into a temporary prefix,
where `man` and the shells must find exo's man pages and completions: `man -w exo`, bash's
bash-completion loader, zsh's `compinit` and fish's vendor completions (each shell is run for
real when installed; .ci/run installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = {  # folder under the install prefix -> files of the repository installed there
    "share/man/man1": sorted(p.name for p in (ROOT / "man").glob("*.1")),
    "share/bash-completion/completions": ["exo"],
    "share/zsh/site-functions": ["_exo"],
    "share/fish/vendor_completions.d": ["exo.fish"],
}
SOURCES = {"share/bash-completion/completions": "completions/bash", "share/zsh/site-functions": "completions/zsh",
           "share/fish/vendor_completions.d": "completions/fish", "share/man/man1": "man"}


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for name in ("exo_cli", "man", "completions"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(src), cwd=src)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def prefix(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a fresh prefix (as a venv, ~/.local or /usr/local would hold it)."""
    where = tmp_path_factory.mktemp("prefix")
    # --ignore-installed: never uninstall the exo this test suite runs from
    _pip("install", "--no-deps", "--no-index", "--ignore-installed", "-q", "--prefix", str(where), str(wheel),
         cwd=where)
    return where


def test_wheel_ships_man_pages_completions_and_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    data = f"exo_cli-{_version()}.data/data/"
    shipped = {n[len(data):] for n in names if n.startswith(data)}
    expected = {f"{folder}/{f}" for folder, files in DATA.items() for f in files}
    assert shipped == expected
    assert "exo.1" in DATA["share/man/man1"] and "exo-spawn.1" in DATA["share/man/man1"]
    with zipfile.ZipFile(wheel) as z:
        for folder, files in DATA.items():
            for f in files:
                assert z.read(data + f"{folder}/{f}") == (ROOT / SOURCES[folder] / f).read_bytes()
        info = f"exo_cli-{_version()}.dist-info/"
        assert z.read(info + "licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        metadata = z.read(info + "METADATA").decode()
    assert "License-Expression: MIT" in metadata
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "exo_cli").rglob("*.py")}
    assert modules <= names, f"modules missing from the wheel: {sorted(modules - names)}"
    assets = {str(p.relative_to(ROOT)) for p in (ROOT / "exo_cli" / "web" / "static").iterdir()}
    assert assets and assets <= names, f"exo ui's page missing from the wheel: {sorted(assets - names)}"
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "bench/"))]


def _version() -> str:
    from exo_cli import __version__

    return __version__


def _env(prefix: Path, **extra: str) -> dict[str, str]:
    site = next(prefix.glob("lib/python*/site-packages"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASH", "ZDOTDIR", "XDG_DATA"))}
    env.update(PATH=f"{prefix / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(site), **extra)
    return env


def test_installed_exo_runs_and_man_finds_its_pages(prefix: Path, tmp_path: Path) -> None:
    env = _env(prefix)
    proc = subprocess.run(["exo", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"exo, version {_version()}", proc.stderr
    for folder, files in DATA.items():
        for f in files:
            assert (prefix / folder / f).is_file(), f"{folder}/{f} not installed"
    if shutil.which("man") is None:
        pytest.skip("man is not installed")
    # man-db finds a prefix's pages from PATH (<prefix>/bin -> <prefix>/share/man), as for a venv
    env.pop("MANPATH", None)
    for page in ("exo", "exo-spawn", "exo-pr-merge"):
        proc = subprocess.run(["man", "-w", page], env=env, capture_output=True, text=True)
        assert proc.stdout.strip() == str(prefix / "share/man/man1" / f"{page}.1"), proc.stderr


def test_bash_completion_loader_finds_and_runs_it(prefix: Path, tmp_path: Path) -> None:
    loader = Path("/usr/share/bash-completion/bash_completion")
    if shutil.which("bash") is None or not loader.is_file():
        pytest.skip("bash-completion is not installed")
    script = (f"source {loader}; __load_completion exo || exit 3; complete -p exo; "
              "COMP_WORDS=(exo sta); COMP_CWORD=1; _exo_completion exo; echo \"reply=${COMPREPLY[*]}\"")
    env = _env(prefix, XDG_DATA_DIRS=f"{prefix / 'share'}:/usr/share", HOME=str(tmp_path))
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "complete -o nosort -F _exo_completion exo" in proc.stdout
    assert "reply=status" in proc.stdout


def test_zsh_compinit_finds_it_in_site_functions(prefix: Path, tmp_path: Path) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    script = f"fpath=({prefix / 'share/zsh/site-functions'} $fpath); autoload -Uz compinit; compinit -D -u; print -r -- ${{_comps[exo]}}"
    proc = subprocess.run(["zsh", "-f", "-c", script], cwd=tmp_path, env=_env(prefix, HOME=str(tmp_path)),
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "_exo", proc.stderr


def test_fish_finds_its_vendor_completion(prefix: Path, tmp_path: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    env = _env(prefix, XDG_DATA_DIRS=f"{prefix / 'share'}:/usr/share", HOME=str(tmp_path),
               XDG_CONFIG_HOME=str(tmp_path / ".config"), XDG_DATA_HOME=str(tmp_path / ".local/share"))
    proc = subprocess.run(["fish", "-c", 'complete -C"exo sta"'], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    import click

    from exo_cli.commands import COMMANDS

    summary = click.Command("status", help=COMMANDS["status"].summary).get_short_help_str()
    assert "," in summary and line == f"status\t{summary}", line  # whole, past its comma


def test_completion_install_from_a_tool_prefix(prefix: Path, tmp_path: Path) -> None:
    """As after `uv tool install .`: exo in a prefix where neither man nor the shell looks, linked from
    ~/.local/bin. One `exo completion --install` makes `man exo` and the completion work."""
    home = tmp_path / "home"
    (home / ".local/bin").mkdir(parents=True)
    (home / ".local/bin/exo").symlink_to(prefix / "bin/exo")
    env = _env(prefix, HOME=str(home), SHELL="/bin/bash")
    env["PATH"] = f"{home / '.local/bin'}{os.pathsep}{os.environ['PATH']}"  # not the prefix's bin
    env.pop("MANPATH", None)
    proc = subprocess.run(["exo", "completion", "--install"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    man1 = home / ".local/share/man/man1"
    assert proc.stdout.splitlines()[2] == f"Man pages: {len(DATA['share/man/man1'])} written to {man1}"
    assert "warning" not in proc.stdout
    assert sorted(p.name for p in man1.iterdir()) == DATA["share/man/man1"]
    assert (home / ".bashrc").read_text().startswith("command -v exo")
    if shutil.which("man") is not None:
        found = subprocess.run(["man", "-w", "exo-spawn"], env=env, capture_output=True, text=True)
        assert found.stdout.strip() == str(man1 / "exo-spawn.1"), found.stderr
