"""Text an agent wrote never acts on the human's terminal (docs/security.md "Text agents write").

Agent-written text (a task, notes and messages, the last message, the output, PR titles and
bodies, question text, names of things) is rendered for humans through ``render.text.Out``,
which makes every C0/C1 control character but newline and tab visible (``ESC`` as ``^[``) and
gives rich plain text, never markup. Checked piped and on a real terminal (a pty, where rich
draws), for every human view that shows such text; ``--json`` keeps the exact text. A
structural check keeps every command's output going through ``Out``.
"""

from __future__ import annotations

import ast
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import EXO, ROOT, Exo, agent_vars, git
from exo_cli.env import Env
from exo_cli.records import Agent

# What a hostile agent writes: OSC 52 (clipboard), OSC 0 (title), clear screen, cursor home,
# a CSI as a C1 control, CR (overwrite the line), BEL, DEL, backspace, a fake bracketed paste end.
EVIL = "A\x1b]52;c;cHduZWQ=\x07B\x1b]0;owned\x1b\\C\x1b[2J\x1b[HD\x9b31mE\rF\x07G\x7fH\x08I\x1b[201~J"
SHOWN = "A^[]52;c;cHduZWQ=^GB^[]0;owned^[\\C^[[2J^[[HDM-^[31mE^MF^GG^?H^HI^[[201~J"
TITLE = "[demo-cfg] Read [bold]the[/bold] config :smile:"


def _hostile(text: str) -> None:
    """Nothing in ``text`` acts on a terminal: no raw control character but newline and tab (CRLF on a
    pty), and no escape sequence but rich's own colours (SGR ``ESC[...m``)."""
    text = text.replace("\r\n", "\n")
    without_sgr = re.sub(r"\x1b\[[0-9;]*m", "", text)
    bad = [c for c in without_sgr if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    assert not bad, (bad[:5], text[:2000])


@pytest.fixture
def world(repo: Path) -> dict[str, Any]:
    """A repository whose records hold agent-written hostile text everywhere a human view shows it."""
    env = Env(cwd=repo)
    now = time.time()
    wt = repo / ".exo" / "worktrees" / "w1"
    git(repo, "worktree", "add", "-q", "-b", "main.w1", str(wt))
    env.store.insert_agent(Agent(id="w1", name="w1", role="dev", parent="root", status="working", backend="custom",
                                 mux="headless", task="task " + EVIL, branch="main.w1", worktree=str(wt),
                                 base_branch="main", output="output " + EVIL, created_at=now, updated_at=now,
                                 status_at=now))
    env.store.post("note", "w1", "root", "note " + EVIL, data={"from_name": "w1"})
    number = env.store.insert_pr(forge="local", title=TITLE + " " + EVIL, body="body " + EVIL, head="main.w1",
                                 base="main", author="w1", state="open")
    return {"repo": repo, "pr": number, "ids": agent_vars(repo, "w1")}


VIEWS = [
    ["agents"],
    ["status", "w1"],
    ["output", "w1"],
    ["pr", "list"],
    ["pr", "show", "{pr}"],
    ["wait", "--timeout", "0"],
]


def _argv(view: list[str], world: dict[str, Any]) -> list[str]:
    return [a.format(pr=world["pr"]) for a in view]


@pytest.mark.parametrize("view", VIEWS, ids=[" ".join(v) for v in VIEWS])
def test_piped_human_views_show_agent_text_visibly(world: dict[str, Any], view: list[str]) -> None:
    r = Exo(world["repo"])(*_argv(view, world))
    assert r.exit_code == 0, r.stdout + r.stderr
    _hostile(r.stdout + r.stderr)
    assert "^[]52;c;cHduZWQ=^G" in r.stdout, r.stdout


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("view", VIEWS, ids=[" ".join(v) for v in VIEWS])
def test_json_keeps_the_exact_text(world: dict[str, Any], view: list[str]) -> None:
    r = Exo(world["repo"])(*_argv(view, world), "--json")
    assert r.exit_code == 0, r.stdout
    assert any(EVIL in s for s in _strings(json.loads(r.stdout))), r.stdout
    _hostile(r.stdout)  # JSON-escaped on the wire (C1 controls and DEL too)


def _on_a_tty(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``exo argv`` with stdout and stderr on a real pseudo-terminal; return what the terminal got."""
    master, slave = pty.openpty()
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "400"}
    full.pop("NO_COLOR", None)
    proc = subprocess.Popen([*EXO, *argv], cwd=cwd, env=full, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("view", VIEWS, ids=[" ".join(v) for v in VIEWS])
def test_terminal_human_views_show_agent_text_visibly(world: dict[str, Any], view: list[str]) -> None:
    shown = _on_a_tty(_argv(view, world), world["repo"], {})
    _hostile(shown)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "^[]52;c;cHduZWQ=^G" in plain, plain
    if view[0] == "pr":  # rich draws it: markup and emoji codes stay text
        assert "[demo-cfg] Read [bold]the[/bold] config :smile:" in plain, plain


def test_errors_quoting_agent_text_are_safe(world: dict[str, Any]) -> None:
    """An error message that quotes a value (here an agent name that was never valid) is made safe too."""
    r = Exo(world["repo"])("output", "w\x1b]0;x\x07")
    assert r.exit_code in (3, 4), r.stderr
    _hostile(r.stdout + r.stderr)
    shown = _on_a_tty(["output", "w\x1b]0;x\x07"], world["repo"], {})
    _hostile(shown)
    assert "^[]0;x^G" in shown or "\\x1b" in shown


def test_the_demo_board_shows_agent_text_visibly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live board (rich, on a terminal) and its plain progress lines."""
    import io
    from types import SimpleNamespace

    from exo_cli.render import board as board_mod

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    agent = SimpleNamespace(id="a", name="a", status="working", task="task " + EVIL, branch="main.a",
                            pr={"number": 1, "state": "open"}, last_message=TITLE + EVIL, bead=None, parent="tl1",
                            depth=0, turns=1, tool_calls=2, tokens=3, age_seconds=4.0)
    agents = SimpleNamespace(agents=[agent])
    for live in (True, False):
        stream = Tty()
        monkeypatch.setattr(sys, "stderr", stream)
        monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("TERM", "xterm-256color")
        b = board_mod.LiveBoard() if live else board_mod.PlainBoard()
        b.board(agents, 1.0)
        b.event("note from a: " + EVIL)
        b.close()
        text = stream.getvalue()
        # rich's live view moves the cursor itself (CSI, CR); nothing of the agent's text is raw.
        for raw in ("\x1b]", "\x07", "\x9b", "\x7f", "\x08", "\x1b[2J", "\x1b[H", "\x1b[201~", "\x1b\\"):
            assert raw not in text, (raw, text)
        if not live:
            _hostile(text)
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
        assert "^[]52;c;cHduZWQ=^G" in plain, plain
        if live:
            assert "[demo-cfg]" in plain


# --------------------------------------------------------------------------- every command goes through Out

COMMANDS = Path(__file__).resolve().parent.parent / "exo_cli" / "commands"
# The hook answers the agent CLI in JSON on stdout (machine output, never a human's terminal);
# `exo completion` prints exo's own generated script.
ALLOWED = {("completion.py", "click.echo"), ("_complete.py", "click.echo"), ("hook.py", "sys.stdout.write"), ("hook.py", "sys.stdout.flush"), ("lifecycle.py", "sys.stdout.flush"),
           ("lifecycle.py", "sys.stdout.isatty"), ("lifecycle.py", "sys.stdin.isatty"), ("spawn.py", "sys.stdin.read"),
           ("hook.py", "sys.stdin.isatty"), ("hook.py", "sys.stdin.read"), ("board.py", "sys.stdout.isatty"),
           ("board.py", "sys.stdin.isatty")}
FORBIDDEN_CALLS = {"print", "echo", "secho", "Console", "write", "writelines"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return "?"


def test_every_command_writes_through_render() -> None:
    """No command module prints by itself: all human output goes through ``render`` (``Out``, ``warn``)."""
    found = []
    for path in sorted(COMMANDS.glob("*.py")):
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                if (mod or "").startswith("rich"):
                    found.append((path.name, f"import {mod}"))
            elif isinstance(node, ast.Call):
                name = _dotted(node.func)
                if (name.startswith(("sys.stdout", "sys.stderr")) or name.rsplit(".", 1)[-1] in FORBIDDEN_CALLS) \
                        and (path.name, name) not in ALLOWED:
                    found.append((path.name, name))
            elif isinstance(node, ast.Attribute):
                name = _dotted(node)
                if name in ("sys.stdout", "sys.stderr") and not isinstance(parents.get(node), ast.Attribute):
                    found.append((path.name, f"{name} as a value"))  # e.g. file=sys.stderr
                if node.attr in ("stream", "_stream"):
                    found.append((path.name, name))
    assert found == [], found
