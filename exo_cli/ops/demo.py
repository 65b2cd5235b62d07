"""``exo demo``: the whole lifecycle on a scratch repository with the built-in scripted agent.

It needs no model and no agent CLI: it creates a scratch git repository (a temp folder, or
``--dir``) holding a tiny Python project and four beads (one blocked by another), runs
``init``, spawns one demo agent per ready bead (tmux when installed, else headless), and
then drives the team exactly as a human lead would, through the registry: it waits on its
own inbox with the fan-in ``wait`` operation, answers the question one agent asks, merges
each pull request as it is filed (squash; siblings are told), completes each task (bead
closed, worktree and branch removed) and spawns the bead that becomes ready when its
blocker closes. Everything runs in-process as the human at the root of the scratch repo's
own, fresh state: nothing of the caller's repository, tmux server, configuration or HOME is
read or written (the caller's exo/tmux/git identity variables are dropped, the user config
is ignored and worktrees are pinned inside the scratch repo).

Progress goes to an observer the command puts on the Env (``env.demo_observer``, with
``board(agents, elapsed)`` and ``event(text)``); the operation itself never prints. A
global timeout, Ctrl-C or SIGTERM stop every demo agent and the scratch tmux server before
the error (or the interrupt) goes up.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from exo_cli import records
from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import EnvironmentError_, ExoError, InvalidInput, StateError
from exo_cli.ops.demo_project import BEADS, Bead, agent_script, clean_environ, scratch_dir, setup
from exo_cli.registry import op
from exo_cli.validate import check_timeout

if TYPE_CHECKING:
    from exo_cli.env import Env

# The demo runs in a scratch tmux server or headless, never in Zellij (that needs the user's own session).
MUXES = tuple(m for m in records.MUXES if m != "zellij")
DEFAULT_TIMEOUT = 120.0
BOARD_EVERY = 0.25  # the status board refreshes about 4 times a second
WAIT_SLICE = 0.25  # each turn of the loop waits this long on exo's own fan-in wait


# ------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class DemoAgent:
    """One demo agent: its bead, branch, PR and how it ended."""

    id: str
    bead: str
    branch: str | None
    pr: int | None
    status: str
    completed: bool
    waited_for: str | None  # the bead that blocked this one, when it had to wait
    sandboxed: bool = False  # it ran in bubblewrap, in its own clone (where bubblewrap works)


@dataclass(frozen=True)
class DemoNote:
    agent: str
    message: str


@dataclass(frozen=True)
class DemoQuestion:
    agent: str
    question: str
    answer: str


@dataclass(frozen=True)
class DemoPr:
    """A merged pull request and the commit it became on main."""

    number: int
    agent: str
    head: str
    base: str
    title: str
    strategy: str
    merge_commit: str
    notified: list[str]


@dataclass(frozen=True)
class DemoResult:
    """What the demo did, and where its scratch repository is."""

    agents: list[DemoAgent]
    notes: list[DemoNote]
    questions: list[DemoQuestion]
    prs: list[DemoPr]
    beads_closed: list[str]
    repo: str
    kept: bool
    seconds: float
    mux: str
    log: list[str] = field(default_factory=list)  # `git log --oneline main` at the end
    events: list[str] = field(default_factory=list)  # the timeline, as the progress lines showed it


class Observer(Protocol):
    """What the command shows while the demo runs (set as ``env.demo_observer``)."""

    def board(self, agents: Any, elapsed: float) -> None: ...

    def event(self, text: str) -> None: ...


class _Quiet:
    def board(self, agents: Any, elapsed: float) -> None:
        pass

    def event(self, text: str) -> None:
        pass


# ------------------------------------------------------------------------------------ the run


class _Run:
    """The lead's side of the demo: spawn, answer, merge, complete, spawn what became ready."""

    def __init__(self, env: Env, kind: str, observer: Observer, started: float) -> None:
        self.env = env
        self.kind = kind
        self.observer = observer
        self.started = started
        self.agents: dict[str, dict[str, Any]] = {}  # agent id -> {bead, branch, pr, completed, waited_for}
        self.by_bead: dict[str, str] = {}
        self.notes: list[DemoNote] = []
        self.questions: list[DemoQuestion] = []
        self.prs: list[DemoPr] = []
        self.closed: list[str] = []
        self.events: list[str] = []
        self.finished: set[str] = set()
        self.merge_due = 0.0  # monotonic time of the next merge attempt (0: none pending)
        self.merge_tries = 0
        self.complete_tries: dict[str, int] = {}

    def say(self, text: str) -> None:
        text = " ".join(text.split())
        if len(text) > 160:
            text = text[:159] + "…"
        stamp = f"{time.monotonic() - self.started:5.1f}s"
        self.events.append(f"{stamp} {text}")
        self.observer.event(text)

    # -- steps ---------------------------------------------------------------------------
    def scripts_dir(self) -> Path:
        path = self.env.state_dir / "demo"
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def spawn(self, bead: Bead) -> None:
        from exo_cli.registry import invoke

        script = self.scripts_dir() / f"{bead.id}.json"
        script.write_text(json.dumps(agent_script(bead), indent=1), encoding="utf-8")
        result = invoke("spawn", self.env, beads=[bead.id], agent="demo", mux=self.kind, demo_script=str(script))
        if result.errors:
            err = result.errors[0]
            raise StateError(f"Could not spawn a demo agent for {bead.id}: {err['message']}",
                             hint=err.get("hint"), bead=bead.id)
        a = result.agents[0]
        waited = bead.blocked_by if bead.blocked_by in self.closed else None
        self.agents[a.id] = {"bead": bead.id, "branch": a.branch, "pr": None, "completed": False,
                             "waited_for": waited, "sandboxed": a.sandboxed}
        self.by_bead[bead.id] = a.id
        where = f"tmux window {a.id}" if self.kind == "tmux" else f"pid {a.location.get('pid')}"
        self.say(f"spawned {a.id} for {bead.id} ({bead.title}) on {a.branch}, {where}")

    def spawn_ready_beads(self) -> None:
        from exo_cli.registry import invoke

        ready = {b["id"] for b in invoke("beads_ready", self.env).beads}
        for bead in BEADS:
            if bead.id in ready and bead.id not in self.by_bead:
                if bead.blocked_by:
                    self.say(f"{bead.id} is ready now that {bead.blocked_by} is closed")
                self.spawn(bead)

    def handle(self, entry: Any) -> None:
        from exo_cli.registry import invoke

        who = entry.name or entry.agent_id
        kind = entry.kind
        text = entry.message or ""
        if kind == "note":
            # A demo agent echoes each message it receives in a note ("w1 got: ..."); how many
            # depends on timing (one turn per message, or several in one), so they are shown, not counted.
            if not text.startswith(f"{who} got: "):
                self.notes.append(DemoNote(agent=entry.agent_id, message=text))
            self.say(f"note from {who}: {text}")
        elif kind == "question":
            bead = next((b for b in BEADS if b.question == text), None)
            reply = bead.answer if bead and bead.answer else "Use your best judgement."
            invoke("answer", self.env, agent=entry.agent_id, message=reply)
            self.questions.append(DemoQuestion(agent=entry.agent_id, question=text, answer=reply))
            self.say(f"question from {who}: {text}")
            self.say(f"answered {who}: {reply}")
        elif kind == "pr-filed":
            self.say(f"{who}: {text}")
            self.merge_due = self.merge_due or time.monotonic()
        elif kind == "done":
            self.finished.add(entry.agent_id)
            self.say(f"{who} is done: {text}")
        elif kind == "event" and text.startswith(f"{who} is idle"):
            self.finished.add(entry.agent_id)
            self.say(text)

    def merge_open(self) -> None:
        """Squash-merge every open PR of a demo agent; retried a few times when refused."""
        from exo_cli.registry import invoke

        if not self.merge_due or time.monotonic() < self.merge_due:
            return
        self.merge_due = 0.0
        for pr in invoke("pr_list", self.env, state="open").prs:
            if pr.author not in self.agents:
                continue
            try:
                r = invoke("pr_merge", self.env, number=pr.number, strategy="squash")
            except ExoError as exc:
                self.merge_tries += 1
                if self.merge_tries > 10:
                    raise
                self.say(f"merging PR #{pr.number} was refused ({exc.message}); trying again")
                self.merge_due = time.monotonic() + 0.5
                continue
            self.agents[pr.author]["pr"] = pr.number
            self.prs.append(DemoPr(number=pr.number, agent=pr.author, head=pr.head, base=pr.base, title=pr.title,
                                   strategy=r.strategy, merge_commit=r.merge_commit, notified=list(r.notified)))
            told = f"; told {', '.join(n for n in r.notified if n != pr.author)}" if len(r.notified) > 1 else ""
            self.say(f"merged PR #{pr.number} ({pr.head} -> {pr.base}) as {r.merge_commit[:9]}{told}")

    def complete_finished(self) -> None:
        """Complete every agent that finished and whose PR is merged; then spawn what became ready."""
        from exo_cli.records import DONE, IDLE
        from exo_cli.registry import invoke

        closed_any = False
        for agent_id, info in self.agents.items():
            if info["completed"] or info["pr"] is None:
                continue
            rec = self.env.store.agent(agent_id)
            if agent_id not in self.finished and (rec is None or rec.status not in (IDLE, DONE)):
                continue
            tries = self.complete_tries.get(agent_id, 0)
            self.complete_tries[agent_id] = tries + 1
            try:
                r = invoke("complete", self.env, target=agent_id, force=tries >= 4)
            except StateError as exc:
                if tries >= 4:
                    raise
                self.say(f"completing {agent_id} was refused ({exc.message}); trying again")
                continue
            info["completed"] = True
            if r.bead_closed and r.bead:
                self.closed.append(r.bead)
                closed_any = True
            removed = "worktree and branch removed" if r.worktree_removed and r.branch_deleted else r.removal
            self.say(f"completed {agent_id}: bead {r.bead} {'closed' if r.bead_closed else 'not closed'}, {removed}")
        if closed_any:
            self.spawn_ready_beads()

    def board(self, force: bool = False) -> None:
        from exo_cli.registry import invoke

        now = time.monotonic()
        if not force and now - getattr(self, "_board_at", 0.0) < BOARD_EVERY:
            return
        self._board_at = now
        self.observer.board(invoke("agents", self.env), now - self.started)

    def all_done(self) -> bool:
        return len(self.closed) == len(BEADS) and all(i["completed"] for i in self.agents.values())

    def loop(self, deadline: float) -> None:
        from exo_cli.registry import invoke

        self.spawn_ready_beads()
        while not self.all_done():
            self.board()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            res = invoke("wait", self.env, timeout=min(WAIT_SLICE, remaining))
            for entry in res.results:
                if entry.status == "received":
                    self.handle(entry)
            self.merge_open()
            self.complete_finished()
        self.read_the_rest()
        self.board(force=True)

    def read_the_rest(self) -> None:
        """Read the messages still waiting once every task is complete.

        An agent that ran ``exo done`` is completed as soon as its PR is merged, and another
        agent's PR can trigger that merge: on a busy machine the last agent's note (sent
        before its PR) may still be unread when the last bead closes.
        """
        from exo_cli.registry import invoke

        while True:
            received = [e for e in invoke("wait", self.env, timeout=0).results if e.status == "received"]
            if not received:
                return
            for entry in received:
                self.handle(entry)

    # -- stopping and reporting -----------------------------------------------------------
    def stop_everything(self) -> None:
        """Stop every demo agent still running and the scratch repo's tmux server."""
        from exo_cli.ops import agentctl
        from exo_cli.records import DONE, ROOT

        with contextlib.suppress(Exception):
            for a in self.env.store.agents():
                if a.id == ROOT or agentctl.location(a) is None:
                    continue
                with contextlib.suppress(ExoError, OSError):
                    agentctl.stop_agent(self.env, a, reason="demo stopped", status=a.status if a.status == DONE
                                        else "dead")
        if self.kind == "tmux":
            with contextlib.suppress(ExoError, OSError):
                agentctl.mux_for(self.env, "tmux").kill_server()

    def result(self, root: Path, kept: bool) -> DemoResult:
        agents = []
        for agent_id, info in self.agents.items():
            rec = self.env.store.agent(agent_id)
            agents.append(DemoAgent(id=agent_id, bead=info["bead"], branch=info["branch"], pr=info["pr"],
                                    status=rec.status if rec else "unknown", completed=info["completed"],
                                    waited_for=info["waited_for"], sandboxed=info["sandboxed"]))
        log: list[str] = []
        with contextlib.suppress(ExoError, OSError):
            from exo_cli.adapters.git import Git

            log = Git(root, environ=self.env.environ).log("main", "%h %s")
        return DemoResult(agents=agents, notes=list(self.notes), questions=list(self.questions), prs=list(self.prs),
                          beads_closed=list(self.closed), repo=str(root), kept=kept,
                          seconds=round(time.monotonic() - self.started, 2), mux=self.kind, log=log,
                          events=list(self.events))


def _choose_mux(env: Env, mux: str | None) -> str:
    if mux is not None and mux not in MUXES:
        raise InvalidInput(f"Invalid multiplexer {mux!r} for the demo", hint="Use tmux or headless.", field="mux")
    has_tmux = shutil.which("tmux", path=env.environ.get("PATH")) is not None
    if mux == "tmux" and not has_tmux:
        raise EnvironmentError_("tmux is not installed or not on PATH", hint="Install tmux, or use --mux headless.")
    return mux or ("tmux" if has_tmux else "headless")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Any:
    """While the demo runs, SIGTERM stops it like Ctrl-C does (agents stopped, nothing left)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@op(
    "demo",
    cli="demo",
    roles=("human",),
    help={
        "mux": "Where the demo agents run: tmux or headless (default: tmux when installed, else headless).",
        "path": "Create the scratch repository here (a new or empty folder outside any repository; "
        "default: a new temp folder).",
        "keep": "Keep the scratch repository afterwards to look at it (--no-keep removes it).",
        "timeout": "Give up (stopping every demo agent) after this many seconds.",
    },
)
def demo(env: Env, *, mux: str | None = None, path: str | None = None, keep: bool = True,
         timeout: float = DEFAULT_TIMEOUT) -> DemoResult:
    """Show the whole lifecycle on a scratch repository with the built-in demo agent.

    Creates a scratch git repository (a small Python project and four beads, one blocked by
    another), spawns a scripted demo agent per ready bead (tmux when installed, else
    headless), and leads them as the human at the root: answers the question one asks,
    squash-merges each PR as it is filed, completes each task (bead closed, worktree and
    branch removed) and then spawns the bead its blocker held back. Needs no model and no
    agent CLI, and touches none of your repositories, tmux sessions or files. Ctrl-C or
    the timeout stop every demo agent.
    """
    timeout = check_timeout(timeout, allow_zero=False) or DEFAULT_TIMEOUT
    kind = _choose_mux(env, mux)
    observer: Observer = getattr(env, "demo_observer", None) or _Quiet()
    started = time.monotonic()
    root, created = scratch_dir(env, path)
    environ = clean_environ(env.environ, root)
    run: _Run | None = None
    runtime: Path | None = None
    ok = False
    try:
        with _sigterm_as_interrupt():
            observer.event(f"scratch repository: {root}")
            senv = setup(root, environ, kind)
            runtime = senv.runtime_dir
            run = _Run(senv, kind, observer, started)
            run.say(f"created the project, {len(BEADS)} beads and exo's state; agents run {kind}")
            from exo_cli.ops.sandbox import sandbox_status

            sandbox = sandbox_status(senv)  # its exo.toml says auto: sandboxed wherever bubblewrap works
            run.say("each agent runs sandboxed (bubblewrap), in its own clone" if sandbox.available else
                    f"agents run unsandboxed: {sandbox.detail}; install bubblewrap to sandbox them")
            try:
                run.loop(started + timeout)
            except TimeoutError:
                run.say(f"timed out after {timeout:g} s: stopping every demo agent")
                run.stop_everything()
                partial = run.result(root, keep)
                raise StateError(
                    f"The demo did not finish within {timeout:g} s: {len(partial.beads_closed)} of {len(BEADS)} "
                    f"beads closed, {len(partial.prs)} PRs merged; every demo agent was stopped",
                    hint=(f"Look at the agents' logs in {senv.state_dir / 'logs'}" if keep else
                          "Run it again with --keep to look at the scratch repository and the agents' logs")
                    + ", or give it longer with --timeout.",
                    **asdict(partial),
                ) from None
            run.stop_everything()
            ok = True
            return run.result(root, keep)
    finally:
        if run is not None and not ok:
            run.stop_everything()  # Ctrl-C, SIGTERM or an error: leave nothing running
        if not keep:
            if runtime is not None:
                with contextlib.suppress(OSError):
                    remove_tree(runtime)
            if created:
                with contextlib.suppress(OSError):
                    remove_tree(root)
            else:
                for child in list(root.iterdir()) if root.is_dir() else []:
                    with contextlib.suppress(OSError):
                        remove_tree(child)


__all__ = ["BEADS", "DemoResult", "clean_environ", "demo"]
