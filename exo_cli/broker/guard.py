"""Who is calling and what it may name: the broker trusts nothing a request claims.

- **The socket names the agent** (gpg-agent's model). Its record is read again for every
  connection: role, recorded process, proof digest, folders.
- **The peer is checked**: outside a sandbox any process of the user can reach any socket, so
  the connecting process (SO_PEERCRED) must be of this uid and descend from the agent's recorded
  process (pane process, headless runner, Zellij launcher), or its hello must carry that agent's
  proof (an unsandboxed agent keeps it, for what it detached with ``setsid``). An agent that is
  still starting may connect before spawn recorded its process: the record is read again for a
  few seconds before the peer is refused.
- **The environment is the broker's to set**: the relay's variables minus those that steer exo
  or git elsewhere (state folder, store, configuration folder, worktree root, ``GIT_DIR``...);
  the identity variables come from the record.
- **Paths are the agent's own** (no confused deputy): the working folder, every path argument
  an operation declares (``Op.paths``) and the paths of a hook payload (``cwd``,
  ``transcript_path``) must lie in the agent's checkout, its private folder or the repository
  (a transcript also in the agent CLIs' own transcript folders); else InvalidInput.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli.errors import InvalidInput, StateError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from exo_cli.adapters.store.base import Store
    from exo_cli.records import Agent
    from exo_cli.registry import Op

PEER_WAIT = 10.0  # seconds a peer of an agent whose process is not recorded yet may wait for spawn to record it
# The exo variables a relay's environment may carry into the broker's call (the rest steer exo: refused).
KEEP_EXO = frozenset({"EXO_DEBUG", "EXO_MCP_WAIT", "EXO_ANTHROPIC_API_KEY", "EXO_AGENT_BACKEND",
                      "EXO_SKIP_PERMISSIONS", "EXO_MUX", "EXO_FORGE", "EXO_MAX_AGENTS", "EXO_BASE_BRANCH"})
KEEP_GIT = ("GIT_AUTHOR_", "GIT_COMMITTER_")  # git's identity; every other GIT_* points git elsewhere
DROP = frozenset({"HANGAR_ROOT", "BEADS_DIR"})  # where worktrees and beads go: the broker's to say


class Peer(NamedTuple):
    """The agent a connection speaks for, how that was proven, and its proof when the relay sent it."""

    agent: Agent
    how: str  # "ancestry" | "proof"
    proof: str | None
    pid: int  # the connecting process (SO_PEERCRED): the Env's pid, as if the call ran there


def identify(store: Store, agent_id: str, *, pid: int, uid: int, proof: str | None,
             wait: float = PEER_WAIT) -> Peer:
    """The agent of socket ``agent_id`` when the peer is its own (see the module); StateError otherwise."""
    from exo_cli.env import PROOF_FIELD, proof_matches

    if uid != os.getuid():
        raise StateError(f"A process of another user (uid {uid}) reached {agent_id}'s socket", agent=agent_id)
    deadline = time.monotonic() + wait
    while True:
        agent = store.agent(agent_id)
        if agent is None:
            raise StateError(f"Agent {agent_id} is no longer recorded", agent=agent_id)
        digest = agent.spec.get(PROOF_FIELD)
        if proof and isinstance(digest, str) and proof_matches(proof, digest):
            return Peer(agent, "proof", proof, pid)
        if pid > 1 and descends(pid, agent):
            return Peer(agent, "ancestry", None, pid)
        if agent.location or time.monotonic() > deadline:
            raise StateError(
                f"The process on {agent_id}'s socket (pid {pid}) is not {agent_id} nor one of its processes",
                hint="Each agent reaches exo through its own socket only; run exo from the agent's own session.",
                agent=agent_id, pid=pid)
        time.sleep(0.1)  # being spawned: its process is recorded as soon as it started


def descends(pid: int, agent: Agent) -> bool:
    """Whether process ``pid`` is the agent's recorded process or one of its descendants (start time checked)."""
    from exo_cli.adapters.proc import ancestors, proc_start_time

    loc = agent.location or {}
    lead = loc.get("pid")
    targets = {p for p in (lead, loc.get("pgid")) if isinstance(p, int) and not isinstance(p, bool) and p > 1}
    if not targets:
        return False
    for p in ancestors(pid):
        if p in targets:
            start = loc.get("start_time")
            if p == lead and isinstance(start, int) and proc_start_time(p) not in (None, start):
                return False  # the recorded process is gone and its pid was reused
            return True
    return False


# --------------------------------------------------------------------------- paths


_RESOLVED: dict[str, str] = {}


def _resolved(folder: str) -> str:
    """``os.path.realpath(folder)`` for a folder of a record (resolved once: a record's folders never move)."""
    found = _RESOLVED.get(folder)
    if found is None:
        if len(_RESOLVED) > 4096:
            _RESOLVED.clear()
        found = _RESOLVED[folder] = os.path.realpath(folder)
    return found


def roots(agent: Agent, repo_root: Path) -> list[str]:
    """The folders an agent may name: its checkout, its private folder, the repository (resolved)."""
    folders = (agent.worktree, agent.spec.get("agent_dir"), str(repo_root))
    return [_resolved(f) for f in folders if isinstance(f, str) and f]


def inside(path: str, allowed: list[str]) -> bool:
    """Whether ``path`` (symbolic links resolved) lies in one of the resolved folders ``allowed``."""
    return _within(os.path.realpath(path), allowed)


def _within(real: str, allowed: list[str]) -> bool:
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in allowed)


def checked_cwd(agent: Agent, cwd: Any, given: bool, repo_root: Path) -> str:
    """The folder a call runs in: the relay's, when it is the agent's own; else its checkout.

    A folder the caller named (``-C``) outside the agent's own folders is InvalidInput; a shell
    that merely runs elsewhere (``cd /tmp; exo note ...``) acts from the agent's checkout.
    """
    home = agent.worktree or str(repo_root)
    if not isinstance(cwd, str) or not cwd or "\0" in cwd or not os.path.isabs(cwd):
        return home
    allowed = roots(agent, repo_root)
    real = os.path.realpath(cwd)
    if _within(real, allowed) and os.path.isdir(real):
        private = agent.spec.get("agent_dir")
        if isinstance(private, str) and private and _within(real, [_resolved(private)]):
            return home  # the private folder is under the state folder: no repository around it
        return cwd
    if given:
        raise InvalidInput(f"-C {cwd} is outside {agent.id}'s own folders",
                           hint=f"An agent works in its checkout ({home}) or the repository ({repo_root}).",
                           field="directory", path=cwd)
    return home


def check_args(spec: Op, args: Mapping[str, Any], *, cwd: str, allowed: list[str], agent: str) -> None:
    """InvalidInput when a path argument of the call (``Op.paths``) lies outside ``allowed``."""
    for param in spec.paths:
        value = args.get(param)
        if value is None or value == "":
            continue
        if not isinstance(value, str) or "\0" in value:
            raise InvalidInput(f"{param} must be a path", field=param)
        path = os.path.expanduser(value)
        path = path if os.path.isabs(path) else os.path.join(cwd, path)
        if not inside(path, allowed):
            raise InvalidInput(f"{param} {value} is outside {agent}'s own folders",
                               hint="An agent names files in its checkout, its private folder or the repository.",
                               field=param, path=value)


def check_payload(payload: Any, *, allowed: list[str], transcripts: list[str], agent: str) -> None:
    """InvalidInput when a hook payload's ``cwd`` or ``transcript_path`` lies outside the agent's folders."""
    if not isinstance(payload, str) or not payload.strip():
        return
    try:
        data = json.loads(payload)
    except ValueError:
        return  # the hook reports a payload that is no JSON itself
    if not isinstance(data, dict):
        return
    for field_name, extra in (("cwd", []), ("transcript_path", transcripts)):
        value = data.get(field_name)
        if value is None or value == "":
            continue
        ok = isinstance(value, str) and "\0" not in value and os.path.isabs(value)
        if not ok or not inside(value, [*allowed, *extra]):
            raise InvalidInput(f"The hook payload's {field_name} {value!r} is outside {agent}'s own folders",
                               field=field_name)


def transcript_roots(environ: Mapping[str, str]) -> list[str]:
    """The agent CLIs' transcript folders of the broker's user (resolved)."""
    from exo_cli.adapters.agents import transcript_roots as folders

    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    return [os.path.realpath(p) for p in folders(environ, home)]


# --------------------------------------------------------------------------- the environment


def request_environ(given: Any, agent: Agent, *, state_dir: str, socket: str, proof: str | None,
                    repo_root: Path, config_dir: str) -> dict[str, str]:
    """The environment a call runs with: the relay's (minus what steers exo or git), identity from the record.

    The user's configuration folder is the broker's (``config_dir``), never one the agent's variables
    (``XDG_CONFIG_HOME``, ``HOME``) would name: the user file is trusted and holds the ``exo trust`` pins."""
    from exo_cli.env import PROOF_VAR, SOCKET_VAR
    from exo_cli.records import ROOT

    out: dict[str, str] = {}
    if isinstance(given, dict):
        for k, v in given.items():
            if not isinstance(k, str) or not isinstance(v, str) or "\0" in k or "\0" in v or k in DROP:
                continue
            if k.startswith("EXO_") and k not in KEEP_EXO:
                continue
            if k.startswith("GIT_") and not k.startswith(KEEP_GIT):
                continue
            out[k] = v
    out.update({"EXO_AGENT": agent.id, "EXO_ROLE": agent.role, "EXO_PARENT": agent.parent or ROOT,
                "EXO_STATE_DIR": state_dir, SOCKET_VAR: socket, "BEADS_DIR": str(repo_root / ".beads"),
                "EXO_CONFIG_DIR": config_dir})
    if proof:
        out[PROOF_VAR] = proof  # proven: the processes exo starts for the agent (a conflict check) carry it
    return out
