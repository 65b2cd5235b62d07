"""Run one headless agent and hand it its messages (run as a script, stdlib only).

Usage: ``python -I -S _runner.py`` with the run request as JSON on stdin (read, then stdin is
/dev/null). The runner is the agent's process-group leader and lives as long as the agent: it
holds the agent's environment in memory (it came through the pipe, never a file or a command
line) so later turns get exactly the same environment. Its stdout is the agent's log.

The request (``Headless.start`` writes it)::

    {"argv": [...], "env": {...}, "cwd": "...", "dir": "<records folder>", "name": "<agent>",
     "mode": "resume" | "stdin" | "none",
     "resume": ["...", "{session}", "...", "{message}"],   # mode resume: the next turn's argv
     "session": "<id>" | null,                              # known session id (pre-assigned)
     "session_from": "codex-json" | null,                   # where to read it otherwise
     "wait_first": false}                                   # no first prompt: argv waits for one

- ``resume``: a CLI in print mode (Claude ``-p``, Codex ``exec``, Gemini ``-p``). Each turn is
  one process; between turns the runner waits for a message and runs ``resume`` with
  ``{session}`` and ``{message}`` filled in (in one pass, so a message is never expanded), from
  the same folder. With ``wait_first``, the first message fills ``{message}`` of ``argv``.
- ``stdin``: a long-running command (a custom agent, the demo agent): each message is written
  to its stdin followed by a newline; the runner exits with the command's exit status.
- ``none``: the command gets /dev/null; messages are refused (nothing reads them).

Messages arrive as files ``<dir>/<name>.inbox/<seq>.msg`` (written atomically by exo), each
followed by one byte on the wake-up FIFO ``<dir>/<name>.wake``. The runner keeps its state in
``<dir>/<name>.state`` (JSON, replaced atomically): ``{"state": "running"|"waiting"|"exited",
"turns": n, "rc": <last exit status>, "session": id, "pid": its own, "program": the command's
name}``; exo reads the exit status of a headless agent from it, since the agent is not exo's child
any more, and ``exo doctor`` which agent CLI it runs when its record is lost.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys

# Importing typing would cost the runner start-up time; type checkers still see it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

POLL = 5.0  # seconds between inbox checks when no wake-up byte arrives (a missed write)
PLACEHOLDER = re.compile(r"\{session\}|\{message\}")


class Runner:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.dir = spec["dir"]
        self.name = spec["name"]
        self.mode = spec.get("mode") or "none"
        self.session = spec.get("session")
        self.inbox = os.path.join(self.dir, f"{self.name}.inbox")
        self.state_path = os.path.join(self.dir, f"{self.name}.state")
        self.turns = 0
        self.rc: int | None = None
        wake = os.path.join(self.dir, f"{self.name}.wake")
        # O_RDWR: the FIFO always has a writer (us), so reads block instead of returning EOF.
        self.wake = os.open(wake, os.O_RDWR | os.O_NONBLOCK)

    # ------------------------------------------------------------------ state and inbox

    def write_state(self, state: str) -> None:
        data = {"state": state, "mode": self.mode, "turns": self.turns, "rc": self.rc, "session": self.session,
                "pid": os.getpid(), "program": os.path.basename(str((self.spec.get("argv") or [""])[0]))}
        tmp = f"{self.state_path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data))
        os.replace(tmp, self.state_path)

    def take_messages(self) -> list[str]:
        """The messages waiting in the inbox, oldest first (each file removed once read)."""
        try:
            names = sorted(n for n in os.listdir(self.inbox) if n.endswith(".msg"))
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            path = os.path.join(self.inbox, n)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    out.append(fh.read())
                os.unlink(path)
            except FileNotFoundError:
                continue
        return out

    def wait_wake(self, timeout: float) -> None:
        ready, _, _ = select.select([self.wake], [], [], timeout)
        if ready:
            try:
                while os.read(self.wake, 4096):
                    pass
            except BlockingIOError:
                pass

    # ------------------------------------------------------------------ turns

    def run_turn(self, argv: list[str]) -> int:
        """Run one turn (stdin /dev/null), its output into ours; learn the session id when asked."""
        self.turns += 1
        self.write_state("running")
        proc = subprocess.Popen(argv, cwd=self.spec["cwd"], env=self.spec["env"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        want = self.spec.get("session_from") if not self.session else None
        for raw in proc.stdout:
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
            if want == "codex-json" and not self.session and raw.startswith(b"{"):
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(event, dict) and event.get("type") == "thread.started":
                    self.session = str(event.get("thread_id") or "") or None
        self.rc = proc.wait()
        return self.rc

    def fill(self, template: list[str], message: str) -> list[str]:
        values = {"{session}": self.session or "", "{message}": message}
        return [PLACEHOLDER.sub(lambda m: values[m.group(0)], a) for a in template]

    def resume_argv(self, message: str) -> list[str] | None:
        if self.turns == 0:
            return self.fill(list(self.spec["argv"]), message)
        if not self.session:
            return None
        return self.fill(list(self.spec["resume"]), message)

    def serve_turns(self) -> int:
        if not self.spec.get("wait_first"):
            self.run_turn(list(self.spec["argv"]))
        while True:
            self.write_state("waiting")
            messages = self.take_messages()
            if not messages:
                self.wait_wake(POLL)
                continue
            for message in messages:
                argv = self.resume_argv(message)
                if argv is None:
                    sys.stdout.write("exo runner: no session id to continue; message dropped\n")
                    sys.stdout.flush()
                    continue
                self.run_turn(argv)

    def serve_stdin(self) -> int:
        self.turns = 1
        self.write_state("running")
        feed = self.mode == "stdin"
        proc = subprocess.Popen(list(self.spec["argv"]), cwd=self.spec["cwd"], env=self.spec["env"],
                                stdin=subprocess.PIPE if feed else subprocess.DEVNULL)
        while proc.poll() is None:
            self.wait_wake(0.5)
            if not feed:
                continue
            for message in self.take_messages():
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(message.encode("utf-8", "surrogateescape") + b"\n")
                    proc.stdin.flush()
                except (BrokenPipeError, OSError):
                    feed = False
        self.rc = proc.returncode
        self.write_state("exited")
        return self.rc if self.rc >= 0 else 128 - self.rc


def main() -> int:
    try:
        spec = json.loads(sys.stdin.buffer.read())
    except ValueError as exc:
        sys.stderr.write(f"exo runner: bad request: {exc}\n")
        return 126
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        runner = Runner(spec)
    except OSError as exc:
        sys.stderr.write(f"exo runner: {exc}\n")
        return 126
    try:
        if runner.mode == "resume":
            return runner.serve_turns()
        return runner.serve_stdin()
    except FileNotFoundError as exc:
        sys.stdout.write(f"exo runner: cannot start {spec['argv'][0]}: {exc}\n")
        runner.rc = 127
        runner.write_state("exited")
        return 127


if __name__ == "__main__":
    sys.exit(main())
