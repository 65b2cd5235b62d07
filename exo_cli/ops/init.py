"""``exo init``: write exo.toml defaults, hide .exo/, report which tools are available."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from exo_cli.adapters.git import add_exclude
from exo_cli.records import AGENT_CLI_INSTALL, AGENT_CLIS, PANE_MUXES
from exo_cli.registry import Choice, op

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.rootwire import AgentWiring

TOOLS = ("git", *PANE_MUXES, "gh", *AGENT_CLIS, "bd", "process-compose")

EXO_TOML = """\
# exo configuration for this repository (see `exo --help`). Every key is optional.

[agent]
{agent}
skip_permissions = false    # start agents with their CLI's "run tools without asking" flag

[mux]
default = "tmux"            # tmux | zellij | headless

[worktree]
# root = ""                 # default: <hangar>/worktrees or <repo>/.exo/worktrees
# base = "main"             # default: the parent's branch
copy = []                   # files copied into each new worktree, e.g. [".env"]
symlink = []                # files or folders symlinked, e.g. ["node_modules"]
# post_create = ["npm", "ci"]

[forge]
kind = "auto"               # auto | local | github

[limits]
max_agents = 0              # 0 = no limit
on_limit = "fail"           # fail | wait
"""
AGENT_LINE = 'default = "{name}"'.ljust(28) + "# claude | gemini | codex | custom | demo"
NO_AGENT_LINES = """\
# default = "claude"        # claude | gemini | codex | custom | demo: none of the agent CLIs was
                            # installed when exo init ran; until one is, spawn with --agent demo"""


def exo_toml(agent: str | None) -> str:
    """The exo.toml `exo init` writes, with ``agent`` as the default agent (None: no default)."""
    return EXO_TOML.format(agent=AGENT_LINE.format(name=agent) if agent else NO_AGENT_LINES)


def install_hints() -> str:
    """How to install each agent CLI, as one line."""
    return "; ".join(f"{AGENT_CLI_INSTALL[c]} ({c})" for c in AGENT_CLIS)


def pick_agent(tools: dict[str, str | None], wanted: str | None = None) -> str | None:
    """The agent CLI to write as the default: ``wanted`` (the one `--agent` wires) when it is
    installed, else the first installed in the order claude, gemini, codex; None when none is."""
    if wanted and tools.get(wanted):
        return wanted
    return next((c for c in AGENT_CLIS if tools.get(c)), None)


def _record(env: Env, toml_written: str | None, excluded: str | None) -> None:
    """Note what init put here (``footprint``), so that ``exo deinit`` takes exactly that out again."""
    if toml_written is None and excluded is None:
        return
    from exo_cli.ops import footprint

    def change(data: dict[str, object]) -> None:
        if toml_written is not None:
            data["exo_toml"] = footprint.digest(toml_written)
        if excluded is not None:
            footprint.add_excluded(data, excluded)

    footprint.update(env.state_dir, change)


@dataclass(frozen=True)
class InitResult:
    repo: str
    config_file: str
    config_written: bool
    excluded: bool
    state_dir: str
    tools: dict[str, str | None]
    warnings: list[str]
    wiring: AgentWiring | None = None
    # the agent a plain `exo spawn` starts: agent.default as written, or as configured when exo.toml was
    # kept; None: exo init wrote none, no agent CLI being installed
    default_agent: str | None = None


@op(
    "init",
    cli="init",
    roles=("human",),
    idempotent=True,
    help={
        "force": "Overwrite an existing exo.toml with the defaults.",
        "agent": "Wire your own agent session (claude, gemini or codex) as the team lead at the root of the "
        "tree: the exo MCP server and exo's hooks in that CLI's project settings, merged into what is there.",
    },
)
def init(env: Env, *, force: bool = False, agent: Annotated[str, Choice(AGENT_CLIS)] | None = None) -> InitResult:
    """Set up exo in this repository.

    Writes `exo.toml` with commented defaults (unless it exists), the default agent
    being the agent CLI `agent` names when it is installed, else the first installed of
    claude, gemini and codex (none written when none is), hides exo's own
    `.exo/` folder through `.git/info/exclude` (never a committed file), creates the
    state folder and reports which of git, tmux, gh and the agent CLIs are installed.
    With {--agent}, also wires that agent CLI's project settings (`.mcp.json` and
    `.claude/settings.local.json`, `.gemini/settings.json`, or `.codex/config.toml`
    and `.codex/hooks.json`) so the human's own session is the team lead at the root of
    the tree (it spawns, answers and merges); the user's own keys are kept and a re-run
    changes nothing. A settings file that does not parse is an error, and is never
    overwritten.
    """
    if agent is not None:
        from exo_cli.ops.rootwire import AGENTS

        if agent not in AGENTS:
            from exo_cli.errors import InvalidInput

            raise InvalidInput(f"Unknown agent {agent!r}", hint=f"Use one of: {', '.join(AGENTS)}.", agent=agent)
    repo = env.repo
    if not force:
        env.config  # noqa: B018 - an existing bad exo.toml is reported, naming the key
    path = repo.root / "exo.toml"
    path_env = env.environ.get("PATH")
    tools = {name: shutil.which(name, path=path_env) for name in TOOLS}
    written: str | None = None
    if force or not path.exists():
        from exo_cli.adapters.files import atomic_write

        default_agent = pick_agent(tools, agent)
        written = exo_toml(default_agent)
        atomic_write(path, written)
        from exo_cli.ops.trust import trust_written

        trust_written(env, written)  # what exo wrote is trusted (never a file that was there before)
    else:
        default_agent = str(env.config.get("agent.default"))
    excluded = add_exclude(repo.common_dir, "/.exo/")
    env.store.kv_set("initialized", "1")
    _record(env, written, "/.exo/" if excluded else None)
    warnings = []
    if not tools["tmux"]:
        warnings.append("tmux is not installed: agents will run headless (install tmux to watch them in panes)")
    if not any(tools[c] for c in AGENT_CLIS):
        warnings.append("no agent CLI found (claude, gemini, codex)" + (": exo.toml names no default agent" if written else "")
                        + f". Try exo with its scripted agent: exo spawn --agent demo ...; or install one: {install_hints()}")
    elif not written and default_agent in AGENT_CLIS and not tools[default_agent]:
        where = env.config.origin("agent.default")
        warnings.append(f"agent.default is {default_agent} ({where}), which is not installed: a plain `exo spawn` "
                        f"will fail. Install it ({AGENT_CLI_INSTALL[default_agent]}), set "
                        f"agent.default to {pick_agent(tools)}, or spawn with --agent")
    from exo_cli.ops.sandbox import sandbox_status, unavailable_warning

    mode = env.config.peek("sandbox.mode")  # to decide on a warning only: trusted or not
    sandbox_warning = unavailable_warning(sandbox_status(env)) if mode in ("on", "auto") else None
    if sandbox_warning:  # only when agents are to be sandboxed here (`[sandbox] mode` on or auto)
        warnings.append(sandbox_warning)
    wiring = None
    if agent is not None:
        from exo_cli.ops.rootwire import wire_agent

        wiring = wire_agent(repo, agent, record=env.state_dir)
        if not tools.get(agent):
            warnings.append(f"{agent} is not installed: the wiring is written and takes effect once it is "
                            f"({AGENT_CLI_INSTALL[agent]})")
    return InitResult(
        repo=str(repo.root),
        config_file=str(path),
        config_written=written is not None,
        excluded=excluded,
        state_dir=str(env.state_dir),
        tools=tools,
        warnings=warnings,
        wiring=wiring,
        default_agent=default_agent,
    )
