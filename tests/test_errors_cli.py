"""The error model through the CLI: codes, exit statuses, stdout/stderr split, no tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Exo, run_exo
from exo_cli import errors


def test_error_classes_have_design_codes() -> None:
    table = {c.name: (c.rpc_code, c.exit_code) for c in errors.BY_NAME.values()}
    assert table == {
        "UsageError": (-32602, 2),
        "NotFound": (-32001, 3),
        "InvalidInput": (-32002, 4),
        "ExternalFailure": (-32003, 6),
        "StateError": (-32004, 5),
        "EnvironmentError": (-32005, 7),
    }
    e = errors.StateError("dirty", hint="commit first", files=["a"])
    assert e.to_dict() == {"error": {"code": -32004, "name": "StateError", "message": "dirty",
                                     "hint": "commit first", "data": {"files": ["a"]}}}


def test_not_found_human_and_json(exo: Exo) -> None:
    r = exo("status", "nobody")
    assert r.exit_code == 3
    assert r.stdout == ""
    assert r.stderr == "Error: No agent named 'nobody'\nHint: List agents with `exo agents`.\n"
    r = exo("status", "nobody", "--json")
    assert r.exit_code == 3
    assert r.stderr == ""
    assert r.json() == {"error": {"code": -32001, "name": "NotFound", "message": "No agent named 'nobody'",
                                  "hint": "List agents with `exo agents`.", "data": {"agent": "nobody"}}}


def test_outside_repo_is_environment_error(tmp_path: Path) -> None:
    r = Exo(tmp_path)("status", "--json")
    assert r.exit_code == 7
    err = r.json()["error"]
    assert err["code"] == -32005 and err["name"] == "EnvironmentError"
    assert "Not in a git repository" in err["message"]


def test_usage_error_exit_2_and_json_object(exo: Exo) -> None:
    r = exo("status", "--bogus")
    assert r.exit_code == 2
    assert "No such option" in r.stderr
    r = exo("status", "--bogus", "--json")
    assert r.exit_code == 2
    assert r.json()["error"]["code"] == -32602
    assert r.json()["error"]["name"] == "UsageError"


def test_unknown_command_exit_2(exo: Exo) -> None:
    r = exo("no-such-command")
    assert r.exit_code == 2
    assert "No such command" in r.stderr


def test_bad_config_value_names_key(exo: Exo, repo: Path) -> None:
    (repo / "exo.toml").write_text('[mux]\ndefault = "screen"\n')
    r = exo("init", "--json")
    assert r.exit_code == 4
    err = r.json()["error"]
    assert err["name"] == "InvalidInput"
    assert "mux.default" in err["message"] and "exo.toml" in err["message"]
    assert err["data"]["key"] == "mux.default"


def test_internal_error_is_exit_70_without_traceback(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real subprocess whose status operation is replaced by one that fails with a bug (1/0):
    code = (
        "import sys; "
        "from exo_cli import registry; op = registry.get('status'); "
        "registry.OPS['status'] = op._replace(func=lambda env, **kw: 1/0); "
        "from exo_cli.main import main; main(['status'])"
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 70
    assert "Traceback" not in proc.stderr
    assert "internal error: ZeroDivisionError" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                          env={**__import__("os").environ, "EXO_DEBUG": "1"})
    assert proc.returncode == 70
    assert "Traceback" in proc.stderr


def test_subprocess_cli_exit_codes(repo: Path) -> None:
    proc = run_exo("status", "ghost", "--json", cwd=repo)
    assert proc.returncode == 3
    assert '"NotFound"' in proc.stdout
    proc = run_exo("--version", cwd=repo)
    assert proc.returncode == 0 and proc.stdout.startswith("exo, version")


@pytest.mark.parametrize(("command", "options", "after"), [
    ("status", [], []), ("kill", [], []), ("attach", [], []), ("read", [], []), ("send", [], ["hello"]),
    ("wait", ["--timeout", "0"], []), ("complete", [], []),
])
@pytest.mark.parametrize("name", ["../etc", "a/b", "x;y", "-rf"])
def test_unsafe_agent_name_is_invalid_input_not_not_found(exo: Exo, command: str, options: list[str],
                                                          after: list[str], name: str) -> None:
    """A name no agent can have is -32002 (exit 4) wherever an agent is looked up, never -32001."""
    r = exo(command, "--json", *options, "--", name, *after)
    assert (r.exit_code, r.json()["error"]["code"]) == (4, -32002), r.stdout + r.stderr
