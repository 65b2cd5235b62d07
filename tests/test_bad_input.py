"""Hostile input to every operation, through the CLI and through registry.invoke (hypothesis).

For each operation of the registry and each of its text, list or number parameters,
hypothesis draws hostile values (quotes, ``$()``, backticks, ``;|&``, newlines, NUL, every C0
and C1 control character, terminal escape sequences (the end of a bracketed paste,
Shift+Tab, OSC 52, OSC 0, clear screen), lone surrogates, RTL and combining marks, 100 KB
strings, path traversal, absolute paths, a leading ``-``) while the other parameters keep
benign values. Every call must end in a documented way: exit code 0/2/3/4/5/6/7 (never 70,
never a traceback), or an ExoError with a documented JSON-RPC code; neither the JSON nor the
human view of the call puts a raw control character on the terminal; nothing may be written
outside the repository, exo's state and the temp folders, and nothing is left half-written
(an interrupted spawn's record, a stray worktree or branch, a temp file); a canary file that
shell interpretation of ``$(touch ...)`` or backticks would create never appears. Every
configuration key gets wrong types, hostile values and bytes that are not UTF-8, with the same
checks. Text typed into a pane arrives byte-identical (control characters made visible).
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

from conftest import Exo, git, stop_repo_agents, write_trusted

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


# Every C0 and C1 control character, DEL, and the sequences that act on a terminal or a pane:
# the end of a bracketed paste, Shift+Tab, Ctrl-C, CR, OSC 52 (clipboard), OSC 0 (title),
# clear screen, a C1 CSI; lone surrogates (argv bytes that were not UTF-8).
CONTROLS = [chr(c) for c in range(1, 0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
ESCAPES = ["\x1b[201~", "\x1b[200~", "\x1b[Z", "\x03", "\r", "\x1b]52;c;cHduZWQ=\x07", "\x1b]0;title\x1b\\",
           "\x1b[2J\x1b[H", "\x9b31m", "\x1bP+q\x1b\\", "\udcff\udcfe", "\ud800"]


def control_strategy() -> st.SearchStrategy[str]:
    piece = st.sampled_from(CONTROLS + ESCAPES + ["x", "w1", " ", "\n", "\t", "é"])
    return st.lists(piece, min_size=1, max_size=12).map("".join)


def text_strategy(canary: Path) -> st.SearchStrategy[str]:
    fixed = st.sampled_from(hostile_fixed(canary))
    pieces = st.lists(fixed, min_size=2, max_size=3).map("".join)
    wild = st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from("$`;|&\n\x00\x1b'\"-/."),
        max_size=40,
    )
    return st.one_of(fixed, pieces, wild, control_strategy())


def raw_controls(text: str) -> list[str]:
    """The control characters in ``text`` a terminal would obey (all C0/C1 but newline and tab)."""
    return [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def plain(annotation: str) -> str:
    """The annotation without its ``Annotated[...]`` narrowing: ``Annotated[int, Range(1)] | None`` is ``int | None``."""
    import re

    return re.sub(r"Annotated\[([^,\[\]]+(?:\[[^\]]*\])?), [^\]]*\]", r"\1", annotation)


def value_strategy(annotation: str, canary: Path) -> st.SearchStrategy[Any] | None:
    annotation = plain(annotation)
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
# Operations whose human view is not run again: the demo (a whole scripted run each time; its
# board is checked in tests/test_terminal.py) and attach (it would exec a terminal program).
HUMAN_SKIP = {"demo", "attach"}
SKIP_PARAMS = {("spawn", "edit"), ("watch", "interval_pending"), ("watch", "interval_idle"),
               ("wait", "timeout"), ("question", "timeout"), ("read", "timeout")}
# Parameters naming a folder that exo creates and then works in: `demo --dir /x/y` (or ~/x,
# or ../../x) is a valid request that makes a scratch repository there and runs the whole
# demo, outside every folder this test watches (as root, even at /). Their hostile values are
# kept inside the repository, where exo must refuse them without writing anything.
CONFINED = {("demo", "path")}


def confined(value: str) -> str:
    """``value`` as a path under the current folder: no leading ``/`` or ``~``, no ``..``."""
    return "./" + value.replace("..", "__")


def benign(annotation: str, required: bool) -> Any:
    annotation = plain(annotation)
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
    write_trusted(repo,
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
    # exo's own note of each clone it made (agents are sandboxed, each in its own clone, by default), in the user's
    # exo folder: every line names the world's repository and a clone under it, nothing a parameter chose
    homes = Path(os.environ["EXO_CONFIG_DIR"]) / "clones.jsonl"
    if str(homes) in new:
        new.remove(str(homes))
        repo = os.path.realpath(world["repo"])
        for line in homes.read_text().splitlines():
            rec = json.loads(line)
            assert rec["repo"] == repo and rec["clone"].startswith(repo + "/.exo/worktrees/"), rec
    assert new == [], f"files written outside the repository: {new[:5]}"
    check_nothing_half_written(world["repo"])


def check_nothing_half_written(repo: Path) -> None:
    """No interrupted spawn left behind, no stray worktree or branch, no temp file, a sound database."""
    from exo_cli.env import Env

    env = Env(cwd=repo)
    agents = env.store.agents() if env.has_state() else []
    for a in agents:
        assert a.spec.get("phase") in ("spawned", "pending"), (a.id, a.spec.get("phase"))
    if env.has_state():
        assert env.store.query("PRAGMA integrity_check")[0][0] == "ok"  # type: ignore[attr-defined]
    recorded = {str(Path(a.worktree).resolve()) for a in agents if a.worktree}
    root = repo / ".exo" / "worktrees"
    if root.is_dir():
        stray = [str(p) for p in root.iterdir() if str(p.resolve()) not in recorded]
        assert stray == [], f"worktrees without an agent: {stray}"
    branches = git(repo, "branch", "--format=%(refname:short)").split()
    owned = {a.branch for a in agents if a.branch}
    assert [b for b in branches if b != "main" and b not in owned] == [], branches
    temps = [str(p) for base in (repo / ".exo", repo / ".git" / "exo") if base.is_dir() for p in base.rglob("*.tmp")]
    assert temps == [], temps


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
    if (op_name, param) in CONFINED:
        strategy = strategy.map(confined)
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
        else:
            assert (op_name, param) not in CONFINED, f"{op_name} accepted {param}={value!r} inside the repository"
        # Through the CLI: a documented exit code, and the JSON error object on errors.
        argv = _cli_argv(op_name, kwargs)
        if argv is not None:
            r = exo(*argv)
            assert r.exit_code in EXITS, (argv[:6], r.exit_code, r.stdout[-2000:], r.stderr[-2000:])
            assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
            assert raw_controls(r.stdout) == [], r.stdout[-2000:]  # JSON escapes every control character
            if r.exit_code not in (0, 2) and r.stdout.strip().startswith("{"):
                doc = json.loads(r.stdout)
                errors = [doc["error"]] if "error" in doc else doc.get("errors", [])
                assert errors, doc  # an error object, or spawn's per-task error objects
                assert all(e["code"] in CODES and e["message"] for e in errors), errors
            # The human view of the same call: nothing raw reaches the terminal.
            if op_name not in HUMAN_SKIP:
                h = exo(*[a for a in argv if a != "--json"])
                assert h.exit_code in EXITS and "Traceback" not in h.stderr, (argv[:6], h.exit_code, h.stderr[-2000:])
                assert raw_controls(h.stdout + h.stderr) == [], (argv[:6], h.stdout[-1000:], h.stderr[-1000:])
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
    deadline = time.monotonic() + 60
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
    deadline = time.monotonic() + 60
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
    (["kill", "w\udcff"], 4),  # bytes that are not UTF-8 reached SQLite: UnicodeEncodeError (exit 70)
    (["status", "\udcff\udcfe"], 4),
    (["send", "w1", "hi \udcff"], 4),
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


# --------------------------------------------------------------------------- every config key: wrong types, bad bytes


def config_keys() -> list[str]:
    from exo_cli.config import SCHEMA

    return sorted(SCHEMA)


def config_value_strategy(key: str, canary: Path) -> st.SearchStrategy[Any]:
    """Wrong types and hostile values of the right type for ``key`` (TOML-writable)."""
    text = text_strategy(canary).filter(lambda t: "\x00" not in t and re_surrogate.search(t) is None)
    scalar = st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                       st.floats(allow_nan=True, allow_infinity=True), text)
    wrong = st.one_of(
        scalar,
        st.lists(scalar, max_size=3),
        st.dictionaries(st.sampled_from(["claude", "custom", "x", "command", "port", "a b"]),
                        st.one_of(scalar, st.lists(text, max_size=2)), max_size=3),
        st.datetimes(),
    )
    if key == "worktree.root":  # a string there is a real folder anywhere on disk: only wrong types
        return wrong.filter(lambda v: not isinstance(v, str))
    return wrong


re_surrogate = __import__("re").compile("[\ud800-\udfff]")


def _toml_for(key: str, value: Any) -> str:
    import tomli_w

    parts = key.split(".")
    doc: dict[str, Any] = {}
    node = doc
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return tomli_w.dumps(doc)


def _config_calls(exo: Exo, tag: str) -> list[Any]:
    """The commands that read the configuration: a spawn (as JSON and as a human view), agents, PRs, wait."""
    out = []
    for args in (["spawn", "--worker", f"j{tag}", "--prompt", "x", "--json"],
                 ["spawn", "--worker", f"h{tag}", "--prompt", "x"],
                 ["agents"], ["pr", "list"], ["wait", "--timeout", "0"]):
        out.append((args, exo(*args)))
    return out


def _check_calls(calls: list[Any]) -> None:
    for args, r in calls:
        assert r.exit_code in EXITS, (args, r.exit_code, r.stdout[-2000:], r.stderr[-2000:])
        assert "Traceback" not in r.stdout + r.stderr, (args, r.stderr[-2000:])
        assert raw_controls(r.stdout + r.stderr) == [], (args, r.stdout[-1000:], r.stderr[-1000:])
        if r.exit_code == 4 and "--json" in args:
            doc = json.loads(r.stdout)
            errors = [doc["error"]] if "error" in doc else doc.get("errors", [])
            assert errors and all(e["code"] == -32002 for e in errors), doc


@pytest.mark.parametrize("key", config_keys())
def test_hostile_config_key(world: dict[str, Any], key: str) -> None:
    """Every configuration key, given wrong types and hostile values: a documented error naming it, or a
    run that works; never exit 70, a traceback, raw control characters or anything half-written."""
    repo = world["repo"]
    exo = Exo(repo)
    base = (repo / "exo.toml").read_text()
    counter = iter(range(10**6))

    @settings(max_examples=8, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(value=config_value_strategy(key, world["canary"]))
    def run(value: Any) -> None:
        local = repo / ".exo" / "config.toml"
        local.parent.mkdir(exist_ok=True)
        local.write_text(_toml_for(key, value))
        try:
            calls = _config_calls(exo, str(next(counter)))
        finally:
            local.unlink()
        _check_calls(calls)
        bad = [r for args, r in calls if r.exit_code == 4 and key.split(".")[0] in (r.stdout + r.stderr)]
        assert bad or any(r.exit_code != 4 for _a, r in calls), calls  # a refusal names the key
        assert not world["canary"].exists()
        check_nothing_half_written(repo)

    run()
    # The same key holding bytes that are not UTF-8, in the repository's file and in the local one.
    for where in (repo / "exo.toml", repo / ".exo" / "config.toml"):
        section, _, name = key.rpartition(".")
        raw = (f"[{section}]\n" if section else "").encode() + name.encode() + b' = "ok\xff\xfe"\n'
        where.write_bytes((base.encode() + b"\n" + raw) if where.name == "exo.toml" else raw)
        try:
            calls = _config_calls(exo, str(next(counter)))
        finally:
            if where.name == "exo.toml":
                where.write_text(base)
            else:
                where.unlink()
        _check_calls(calls)
        for args, r in calls:
            if args[0] == "spawn":
                assert r.exit_code == 4 and str(where) in (r.stdout + r.stderr) and "UTF-8" in r.stdout + r.stderr
    check_nothing_half_written(repo)
