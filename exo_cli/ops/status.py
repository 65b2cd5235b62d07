"""``exo status`` and ``exo agents``: what the caller is doing, and the team's tree."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any, TypedDict

from exo_cli.adapters.git import Git
from exo_cli.lite import NamedTuple
from exo_cli.ops import remote as _remote  # noqa: F401 - routes on_host operations to their agent's host
from exo_cli.records import ROOT, Agent, PullRequest
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env


class GitState(NamedTuple):
    branch: str | None
    head: str | None
    dirty: list[str]
    parent_branch: str | None
    ahead: int | None
    behind: int | None


class PrBrief(TypedDict):
    """An agent's pull request as its row shows it."""

    number: int
    state: str
    base: str
    queue: str | None  # queued | testing | tested | bounced while open in the merge queue, else None


class TeamSummary(TypedDict):
    """The team at a glance (``exo status`` at the root)."""

    agents: int
    by_status: dict[str, int]
    open_prs: int


class AgentView(NamedTuple):
    """One row of ``exo agents``.

    The records of this module are NamedTuples (``exo_cli.lite``'s), not dataclasses: defining a
    dataclass costs several times more, and importing ``dataclasses`` imports ``inspect``, on the
    path of every ``exo status`` and ``exo agents``. They serialize, have a schema and travel
    between hosts exactly as dataclasses do (``records.to_jsonable``, ``schema``, ``wire``).
    """

    id: str
    name: str
    role: str
    parent: str | None
    depth: int
    status: str
    status_reason: str | None
    backend: str
    mux: str
    task: str | None
    bead: str | None
    branch: str | None
    base_branch: str | None
    worktree: str | None
    location: dict[str, Any]
    pr: PrBrief | None
    last_message: str | None
    age_seconds: float
    status_age_seconds: float
    turns: int
    tool_calls: int
    tokens: int
    host: str = ""  # the host it runs on ("" for records made before hosts)
    layout: str = "worktree"  # where it works: "worktree", "clone" (its own clone --shared) or "none" (the repository)
    sandboxed: bool = False  # it runs in bubblewrap (docs/security.md "The sandbox")
    cost_usd: float | None = 0.0  # the dollars of its tokens (None: a model without a price, `exo cost`)


class AgentsResult(NamedTuple):
    agents: list[AgentView]
    count: int  # type: ignore[assignment]  # the field (a public JSON name) stands for tuple.count here
    by_status: dict[str, int]
    this_host: str = ""  # this machine's name among exo's hosts


class StatusResult(NamedTuple):
    repo: str
    worktree: str
    state_dir: str
    caller: str
    role: str
    via: str
    agent: AgentView | None
    task: str | None
    bead: str | None
    git: GitState
    pr: PrBrief | None
    team: TeamSummary | None = None


def queue_state(pr: PullRequest) -> str | None:
    """Where an open PR stands in the merge queue (queued, testing, tested, bounced), None when not in it."""
    q = pr.data.get("queue") if pr.state == "open" and isinstance(pr.data, dict) else None
    return str(q.get("state")) if isinstance(q, dict) and q.get("state") else None


def _views(env: Env, agents: list[Agent]) -> list[AgentView]:
    """Agents as a depth-first tree under root, with their PR and last message."""
    now = time.time()
    prs: dict[str, PrBrief] = {}
    last: dict[str, str] = {}
    if env.has_state():
        for pr in env.store.prs():
            prs[pr.head] = {"number": pr.number, "state": pr.state, "base": pr.base, "queue": queue_state(pr)}
        last = env.store.last_message_by_sender()
    from exo_cli.ops.cost import agent_usd, team_costs

    costs = team_costs(env, [a.id for a in agents]) if agents else {}
    children: dict[str | None, list[Agent]] = {}
    ids = {a.id for a in agents}
    for a in agents:
        parent = a.parent if a.parent in ids else None
        children.setdefault(parent, []).append(a)
    out: list[AgentView] = []

    def walk(parent: str | None, depth: int) -> None:
        for a in children.get(parent, []):
            out.append(
                AgentView(
                    id=a.id,
                    name=a.name,
                    role=a.role,
                    parent=a.parent,
                    depth=depth,
                    status=a.status,
                    status_reason=a.status_reason,
                    backend=a.backend,
                    mux=a.mux,
                    task=a.task,
                    bead=a.bead,
                    branch=a.branch,
                    base_branch=a.base_branch,
                    worktree=a.worktree,
                    location=a.location,
                    pr=prs.get(a.branch or ""),
                    last_message=last.get(a.id),
                    age_seconds=round(now - a.created_at, 1),
                    status_age_seconds=round(now - a.status_at, 1),
                    turns=a.turns,
                    tool_calls=a.tool_calls,
                    tokens=a.tokens,
                    host=a.host,
                    layout=layout_of(a),
                    sandboxed=bool(a.spec.get("sandboxed")),
                    cost_usd=agent_usd(costs, a.id),
                )
            )
            walk(a.id, depth + 1)

    walk(None, 0)
    return out


def layout_of(agent: Agent) -> str:
    """Where ``agent`` works (records made before layouts: a worktree, unless it was spawned without one)."""
    spec = agent.spec
    return str(spec.get("layout") or ("worktree" if spec.get("creates_worktree", True) else "none"))


def team_agents(env: Env, *, history: bool = False) -> list[Agent]:
    """Every recorded agent with its liveness checked against the multiplexer (retired ones with ``history``)."""
    if not env.has_state():
        return []
    agents = [a for a in env.store.agents() if a.id != ROOT and (history or not a.retired)]
    from exo_cli.ops import agentctl

    agents = agentctl.refresh(env, agents)
    if env.caller.is_human and _broker_lost(env, agents):  # the human's look at the team starts it again
        from exo_cli.ops import broker

        broker.revive(env, agents)
    return agents


def _broker_lost(env: Env, agents: list[Agent]) -> bool:
    """Whether live agents of this host have a socket and nothing answers on the broker's (one connect, and
    only then: the read path stays light, ``ops.broker`` is imported only to start it again)."""
    if not any(a.live and a.spec.get("socket_key") and env.runs_here(a) for a in agents):
        return False
    from exo_cli.adapters.broker import Paths
    from exo_cli.adapters.brokerio import answers
    from exo_cli.adapters.files import runtime_dir_for

    return not answers(str(Paths(runtime_dir_for(str(env.state_dir.resolve()), create=False)).ctl))


@op(
    "agents",
    cli="agents",
    tools=["list_agents"],
    read_only=True,
    idempotent=True,
    flags={"show_all": "--all"},
    help={"show_all": "Also list the history: finished agents that were reaped or completed and whose "
                      "name was used again (their id is <name>@<n>)."},
)
def agents(env: Env, *, show_all: bool = False) -> AgentsResult:
    """List the agent tree with status, task, branch, PR and last message.

    Status comes from the agents' hooks first and from pane or process liveness second;
    an agent whose pane or process is gone shows as `dead`. One batched multiplexer
    call per refresh, whatever the number of agents. With {--show_all}, the agents kept as
    history are listed too.
    """
    env.repo  # noqa: B018 - fail early outside a repository
    views = _views(env, team_agents(env, history=show_all))
    return AgentsResult(agents=views, count=len(views), by_status=dict(Counter(v.status for v in views)),
                        this_host=env.host_name)


@op(
    "status",
    cli="status",
    tools=["exo_status"],
    read_only=True,
    idempotent=True,
    help={"agent": "Show this agent instead of the caller (default: the calling agent, or the root)."},
    on_host="agent",
)
def status(env: Env, *, agent: str | None = None) -> StatusResult:
    """Show the current task, git state and PR; at the root, a team summary.

    For an agent: its task or bead, its branch with commits ahead of and behind its parent
    branch, its dirty files and its PR. At the root (the human, or the team lead whose session
    the human wired with `exo init --agent`), the same for the current checkout plus counts
    of the team's agents by status.
    """
    from exo_cli.errors import NotFound

    repo = env.repo
    caller = env.caller
    record: Agent | None = None
    target = agent or (None if caller.is_human else caller.agent_id)
    if target and target != ROOT:
        from exo_cli.validate import check_name

        check_name(target, "agent name")  # an unsafe name is InvalidInput, not NotFound
        record = env.store.agent(target) if env.has_state() else None
        if record is None:
            raise NotFound(f"No agent named {target!r}", hint="List agents with `exo agents`.", agent=target)
    where = record.worktree if record and record.worktree else str(repo.toplevel)
    git, head_ref, snap = _snapshot(env, record, where)
    branch, dirty = snap.branch, snap.changes
    parent_branch = record.base_branch if record else snap.upstream
    ahead, behind = (snap.ahead, snap.behind) if record is None else (None, None)
    if record is not None and branch and parent_branch:
        counts = git.ahead_behind(head_ref or branch, parent_branch)
        if counts:
            ahead, behind = counts
    views = _views(env, team_agents(env)) if (record is None) else []
    view = None
    pr: PrBrief | None = None
    if record is not None:
        view = _views(env, [record])[0]
        pr = view.pr
    elif branch and env.has_state():
        found = env.store.prs(head=branch)
        if found:
            pr = {"number": found[-1].number, "state": found[-1].state, "base": found[-1].base,
                  "queue": queue_state(found[-1])}
    team: TeamSummary | None = None
    if record is None:
        team = {
            "agents": len(views),
            "by_status": dict(Counter(v.status for v in views)),
            "open_prs": sum(1 for p in env.store.prs(state="open")) if env.has_state() else 0,
        }
    return StatusResult(
        repo=str(repo.root),
        worktree=where,
        state_dir=str(env.state_dir),
        caller=caller.agent_id,
        role=env.role,
        via=caller.via,
        agent=view,
        task=record.task if record else None,
        bead=record.bead if record else None,
        git=GitState(branch=branch, head=snap.head, dirty=dirty, parent_branch=parent_branch, ahead=ahead, behind=behind),
        pr=pr,
        team=team,
    )


def _snapshot(env: Env, record: Agent | None, where: str) -> tuple[Git, str | None, Any]:
    """(the git that counts commits, the ref of the checkout's branch there, the checkout's snapshot).

    An agent's own clone is read through exo's reader after its work is fetched; its commits
    are counted in the repository, against the parent branch as the repository has it.
    """
    from exo_cli.ops import checkout

    if record is None or not checkout.is_clone(record):
        git = Git(where)
        return git, None, git.snapshot()
    with checkout.reading(env, record, fetch=True) as (reader, _synced):
        snap = reader.snapshot()
    from exo_cli.adapters.clones import clone_refs

    head_ref = f"{clone_refs(record.id)}heads/{snap.branch}" if snap.branch else None
    return Git(env.repo.root), head_ref, snap
