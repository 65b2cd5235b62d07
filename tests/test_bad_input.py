"""Hostile input to every operation, through the CLI and through registry.invoke (hypothesis).

For each operation of the registry and each of its text, list or number parameters,
hypothesis draws hostile values (quotes, ``$()``, backticks, ``;|&``, newlines, NUL, escape
sequences, RTL and combining marks, 100 KB strings, path traversal, absolute paths, a
leading ``-``) while the other parameters keep benign values. Every call must end in a
documented way: exit code 0/2/3/4/5/6/7 (never 70, never a traceback), or an ExoError with
a documented JSON-RPC code; nothing may be written outside the repository, exo's state and
the temp folders; a canary file that shell interpretation of ``$(touch ...)`` or backticks
would create never appears. Text typed into a pane arrives byte-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_mux_tmux import RAW_READER

from conftest import Exo, git, stop_repo_agents

CODES = {-32602, -32001, -32002, -32003, -32004, -32005}
EXITS = {0, 2, 3, 4, 5, 6, 7}


def hostile_fixed(canary: Path) -> list[str]:
    return [
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"x; touch {canary}",
        f"x | touch {canary} & touch {canary}",
        f"'\"$(touch {canary})\"'",
        "it's \"quoted\" \\ back\\slash",
        "line1\nline2\r\nline3",
        "nul\x00byte",
        "\x1b[31mred\x1b[0m\x1b]0;title\x07\x1b[2J",
        "\u202eevil\u202c rtl \u05e9\u05dc\u05d5\u05dd \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
        "a\u0301\u0302\u0303 combining \u200b\u200d zero width \ufeff",
        "../../etc/passwd",
        "../../../../../../tmp/escape",
        "/etc/passwd",
        "/tmp",
        "-rf",
        "--help",
        "-",
        "",
        " ",
        ".",
        "..",
        "~",
        "$HOME",
        "%s%n{0}{{x}}",
        "main..x",
        "refs/heads/main",
        "@{-1}",
        "x" * 300,
        ("A" * 100_000) + f"$(touch {canary})",
        "日本語 ✓ ünïcødé 🙂",
    ]


def text_strategy(canary: Path) -> st.SearchStrategy[str]:
    fixed = st.sampled_from(hostile_fixed(canary))
    pieces = st.lists(fixed, min_size=2, max_size=3).map("".join)
    wild = st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from("$`;|&\n\x00\x1b'\"-/."),
        max_size=40,
    )
    return st.one_of(fixed, pieces, wild)


def value_strategy(annotation: str, canary: Path) -> st.SearchStrategy[Any] | None:
    text = text_strategy(canary)
    if annotation.startswith("list[dict"):
        return st.lists(st.fixed_dictionaries({"name": text, "prompt": text}), min_size=1, max_size=2)
    if annotation.startswith("list[str]"):
        return st.lists(text, min_size=1, max_size=3)
    if annotation.startswith("str"):
        return text
    if annotation.startswith("int"):
        return st.sampled_from([-1, 0, 2**31, 2**63, -(2**63)])
    return None


# Parameters never fuzzed (they would block, open an editor, or loop) and their fixed values.
FIXED: dict[str, dict[str, Any]] = {
    "spawn": {"edit": False, "mux": "headless", "agent": "custom", "after": None},
    "wait": {"timeout": 0.1},
    "question": {"timeout": 0.1},
    "read": {"timeout": 0.1},
    "watch": {"once": True, "interval_pending": 1, "interval_idle": 1},
}
SKIP_PARAMS = {("spawn", "edit"), ("watch", "interval_pending"), ("watch", "interval_idle"),
               ("wait", "timeout"), ("question", "timeout"), ("read", "timeout")}


def benign(annotation: str, required: bool) -> Any:
    if not required:
        return None
    if annotation.startswith("list"):
        return ["nobody"]
    if annotation.startswith("int"):
        return 1
    return "nobody"


def all_ops() -> list[tuple[str, str]]:
    from exo_cli import registry

    out = []
    for name, operation in sorted(registry.load_all().items()):
        for p in operation.params():
            ann = str(p.annotation)
            if (name, p.name) in SKIP_PARAMS or value_strategy(ann, Path("/x")) is None:
                continue
            out.append((name, p.name))
    return out


def snapshot(*roots: Path, skip: tuple[Path, ...]) -> set[str]:
    seen: set[str] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if not any((here / d) == s for s in skip)]
            seen.update(str(here / f) for f in filenames)
            seen.update(str(here / d) for d in dirnames)
    return seen


@pytest.fixture
def world(repo: Path, tmp_path: Path, isolate: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A repo whose agents are a quick headless custom command; a canary path; snapshots to compare."""
    (repo / "exo.toml").write_text(
        '[agent]\ndefault = "custom"\ncommand = ["true"]\n[mux]\ndefault = "headless"\n[forge]\nkind = "local"\n'
    )
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-qm", "exo.toml")
    canary_dir = tmp_path / "canary"
    canary_dir.mkdir()
    monkeypatch.setenv("EDITOR", "false")
    monkeypatch.setenv("VISUAL", "false")
    monkeypatch.setenv("PATH", "/nonexistent-gh-free:" + os.environ["PATH"])
    Exo(repo)("init")
    roots = (tmp_path, isolate)
    before = snapshot(*roots, skip=(repo,))
    yield {"repo": repo, "canary": canary_dir / "canary", "roots": roots, "before": before}
    kill_headless_agents(repo)


def kill_headless_agents(repo: Path) -> None:
    """Stop every headless agent process group recorded for ``repo``."""
    stop_repo_agents(repo, tmux=False)


def _cli_argv(op_name: str, kwargs: dict[str, Any]) -> list[str] | None:
    """The command line that passes ``kwargs`` to operation ``op_name`` (None: op has no command)."""
    import click

    from exo_cli import registry
    from exo_cli.main import cli

    operation = registry.get(op_name)
    if operation.cli is None:
        return None
    ctx = click.Context(cli)
    path = operation.cli.split()
    cmd: click.Command | None = cli
    for part in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(ctx, part)
        assert cmd is not None, op_name
    argv = [*path, "--json"]
    positional: list[str] = []
    for param in cmd.params:
        if param.name not in kwargs or kwargs[param.name] is None:
            continue
        value = kwargs[param.name]
        values = value if isinstance(value, list) else [value]
        if isinstance(param, click.Argument):
            positional.extend(str(v) for v in values)
        elif isinstance(param, click.Option):
            if param.is_flag:
                if value is True:
                    argv.append(param.opts[0])
                elif value is False and param.secondary_opts:
                    argv.append(param.secondary_opts[0])
                continue
            for v in values:
                argv += [param.opts[0], json.dumps(v) if isinstance(v, dict) else str(v)]
    return [*argv, *positional]


def check_world(world: dict[str, Any]) -> None:
    assert not world["canary"].exists(), "shell interpretation: the canary was created"
    after = snapshot(*world["roots"], skip=(world["repo"],))
    new = sorted(after - world["before"])
    assert new == [], f"files written outside the repository: {new[:5]}"


@pytest.mark.parametrize(("op_name", "param"), all_ops())
def test_hostile_parameter(world: dict[str, Any], op_name: str, param: str) -> None:
    from exo_cli import registry
    from exo_cli.env import Env
    from exo_cli.errors import ExoError

    operation = registry.get(op_name)
    params = {p.name: p for p in operation.params()}
    base: dict[str, Any] = {}
    for p in params.values():
        required = p.default is p.empty
        base[p.name] = benign(str(p.annotation), required) if required else p.default
    base.update(FIXED.get(op_name, {}))
    strategy = value_strategy(str(params[param].annotation), world["canary"])
    assert strategy is not None
    exo = Exo(world["repo"])

    @settings(max_examples=20, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(value=strategy)
    def run(value: Any) -> None:
        kwargs = {**base, param: value}
        # Through the registry: only ExoError, with a documented code.
        try:
            registry.invoke(op_name, Env(cwd=world["repo"]), **kwargs)
        except ExoError as exc:
            assert exc.rpc_code in CODES and exc.exit_code in EXITS, (exc.rpc_code, exc)
        # Through the CLI: a documented exit code, and the JSON error object on errors.
        argv = _cli_argv(op_name, kwargs)
        if argv is not None:
            r = exo(*argv)
            assert r.exit_code in EXITS, (argv[:6], r.exit_code, r.stdout[-2000:], r.stderr[-2000:])
            assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
            if r.exit_code not in (0, 2) and r.stdout.strip().startswith("{"):
                doc = json.loads(r.stdout)
                errors = [doc["error"]] if "error" in doc else doc.get("errors", [])
                assert errors, doc  # an error object, or spawn's per-task error objects
                assert all(e["code"] in CODES and e["message"] for e in errors), errors
        check_world(world)

    run()
    check_world(world)


# --------------------------------------------------------------------------- text into a pane



@pytest.fixture
def raw_pane(tmp_path: Path) -> Iterator[tuple[Any, Any, Path]]:
    from exo_cli.adapters.mux.tmux import Tmux

    tmux = Tmux(f"exo-test-{uuid.uuid4().hex[:10]}", "exotest", runtime_dir=tmp_path / "rt")
    prog = tmp_path / "raw.py"
    prog.write_text(textwrap.dedent(RAW_READER))
    out = tmp_path / "raw.bin"
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "HOME": str(tmp_path)}
    loc = tmux.start("raw", [sys.executable, str(prog), str(out)], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 15
    while "READY" not in tmux.capture(loc, 5):
        assert time.monotonic() < deadline, "reader not ready"
        time.sleep(0.03)
    yield tmux, loc, out
    tmux.kill_server()


pane_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
    | st.sampled_from("$`;|&'\"\\-\n\t"),
    min_size=1,
    max_size=200,
).filter(lambda s: s.strip() != "")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@settings(max_examples=20, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=pane_text)
def test_text_to_pane_is_byte_identical(raw_pane: tuple[Any, Any, Path], text: str) -> None:
    tmux, loc, out = raw_pane
    start = out.read_bytes() if out.exists() else b""
    tmux.send_text(loc, text, enter_delay=0.05, confirm=False)
    expected = b"\x1b[200~" + text.replace("\n", "\r").encode("utf-8") + b"\x1b[201~\r"
    deadline = time.monotonic() + 10
    while True:
        got = out.read_bytes()[len(start):] if out.exists() else b""
        if got.endswith(b"\x1b[201~\r") or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert got == expected


# --------------------------------------------------------------------------- regressions found by the above


@pytest.mark.parametrize(("args", "code"), [
    (["pr", "merge", str(2**63)], 3),  # was OverflowError from SQLite (exit 70)
    (["pr", "show", str(2**64)], 3),
    (["spawn", "--worker", "w", "--prompt-file", "a\x00b"], 4),  # was ValueError: embedded null byte
    (["spawn", "--worker", "w", "--prompt", "x", "--repo", "x" * 300], 3),  # was OSError: name too long
    (["spawn", "--worker", "w", "--prompt", "x", "--demo-script", "x" * 300], 3),
])
def test_found_bugs_stay_fixed(exo: Exo, args: list[str], code: int) -> None:
    exo("init")  # a state database, so the pull request lookup reaches SQLite
    r = exo(*args, "--json")
    assert r.exit_code == code, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    errors = [doc["error"]] if "error" in doc else doc["errors"]
    assert errors and all(e["code"] in CODES for e in errors)


def test_not_utf8_prompt_file_is_invalid_input(exo: Exo, repo: Path) -> None:
    (repo / "bin.txt").write_bytes(b"\xff\xfe\x00garbage")
    r = exo("spawn", "--worker", "w", "--prompt-file", "bin.txt", "--json")
    assert r.exit_code == 4 and json.loads(r.stdout)["error"]["code"] == -32002


# --------------------------------------------------------------------------- issue 15: each bad input its error class


@pytest.mark.parametrize("where", ["exo.toml", ".exo/config.toml"])
def test_config_not_utf8_is_invalid_input_naming_the_file(exo: Exo, repo: Path, where: str) -> None:
    path = repo / where
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b'[agent]\ndefault = "cl\xffaude"\n')
    for args in (["spawn", "--worker", "w", "--prompt", "x"], ["agents"], ["status"]):
        r = exo(*args, "--json")
        if r.exit_code == 0:  # a command that does not read the configuration
            continue
        assert r.exit_code == 4, (args, r.stdout)
        doc = json.loads(r.stdout)
        err = doc["error"] if "error" in doc else doc["errors"][0]
        assert err["code"] == -32002 and str(path) in err["message"] and "UTF-8" in err["message"], err
    r = exo("spawn", "--worker", "w", "--prompt", "x")
    assert r.exit_code == 4 and str(path) in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(("toml", "key"), [
    ('[agent]\nargs = "--verbose"\n', "agent.args"),
    ('[agent]\nargs = ["--verbose"]\n', "agent.args"),
    ('[agent.args]\ncustom = "--verbose"\n', "agent.args.custom"),  # never split into -, -, v, e, ...
    ('[agent.args]\ncustom = 5\n', "agent.args.custom"),
    ('[agent.args]\ncustom = ["ok", 5]\n', "agent.args.custom"),
    ('[agent.args]\nnobody = ["x"]\n', "agent.args.nobody"),
    ('[timeouts]\nwait = 9223372036854775807\n', "timeouts.wait"),
])
def test_bad_agent_args_and_timeouts_name_the_key(exo: Exo, repo: Path, toml: str, key: str) -> None:
    (repo / "exo.toml").write_text(toml)
    r = exo("spawn", "--worker", "w", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
    assert r.exit_code == 4, r.stdout
    doc = json.loads(r.stdout)
    err = doc["error"] if "error" in doc else doc["errors"][0]
    assert err["code"] == -32002 and f"Bad value for {key} " in err["message"], err
    assert not (repo / ".exo" / "worktrees" / "w").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e300"])
def test_bad_timeouts_are_invalid_input_everywhere(exo: Exo, repo: Path, value: str) -> None:
    from exo_cli import registry
    from exo_cli.env import Env
    from exo_cli.errors import InvalidInput

    exo("init")
    for args in (["wait"], ["question", "q?"], ["read", "nobody"], ["demo", "--no-keep"]):
        r = exo(*args, "--timeout", value, "--json")
        assert r.exit_code == 4, (args, r.stdout)
        err = json.loads(r.stdout)["error"]
        assert err["code"] == -32002 and "Invalid timeout" in err["message"], err
        assert repr(float(value)) in err["message"], err
    for name, kwargs in (("wait", {}), ("question", {"message": "q?"}), ("read", {"agent": "nobody"})):
        with pytest.raises(InvalidInput, match="Invalid timeout"):
            registry.invoke(name, Env(cwd=repo), timeout=float(value), **kwargs)


def test_failing_editor_is_an_external_failure(exo: Exo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", "false")
    r = exo("spawn", "--worker", "w", "--edit", "--json")
    assert r.exit_code == 6, r.stdout
    err = json.loads(r.stdout)["error"]
    assert err["name"] == "ExternalFailure" and "'false'" in err["message"]
    monkeypatch.setenv("EDITOR", "no-such-editor-anywhere")
    r = exo("spawn", "--worker", "w", "--edit", "--json")
    assert r.exit_code == 7 and json.loads(r.stdout)["error"]["name"] == "EnvironmentError", r.stdout
