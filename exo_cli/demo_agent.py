"""The built-in scripted agent (``python -m exo_cli.demo_agent [--script FILE]``), used by ``exo demo`` and tests.

It behaves like a coding agent without a model and drives exo exactly as a real agent
CLI does: at start it runs ``exo hook session-start --cli exo`` (Claude-shaped JSON on
stdin) and reads the context it gets; each turn ends with ``exo hook stop --cli exo``
(with ``last_assistant_message``), and when that hook answers with a block decision the
reason is its next user turn. Lines typed into its pane are user turns too (``prompt``
hook, an answer, ``stop`` hook). It calls exo by absolute command (``sys.executable -m
exo_cli``) and inherits the environment exo gave it (EXO_AGENT, EXO_STATE_DIR, ...).

Without a script it writes a file named after itself, commits it, notes its parent, then
idles and answers each line typed into its pane with a note. With a script (JSON: a list
of steps, or ``{"steps": [...]}``; TOML: ``[[steps]]`` tables) it performs the steps::

    {"write": {"path": "a.txt", "content": "hi"}}   {"commit": {"message": "add a"}}
    {"note": {"message": "..."}}                     {"question": {"message": "...", "timeout": 60}}
    {"send": {"to": "w2", "message": "..."}}         {"pr": {"title": "...", "body": "..."}}
    {"sleep": {"seconds": 1}}                        {"done": {"output": "..."}}
    {"turn": {"message": "..."}}  (end a turn)       {"exit": {"code": 0}}      "idle"

After the last step it ends its turn and idles (as a real agent does). Everything it does
is printed to stdout, which is what its pane shows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from exo_cli.adapters.proc import run

if TYPE_CHECKING:
    from exo_cli.adapters.proc import Completed

EXO = [sys.executable, "-m", "exo_cli"]
PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
MAX_CHAIN = 20  # block reasons handled in a row before the agent idles anyway


def say(text: str) -> None:
    sys.stdout.write(f"[demo] {text}\n")
    sys.stdout.flush()


def asked(text: str) -> bool:
    """Whether a turn's text asks the agent a question, which its reply then answers: a line typed by
    a person, or a message, that ends with a question mark.

    Anything else is only read: an instruction or a remark (the demo agent does no work it is told
    to), exo's own notices (``[PR-MERGED ...]``, ``[EVENT] ...``, answers), and a child's
    ``[QUESTION ...]`` (answered with ``exo answer``, which the demo agent never runs).
    """
    if text.startswith("[") and not text.startswith("[MESSAGE "):
        return False
    return text.rstrip().endswith("?")


class DemoAgent:
    """One scripted agent session."""

    def __init__(self, name: str, cwd: Path) -> None:
        self.name = name
        self.cwd = cwd
        self.session_id = str(uuid.uuid4())
        self.last = ""

    # -- exo ------------------------------------------------------------------------------------
    def exo(self, *args: str, check: bool = False) -> Completed:
        proc = run([*EXO, *args], cwd=self.cwd, check=False, timeout=None)
        if proc.returncode != 0:
            say(f"exo {args[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def hook(self, event: str, **fields: Any) -> dict[str, Any]:
        payload = {
            "session_id": self.session_id,
            "transcript_path": None,
            "cwd": str(self.cwd),
            "hook_event_name": event,
            **fields,
        }
        proc = run([*EXO, "hook", event, "--cli", "exo"], cwd=self.cwd, input=json.dumps(payload), check=False,
                   timeout=None)
        if proc.stderr.strip():
            say(proc.stderr.strip())
        try:
            out = json.loads(proc.stdout or "{}")
        except ValueError:
            out = {}
        return out if isinstance(out, dict) else {}

    # -- turns ----------------------------------------------------------------------------------
    def start(self) -> None:
        out = self.hook("session-start", source="startup")
        ctx = (out.get("hookSpecificOutput") or {}).get("additionalContext")
        if ctx:
            say("context:")
            for line in str(ctx).splitlines():
                sys.stdout.write(f"  {line}\n")
            sys.stdout.flush()

    def end_turn(self, message: str | None = None, *, active: bool = False) -> str | None:
        """Run the stop hook; return the block reason (the next user turn) or None."""
        if message is not None:
            self.last = message
        out = self.hook("stop", stop_hook_active=active, last_assistant_message=self.last)
        if out.get("decision") in ("block", "deny") and out.get("reason"):
            return str(out["reason"])
        say("idle")
        return None

    def user_turn(self, text: str, *, active: bool = False) -> None:
        """Handle one user turn (typed or a block reason), then any turns the stop hook chains."""
        for _ in range(MAX_CHAIN):
            say(f"got: {text}")
            out = self.hook("prompt", prompt=text)
            extra = (out.get("hookSpecificOutput") or {}).get("additionalContext")
            if extra:
                say(f"context: {extra}")
            self.note(f"{self.name} got: {text}")
            nxt = self.end_turn(f"{'Answered' if asked(text) else 'Read'}: {text}", active=active)
            if nxt is None:
                return
            text, active = nxt, True

    # -- actions --------------------------------------------------------------------------------
    def note(self, message: str) -> None:
        proc = self.exo("note", message)
        if proc.returncode == 0:
            say(f"noted: {message}")
        self.last = message

    def write(self, path: str, content: str) -> None:
        target = self.cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        say(f"wrote {path}")

    def commit(self, message: str) -> None:
        from exo_cli.adapters.git import Git

        git = Git(self.cwd)
        git.add(check=False)
        proc = git.commit(message, check=False)
        say(f"committed: {message}" if proc.returncode == 0 else f"commit failed: {proc.stderr.strip()}")

    def question(self, message: str, timeout: float | None = None) -> None:
        args = ["question", message, "--json"]
        if timeout is not None:
            args += ["--timeout", str(timeout)]
        proc = self.exo(*args)
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            result = {}
        if result.get("status") == "answered":
            say(f"answer: {result.get('answer')}")
            self.last = f"Answer: {result.get('answer')}"
        else:
            say(f"question {result.get('status', 'failed')}")

    def pr(self, title: str, body: str = "") -> None:
        proc = self.exo("pr", "file", "--title", title, "--body", body)
        if proc.returncode == 0:
            say(f"filed PR: {proc.stdout.strip()}")
        else:
            say("pr: not available (continuing)")

    def step(self, step: Any) -> str | None:
        """Perform one script step; return "idle"/"exit:<code>" to leave the script."""
        args: dict[str, Any]
        if isinstance(step, str):
            kind, args = step, {}
        elif isinstance(step, dict) and len(step) == 1:
            kind, args = next(iter(step.items()))
            args = args if isinstance(args, dict) else {"value": args}
        else:
            say(f"skipping unreadable step {step!r}")
            return None
        if kind == "write":
            self.write(str(args["path"]), str(args.get("content", "")))
        elif kind == "commit":
            self.commit(str(args.get("message", f"{self.name}: work")))
        elif kind == "note":
            self.note(str(args["message"]))
        elif kind == "send":
            to = args["to"]
            to = ",".join(to) if isinstance(to, list) else str(to)
            if self.exo("send", to, str(args["message"])).returncode == 0:
                say(f"sent to {to}")
        elif kind == "question":
            timeout = args.get("timeout")
            self.question(str(args["message"]), float(timeout) if timeout is not None else None)
        elif kind == "pr":
            self.pr(str(args.get("title", f"{self.name}: work")), str(args.get("body", "")))
        elif kind == "sleep":
            time.sleep(float(args.get("seconds", args.get("value", 1))))
        elif kind == "done":
            out = args.get("output")
            self.exo("done", *(["--output", str(out)] if out is not None else []))
            say("done")
        elif kind == "turn":
            reason = self.end_turn(str(args.get("message", self.last)))
            if reason is not None:
                self.user_turn(reason, active=True)
        elif kind == "idle":
            return "idle"
        elif kind == "exit":
            return f"exit:{int(args.get('code', args.get('value', 0)))}"
        else:
            say(f"unknown step {kind!r}")
        return None

    def default(self) -> None:
        fname = f"{self.name}.txt"
        self.write(fname, f"Hello from {self.name}.\n")
        self.commit(f"{self.name}: add {fname}")
        self.note(f"{self.name}: wrote and committed {fname}")

    # -- idle -----------------------------------------------------------------------------------
    def idle(self) -> None:
        """Answer every line typed into the pane (bracketed pastes arrive whole); idle forever at EOF."""
        say("waiting for input")
        while True:
            text = read_input(sys.stdin)
            if text is None:
                while True:  # no input any more (headless): stay idle until stopped
                    time.sleep(3600)
            if text.strip():
                self.user_turn(text)


def read_input(stream: TextIO) -> str | None:
    """One user turn: a line, or a whole bracketed paste (its newlines kept); None at EOF."""
    line = stream.readline()
    if not line:
        return None
    if PASTE_START not in line:
        return line.rstrip("\r\n")
    before, _, rest = line.partition(PASTE_START)
    buf = rest
    while PASTE_END not in buf:
        more = stream.readline()
        if not more:
            break
        buf += more
    body, _, after = buf.partition(PASTE_END)
    return before + body + after.rstrip("\r\n")


def load_script(path: Path) -> list[Any]:
    """Steps from a JSON file (a list, or {"steps": [...]}) or a TOML file ([[steps]])."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib

        data: Any = tomllib.loads(text)
    else:
        data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("steps", [])
    if not isinstance(data, list):
        raise SystemExit(f"demo agent: {path}: expected a list of steps")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exo-demo-agent", description="exo's built-in scripted agent.")
    parser.add_argument("--script", type=Path, help="JSON or TOML file of steps")
    parser.add_argument("--name", help="name to use (default: $EXO_AGENT_NAME, $EXO_AGENT, or 'demo')")
    parser.add_argument("prompt", nargs="*", help="the first prompt (printed; the script decides what to do)")
    args = parser.parse_args(argv)
    name = args.name or os.environ.get("EXO_AGENT_NAME") or os.environ.get("EXO_AGENT") or "demo"
    agent = DemoAgent(name, Path.cwd())
    if sys.stdin is not None and sys.stdin.isatty():
        # Ask for bracketed paste before anything can be typed: multi-line messages arrive whole.
        sys.stdout.write("\x1b[?2004h")
        sys.stdout.flush()
    say(f"{name} starting in {agent.cwd}")
    if args.prompt:
        say(f"prompt: {' '.join(args.prompt)}")
    agent.start()
    outcome: str | None = None
    if args.script:
        for step in load_script(args.script):
            outcome = agent.step(step)
            if outcome is not None:
                break
    else:
        agent.default()
    if outcome and outcome.startswith("exit:"):
        code = int(outcome[5:])
        if code == 0:
            agent.hook("session-end", reason="other")
        say(f"exiting with {code}")
        return code
    reason = agent.end_turn(agent.last or "Finished.")
    if reason is not None:
        agent.user_turn(reason, active=True)
    agent.idle()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
