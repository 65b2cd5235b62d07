"""A stand-in ``zellij`` program for tests (Zellij cannot be installed here), plus the KDL reader.

Run as ``zellij --session S action ACTION ...`` (the only form exo uses). Every call is
appended to ``$FAKE_ZELLIJ_DIR/calls.jsonl``. It plays Zellij's part where exo depends on it:

- ``new-tab --layout F --cwd D --name N``: parses the KDL layout and starts each named pane's
  command (``agent``, ``process-compose``, ``logs``) detached, as Zellij would in a pane: in
  its own session, with the pane variables Zellij sets (``ZELLIJ``, ``ZELLIJ_SESSION_NAME``,
  ``ZELLIJ_PANE_ID``, ``TERM``) and nothing of the caller's environment; its input is a FIFO
  (what is typed into the pane), its output a file (the pane's screen);
- ``go-to-tab-name N`` focuses a tab; ``write-chars -- TEXT`` and ``write 13`` type into the
  focused tab's agent pane (Enter as a newline); ``dump-screen [--full] FILE`` writes the
  focused pane's screen; ``close-tab`` hangs up the focused tab's panes.

It checks each command line against Zellij's documented syntax and exits 2 on anything else.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

# --------------------------------------------------------------------------- tiny KDL reader

_TOKEN = re.compile(r'[ \t\r]*(?:(//[^\n]*)|("(?:\\.|[^"\\])*")|([{};\n])|([^\s{};="]+)(=)?)')
_ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "b": "\b", "f": "\f", "/": "/"}


def _unquote(s: str) -> str:
    body, out, i = s[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            nxt = body[i + 1]
            if nxt == "u":
                end = body.index("}", i)
                out.append(chr(int(body[i + 3 : end], 16)))
                i = end + 1
                continue
            out.append(_ESC[nxt])
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def parse_kdl(text: str) -> list[dict]:
    """Parse the KDL subset the layout uses into [{name, args, props, children}]."""
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m and m.end() > pos, f"cannot tokenize at {text[pos : pos + 30]!r}"
        pos = m.end()
        comment, string, punct, word, eq = m.groups()
        if comment:
            continue
        if string is not None:
            tokens.append(("str", _unquote(string)))
        elif punct is not None:
            tokens.append((punct, punct))
        elif word is not None:
            tokens.append(("word", word))
            if eq:
                tokens.append(("=", "="))
    stack: list[list[dict]] = [[]]
    node = None
    i = 0
    while i < len(tokens):
        kind, val = tokens[i]
        if kind in ("\n", ";"):
            node = None
        elif kind == "{":
            assert node is not None
            stack.append(node["children"])
            node = None
        elif kind == "}":
            stack.pop()
            node = None
        elif node is None:
            assert kind == "word", f"node name expected, got {val!r}"
            node = {"name": val, "args": [], "props": {}, "children": []}
            stack[-1].append(node)
        elif i + 1 < len(tokens) and tokens[i + 1][0] == "=":
            vkind, vval = tokens[i + 2]
            node["props"][val] = vval if vkind == "str" else {"true": True, "false": False}.get(vval, vval)
            i += 2
        else:
            node["args"].append(val if kind == "str" else {"true": True, "false": False}.get(val, val))
        i += 1
    assert len(stack) == 1, "unbalanced braces"
    return stack[0]


def child(node: dict, name: str) -> dict:
    found = [c for c in node["children"] if c["name"] == name]
    assert len(found) == 1, f"{name} not found once in {node['name']}"
    return found[0]


def panes(node: dict) -> list[dict]:
    return [c for c in node["children"] if c["name"] == "pane"]


def find_pane(nodes: list[dict], name: str) -> dict | None:
    for n in nodes:
        if n["name"] == "pane" and n["props"].get("name") == name:
            return n
        found = find_pane(n["children"], name)
        if found:
            return found
    return None


# --------------------------------------------------------------------------- the program

PANE_NAMES = ("agent", "process-compose", "logs")


def _fail(msg: str) -> int:
    sys.stderr.write(f"fake zellij: {msg}\n")
    return 2


def _tab_state(state: Path, tab: str) -> dict:
    try:
        return json.loads((state / f"{tab}.tab.json").read_text())
    except OSError:
        return {}


def _focused(state: Path) -> str:
    try:
        return (state / "focused").read_text()
    except OSError:
        return ""


def new_tab(state: Path, session: str, args: list[str]) -> int:
    if len(args) != 6 or args[0] != "--layout" or args[2] != "--cwd" or args[4] != "--name":
        return _fail(f"bad new-tab arguments {args}")
    layout, name = parse_kdl(Path(args[1]).read_text()), args[5]
    pids = {}
    for index, pane_name in enumerate(PANE_NAMES):
        pane = find_pane(layout, pane_name)
        if pane is None:
            continue
        cmd = [child(pane, "command")["args"][0], *child(pane, "args")["args"]]
        cwd = child(pane, "cwd")["args"][0]
        fifo = state / f"{name}-{pane_name}.in"
        if fifo.exists():
            fifo.unlink()
        os.mkfifo(fifo, 0o600)
        stdin = os.open(fifo, os.O_RDWR)
        out = os.open(state / f"{name}-{pane_name}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm-256color", "ZELLIJ": "0",
               "ZELLIJ_SESSION_NAME": session, "ZELLIJ_PANE_ID": str(index), "SERVER_ONLY": "zellij's own"}
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=out, stderr=out, start_new_session=True)
        os.close(stdin)
        os.close(out)
        pids[pane_name] = proc.pid
    (state / f"{name}.tab.json").write_text(json.dumps({"pids": pids}))
    (state / "focused").write_text(name)
    return 0


def main(argv: list[str]) -> int:
    state = Path(os.environ["FAKE_ZELLIJ_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    with open(state / "calls.jsonl", "a") as fh:
        fh.write(json.dumps(argv) + "\n")
    if len(argv) < 4 or argv[0] != "--session" or argv[2] != "action":
        return _fail(f"unsupported command line {argv}")
    session, action, args = argv[1], argv[3], argv[4:]
    if action == "new-tab":
        return new_tab(state, session, args)
    if action == "go-to-tab-name":
        if len(args) != 1 or not _tab_state(state, args[0]):
            return _fail(f"no tab {args}")
        (state / "focused").write_text(args[0])
        return 0
    tab = _focused(state)
    if action == "write-chars":
        if len(args) != 2 or args[0] != "--":
            return _fail(f"bad write-chars arguments {args}")
        text = args[1]
    elif action == "write":
        if args != ["13"]:
            return _fail(f"unsupported write {args}")
        text = "\n"
    elif action == "dump-screen":
        if not args or (len(args) == 2 and args[0] != "--full") or len(args) > 2:
            return _fail(f"bad dump-screen arguments {args}")
        screen = state / f"{tab}-agent.out"
        Path(args[-1]).write_text(screen.read_text(errors="replace") if screen.exists() else "")
        return 0
    elif action == "close-tab":
        for pid in _tab_state(state, tab).get("pids", {}).values():
            try:
                os.killpg(pid, signal.SIGHUP)
            except OSError:
                pass
        return 0
    else:
        return _fail(f"unsupported action {action}")
    fd = os.open(state / f"{tab}-agent.in", os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
