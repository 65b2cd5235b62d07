"""The end of an agent's turn on the hooks' hot path: its checkpoint, now or once the hook has answered.

The stop hook runs after every turn of every agent, so this module imports only the stdlib and
light exo modules; the checkpoint itself (``ops/checkpoints.py``) loads only when one is taken
here and now. Which process runs a step is the caller's business: a hook process, or one that
lives on (the broker); ``after_exit`` is the detached helper for the former.

- ``mark_due``: the checkpoint of a finished turn is due: a small file in the agent's checkpoint
  folder, and ``due_command`` takes it in the background. (When the hook keeps the agent going,
  with a pending message, the hook takes it before it answers: ``checkpoints.take_quietly``.)
- ``is_due``: whether one is still due. The prompt and session-start hooks take it
  (``checkpoints.take_due``) before a new turn can change a file, and so does exo before it types
  into a resting agent, so the background one is never late: a checkpoint holds its turn's end.
- ``after_exit``: exo operations run one after the other in the background, once the hook's process
  has exited (the hook's answer never waits for them, and they never compete with it for the CPU):
  in the broker, on its own worker thread (``Env.defer``: no new process, no second discovery of
  the repository); elsewhere as exo commands of a detached helper.
"""

from __future__ import annotations

import json
import os

from exo_cli.lite import NamedTuple
from exo_cli.records import DONE, ROOT, Agent, checkpoint_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from exo_cli.env import Env

FOLDER = "checkpoints"  # under the state folder: one folder per agent's key
DUE = "due"
OFF = ".off"  # checkpoints.enabled was false, with the configuration files as they were then

# Leave the agent's worktree at once for / (a process working inside a worktree would hold up
# `exo complete`), wait for the hook process ($1) to exit (5 s at most), then run each command:
# "N word1 .. wordN" after another (a POSIX shell loop costs about a millisecond).
_AFTER_EXIT = ('cd / || exit 1; i=0; while kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.05; '
               'i=$((i+1)); done; shift; while [ "$#" -gt 0 ]; do n=$1; shift; '
               '( k=0; for a do if [ "$k" -lt "$n" ]; then set -- "$@" "$a"; fi; k=$((k+1)); done; shift "$k"; '
               'exec "$@" ); shift "$n"; done')


class Later(NamedTuple):
    """An operation for ``after_exit``: ``op`` with ``args`` as the caller (``registry.invoke``), or the same as
    the exo command ``words`` (the arguments after ``exo``) of a detached helper."""

    op: str
    args: dict[str, Any]
    words: list[str]


def after_exit(env: Env, jobs: Sequence[Later]) -> bool:
    """Run ``jobs`` in the background, in order, once the caller's process has exited (``env.pid``: this process,
    or in the broker the agent's relay that sent the hook); whether they were handed over.

    A long-lived process (the broker) takes them itself (``env.defer``); otherwise a detached
    shell waits for ``env.pid`` and runs their commands.
    """
    if not jobs:
        return False
    if env.defer is not None:
        return bool(env.defer(env, list(jobs)))
    from exo_cli.adapters.proc import spawn_detached
    from exo_cli.selfcmd import exo_command

    exo = exo_command()
    argv = ["/bin/sh", "-c", _AFTER_EXIT, "sh", str(env.pid)]
    for job in jobs:
        argv += [str(len(exo) + len(job.words)), *exo, *job.words]
    return spawn_detached(argv, env.environ) is not None


def folder(env: Env, agent: Agent) -> str:
    """The agent's checkpoint folder in exo's state (its shadow index, records, the copies of ignored files)."""
    return os.path.join(str(env.state_dir), FOLDER, checkpoint_key(agent))


def eligible(agent: Agent) -> bool:
    """Whether the agent's checkout is one exo checkpoints: a worktree exo made for it (never the human's checkout)."""
    return bool(agent.worktree) and agent.spec.get("worktree_created") is True and agent.status != DONE \
        and agent.id != ROOT and not agent.retired


def _config_stamp(env: Env, agent: Agent) -> dict[str, int | None]:
    """Each configuration file's modification time (None: absent), read without loading the configuration."""
    from pathlib import Path

    from exo_cli.config_paths import config_files

    out: dict[str, int | None] = {}
    for path in config_files(env.environ, Path(agent.repo) if agent.repo else None):
        try:
            out[str(path)] = os.stat(path).st_mtime_ns
        except OSError:
            out[str(path)] = None
    return out


def remember_off(env: Env, agent: Agent, *, off: bool) -> None:
    """Record that ``checkpoints.enabled`` is false with the configuration files as they are now (or forget it)."""
    path = os.path.join(str(env.state_dir), FOLDER, OFF)
    try:
        if off:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(_config_stamp(env, agent)))
        elif os.path.exists(path):
            os.unlink(path)
    except OSError:
        pass


def switched_off(env: Env, agent: Agent) -> bool:
    """Whether checkpoints were found disabled and no configuration file changed since (a few ``stat`` calls)."""
    try:
        with open(os.path.join(str(env.state_dir), FOLDER, OFF), encoding="utf-8") as fh:
            recorded = json.load(fh)
    except (OSError, ValueError):
        return False
    return bool(recorded == _config_stamp(env, agent))


def mark_due(env: Env, agent: Agent, *, turn: int) -> bool:
    """Mark the checkpoint of turn ``turn`` due (a small file in the agent's checkpoint folder); whether it was.

    The background helper (``due_command``) takes it; so does whoever comes first of the next
    turn's hooks or exo typing into the agent (``checkpoints.take_due``). Never raises.
    """
    if not eligible(agent) or switched_off(env, agent):
        return False
    try:
        path = folder(env, agent)
        os.makedirs(path, mode=0o700, exist_ok=True)
        tmp = os.path.join(path, f".{DUE}.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"turn": turn}))
        os.replace(tmp, os.path.join(path, DUE))
    except OSError:
        return False
    return True


def due_command(agent: Agent) -> Later:
    """The background job that takes a due checkpoint (``exo checkpoint AGENT --due``)."""
    return Later("checkpoint", {"agent": agent.id, "due": True},
                 ["-C", agent.repo or agent.worktree or "/", "checkpoint", agent.id, "--due"])


def is_due(env: Env, agent: Agent) -> bool:
    """Whether the agent's turn checkpoint is still due (one ``stat``)."""
    return eligible(agent) and os.path.exists(os.path.join(folder(env, agent), DUE))
