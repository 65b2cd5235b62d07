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

With ``"keeper": {"life": path, "ctl": path, "argv": [...], "env": {...}}`` (an agent with a socket to
the team broker), a thread of the runner starts the broker again when it dies: it blocks on a shared
``flock`` of the broker's life lock (held exclusively by the running broker, dropped by the kernel
when it ends, ``kill -9`` too), and once it gets it and nobody answers on the control socket it runs
``argv`` (``exo broker start``) with ``env`` (the human's, without exo's markers). The runner lives
outside the agent's sandbox, so sandboxed agents recover with no human command. No polling while the
broker lives; a herd of runners is spread by a short wait derived from the pid, one of them at a
time starts it (the keepers' lock ``keep`` beside the life lock: the others wait for it rather than
each start an exo), and whoever comes later finds the new broker holding the lock. A pane agent's
keeper is this same code (``--keep``, see ``keep``).

Messages arrive as files ``<dir>/<name>.inbox/<seq>.msg`` (written atomically by exo), each
followed by one byte on the wake-up FIFO ``<dir>/<name>.wake``. The runner keeps its state in
``<dir>/<name>.state`` (JSON, replaced atomically): ``{"state": "running"|"waiting"|"exited",
"turns": n, "rc": <last exit status>, "session": id, "pid": its own, "program": the command's
name}``; exo reads the exit status of a headless agent from it, since the agent is not exo's child
any more, and ``exo doctor`` which agent CLI it runs when its record is lost.
"""

from __future__ import annotations

import fcntl
import os
import select
import sys
import time

# json, re and subprocess are imported where they are used: a pane agent's keeper (``--keep``) needs
# none of them while the broker lives, and each costs resident memory in every keeper (30 agents).

# Importing typing would cost the runner start-up time; type checkers still see it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

POLL = 5.0  # seconds between inbox checks when no wake-up byte arrives (a missed write)
KEEP_BACKOFF = 30.0  # at most this long between checks when the lock is free and a broker answers (an old exo's)
KEEP_TIMEOUT = 120.0  # seconds `exo broker start` may take
PLACEHOLDER = r"\{session\}|\{message\}"
KEEP_MAGIC = b"EXOK1"


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
        import json

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
        import json
        import subprocess

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
        import re

        values = {"{session}": self.session or "", "{message}": message}
        return [re.sub(PLACEHOLDER, lambda m: values[m.group(0)], a) for a in template]

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
        import subprocess

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


class Keeper:
    """Start the team broker again whenever it dies (see the module: blocks on the broker's life lock)."""

    def __init__(self, spec: dict[str, Any], *, who: str = "exo runner") -> None:
        self.life = str(spec["life"])
        self.ctl = str(spec["ctl"])
        self.argv = [str(a) for a in spec["argv"]]
        self.env = {str(k): str(v) for k, v in dict(spec["env"]).items()}
        self.who = who
        self.restarts = 0

    def start(self) -> None:
        import _thread  # not threading: a megabyte less in every keeper; like a daemon thread, never waited for

        _thread.start_new_thread(self.run, ())

    def say(self, text: str) -> None:
        try:
            sys.stdout.write(f"{self.who}: {text}\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass  # a log nobody can write to never stops the keeper

    def _lock(self, flags: int) -> bool:
        """Take and drop a shared lock on the life file with ``flags``; False when a broker holds it."""
        fd = os.open(self.life, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | flags)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # closing drops our lock too
        return True

    def answers(self) -> bool:
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5.0)
        try:
            s.connect(self.ctl)
        except OSError:
            return False
        finally:
            s.close()
        return True

    def run(self) -> None:
        """The headless runner's thread: wait while a broker lives, then one ``round``; again and again."""
        while True:
            try:
                self._lock(0)  # blocks while a broker lives
            except OSError:  # the runtime folder is gone (the team was removed): nothing to keep
                return
            if not self.round():
                return

    def round(self) -> bool:
        """The broker's life lock was found free: start it again unless another does; False when there is
        nothing left to keep (the runtime folder is gone).

        Another broker that answers without holding the lock (another exo version's) is looked at
        again after a pause. A herd is spread by a wait derived from the pid, and one keeper at a time
        starts it (the keepers' lock ``keep``, which also records how many quick restarts came one
        after another: a broker dying again within two minutes of its start waits 1, 2, 4... up to
        30 seconds before the next one, team-wide).
        """
        try:
            if self.answers():
                time.sleep(KEEP_BACKOFF / 6)
                return True
            time.sleep((os.getpid() % 16) / 8)  # spread a herd of keepers; the first one starts it
            if not self._lock(fcntl.LOCK_NB) or self.answers():
                return True
            claim = self._claim()
        except OSError:
            return False
        if claim is None:  # another keeper is starting it: wait for that one rather than start an exo too
            time.sleep(0.25)
            return True
        try:
            quick = self._quick_restarts(claim)
            if quick:
                time.sleep(min(2.0 ** (quick - 1), KEEP_BACKOFF))
            if self._lock(fcntl.LOCK_NB) and not self.answers():  # nobody started it while we waited
                self.restarts += 1
                os.ftruncate(claim, 0)
                os.pwrite(claim, f"{quick + 1}".encode(), 0)  # its mtime: when the broker was last started
                self.start_broker()
        except OSError:
            return False
        finally:
            os.close(claim)
        return True

    def _quick_restarts(self, claim: int) -> int:
        """How many starts came one within two minutes of the other, the last one included (0: none lately)."""
        st = os.fstat(claim)
        if time.time() - st.st_mtime > KEEP_BACKOFF * 4:
            return 0
        try:
            return int(os.pread(claim, 16, 0).decode("ascii", "replace").strip() or 0)
        except ValueError:
            return 0

    def _claim(self) -> int | None:
        """The keepers' own lock (``keep`` beside the life lock), held while one of them starts the broker."""
        fd = os.open(os.path.join(os.path.dirname(self.life), "keep"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def start_broker(self) -> None:
        self.say("exo's broker is gone; starting it again")
        import subprocess

        try:
            done = subprocess.run(self.argv, env=self.env, cwd="/", stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=KEEP_TIMEOUT)
            rc, why = done.returncode, done.stderr.decode("utf-8", "replace").strip()[-500:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            rc, why = -1, str(exc)
        if rc != 0:
            self.say(f"cannot start exo's broker: {why}")


def encode_keeper(spec: dict[str, Any]) -> str:
    """``spec`` (life, ctl, argv, env, log) as one line of hex digits for ``--keep``'s stdin.

    Hex of NUL-separated fields: it passes through a shell here-document unchanged (no quote, no
    newline, no delimiter line), and decoding it needs no ``json`` (a megabyte less in every keeper).
    """
    argv = [str(a) for a in spec["argv"]]
    env = {str(k): str(v) for k, v in dict(spec["env"]).items()}
    fields = [KEEP_MAGIC.decode(), str(spec["life"]), str(spec["ctl"]), str(spec.get("log") or ""), str(len(argv)),
              *argv]
    for k, v in env.items():
        fields += [k, v]
    if any("\0" in f for f in fields):
        raise ValueError("a NUL byte in the keeper's request")
    return "\0".join(fields).encode("utf-8", "surrogateescape").hex()


def decode_keeper(line: bytes) -> dict[str, Any]:
    """The spec ``encode_keeper`` encoded (ValueError when it is not one)."""
    fields = [f.decode("utf-8", "surrogateescape") for f in bytes.fromhex(line.strip().decode("ascii")).split(b"\0")]
    if len(fields) < 5 or fields[0] != KEEP_MAGIC.decode():
        raise ValueError("not an exo keeper request")
    n = int(fields[4])
    argv, flat = fields[5:5 + n], fields[5 + n:]
    if len(argv) != n or not argv or len(flat) % 2:
        raise ValueError("truncated exo keeper request")
    return {"life": fields[1], "ctl": fields[2], "log": fields[3], "argv": argv,
            "env": dict(zip(flat[0::2], flat[1::2], strict=True))}


# The waiting half of a pane agent's keeper where util-linux is installed: a shell (about 2 MiB) and, while
# the broker lives, one ``flock -s`` on its life lock (about 2 MiB), instead of a Python interpreter (about
# 10 MiB) the whole time; each time the lock drops, one ``--keep-round`` (``Keeper.round``) runs. Both die
# with the pane's process (``setpriv --pdeathsig``), and the shell ends at once when that was gone before
# it could ask. $1 the pane's pid, $2 the life lock, $3 python, $4 this file, $5 setpriv, $6 flock.
KEEP_SH = """[ "$PPID" = "$1" ] || exit 0
IFS= read -r spec || exit 0
exec </dev/null
while :; do
  exec 9<>"$2" || exit 0
  "$5" --pdeathsig KILL "$6" -s 9 || exit 0
  exec 9<&-
  printf '%s\\n' "$spec" | "$3" -I -S "$4" --keep-round
  [ "$?" -ne 3 ] || exit 0
done
"""
WAITER_TOOLS = {"sh": ("/bin/dash", "/usr/bin/dash"), "setpriv": ("/usr/bin/setpriv", "/bin/setpriv"),
                "flock": ("/usr/bin/flock", "/bin/flock")}
WAITER_LINE = 60000  # a longer request (a huge environment) would not fit the pipe at once: the Python keeper waits


def waiter_argv(pid: int, life: str) -> list[str] | None:
    """The shell waiter's command (``KEEP_SH``), or None where dash, setpriv or flock is missing (macOS)."""
    found = {}
    for name, places in WAITER_TOOLS.items():
        path = next((p for p in places if os.access(p, os.X_OK)), None)
        if path is None:
            return None
        found[name] = path
    return [found["setpriv"], "--pdeathsig", "KILL", found["sh"], "-c", KEEP_SH, "exo-keeper", str(pid), life,
            sys.executable, os.path.abspath(__file__), found["setpriv"], found["flock"]]


def _parent_watch(pid: int) -> int | None:
    """A pidfd of our parent ``pid`` (-1 when it is gone already, None when this system has no pidfd)."""
    if os.getppid() != pid:
        return -1
    try:
        fd: int = os.pidfd_open(pid)  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return None
    if os.getppid() != pid:  # it ended (and the number may be another's now) before we held it
        os.close(fd)
        return -1
    return fd


def keep(args: list[str]) -> int:
    """``_runner.py --keep PID``: keep the team's broker alive as long as our parent ``PID`` runs.

    For an agent in a tmux or Zellij pane whose launcher ``exec``s it into its sandbox: the launcher
    starts this first, as its child (``PID`` is the pane's process: the launcher, then the agent's
    ``bwrap``), with ``encode_keeper``'s line on stdin. It leaves the pane's session and terminal
    (``setsid``: no Ctrl-C, hang-up or signal to the agent's process group reaches it, and inside
    its sandbox the agent sees no process outside), works from ``/``, writes to the keeper's log,
    runs the ``Keeper`` thread and ends once ``PID`` has ended (a pidfd, no polling where the
    kernel has them; elsewhere a look at our parent every two seconds).
    """
    try:
        pid = int(args[0])
        line = sys.stdin.buffer.readline()
        spec = decode_keeper(line)
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        sys.stderr.write(f"exo keeper: bad request: {exc}\n")
        return 126
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    out = devnull
    if spec["log"]:
        try:
            out = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            out = devnull
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, 1 << 16)  # nothing of the pane's (a pipe's write end held open by us, ...)
    while True:  # a shell's here-document writer (dash forks one for a long document) is our child: reap it
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    watch = _parent_watch(pid)
    if watch == -1:
        return 0
    waiter = waiter_argv(pid, spec["life"])
    if waiter is not None and len(line) < WAITER_LINE:  # wait in a shell: this interpreter's memory goes
        r, w = os.pipe()
        os.write(w, line.strip() + b"\n")
        os.close(w)
        os.dup2(r, 0)
        os.close(r)
        if watch is not None:
            os.close(watch)
        try:
            os.execv(waiter[0], waiter)
        except OSError:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            watch = _parent_watch(pid)  # as if it had not been tried
            if watch == -1:
                return 0
    Keeper(spec, who="exo keeper").start()
    if watch is not None:
        select.select([watch], [], [])  # readable once the process has ended
    else:
        while os.getppid() == pid:
            time.sleep(2.0)
    os._exit(0)  # at once: no interpreter shutdown waiting on the keeper's thread (it may be starting a broker)


def keep_round() -> int:
    """``_runner.py --keep-round``: one ``Keeper.round`` for the shell waiter (``KEEP_SH``), its request on stdin;
    exit status 3 when there is nothing left to keep."""
    try:
        spec = decode_keeper(sys.stdin.buffer.readline())
    except (ValueError, UnicodeDecodeError) as exc:
        sys.stderr.write(f"exo keeper: bad request: {exc}\n")
        return 3
    return 0 if Keeper(spec, who="exo keeper").round() else 3


def main() -> int:
    if sys.argv[1:2] == ["--keep"]:
        return keep(sys.argv[2:])
    if sys.argv[1:2] == ["--keep-round"]:
        return keep_round()
    import json

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
    if isinstance(spec.get("keeper"), dict):
        Keeper(spec["keeper"]).start()
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
