"""The command table: name -> where the Click command lives, and its one-line summary.

Commands load on first use, so ``exo --help`` imports click and nothing else of weight,
and ``exo status`` imports only the status command and its operation. The summaries
here are checked against each command's real short help by ``tests/test_parity.py``,
and every command's ``--help`` is exercised there, so the table cannot drift.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    target: str  # "module:attribute"
    summary: str
    hidden: bool = False


COMMANDS: dict[str, Entry] = {
    "init": Entry("exo_cli.commands.init:init", "Set up exo in this repository."),
    "deinit": Entry("exo_cli.commands.deinit:deinit",
                    "Take exo out of this repository, leaving it as it was before exo init."),
    "status": Entry("exo_cli.commands.status:status", "Show the current task, git state and PR; at the root, a team summary."),
    "agents": Entry("exo_cli.commands.status:agents", "List the agent tree with status, task, branch, PR and last message."),
    "cost": Entry("exo_cli.commands.cost:cost", "Show the tokens and dollars each agent used, by model and kind, with the team's total."),
    "board": Entry("exo_cli.commands.board:board", "Show the team at a glance: a live board of the agents, those that need you first."),
    "ui": Entry("exo_cli.commands.ui:ui", "Serve the board in a browser, on 127.0.0.1 behind a one-time link."),
    "ls": Entry("exo_cli.commands.status:agents_alias", "Alias of `exo agents`.", hidden=True),
    "spawn": Entry("exo_cli.commands.spawn:spawn", "Start agents: one worktree, branch and agent per bead, worker or subtree."),
    "kill": Entry("exo_cli.commands.lifecycle:kill", "Kill an agent and all its descendants; their worktrees are kept."),
    "reap": Entry("exo_cli.commands.lifecycle:reap", "Clear finished agents (dead or done) and close their windows; worktrees are never touched."),
    "attach": Entry("exo_cli.commands.lifecycle:attach", "Switch the terminal to an agent's pane (or follow its log when headless)."),
    "read": Entry("exo_cli.commands.lifecycle:read", "Read the tail of an agent's pane, or its log when headless."),
    "conflicts": Entry("exo_cli.commands.conflicts:conflicts",
                       "List the conflicts foreseen between agents' branches, and with their base branches."),
    "diff": Entry("exo_cli.commands.diff:diff", "Show an agent's branch against its base branch: what its pull request would merge."),
    "checkpoints": Entry("exo_cli.commands.checkpoints:checkpoints",
                         "List an agent's checkpoints: time, turn, files changed and lines, newest first."),
    "checkpoint": Entry("exo_cli.commands.checkpoints:checkpoint", "Take a checkpoint of an agent's checkout now."),
    "undo": Entry("exo_cli.commands.checkpoints:undo", "Restore an agent's checkout to one of its checkpoints."),
    "doctor": Entry("exo_cli.commands.lifecycle:doctor", "Reconcile exo's records with git, the multiplexer and process liveness; repair."),
    "beads": Entry("exo_cli.commands.beads:beads", "Read the beads tracker: ready, show and list beads."),
    "reconstitute": Entry("exo_cli.commands.reconstitute:reconstitute", "Sync beads from the main branch and refresh the agent's context."),
    "pr": Entry("exo_cli.commands.pr:pr", "File, merge and list pull requests."),
    "complete": Entry("exo_cli.commands.complete:complete",
                      "Close the bead, stop the agent, and remove its worktree and branch if nothing would be lost."),
    "watch": Entry("exo_cli.commands.watch:watch",
                   "Poll the forge for review, check and merge changes and deliver them as events."),
    "mcp": Entry("exo_cli.commands.mcp:mcp", "Serve exo's operations as MCP tools over stdio."),
    "hook": Entry("exo_cli.commands.hook:hook", "Handle an agent CLI's hook event and answer in that CLI's format."),
    "note": Entry("exo_cli.commands.messages:note", "Send a fire-and-forget note to your parent."),
    "question": Entry("exo_cli.commands.messages:question", "Ask your parent a question and wait for the answer."),
    "answer": Entry("exo_cli.commands.messages:answer", "Answer a child's pending question and wake it."),
    "send": Entry("exo_cli.commands.messages:send", "Send a message to one or several agents."),
    "wait": Entry("exo_cli.commands.messages:wait", "Wait for messages: every pending one from anyone, or fan in on several agents."),
    "output": Entry("exo_cli.commands.messages:output", "Show an agent's final output."),
    "budget": Entry("exo_cli.commands.cost:budget",
                    "Set or raise an agent's budget, or with --team the team's, in dollars or tokens; what it held works again."),
    "usage": Entry("exo_cli.commands.cost:report_usage",
                          "Report tokens you used with a model: for custom agents, whose CLI exo cannot read."),
    "done": Entry("exo_cli.commands.messages:done", "Mark your own task done with its output."),
    "demo": Entry("exo_cli.commands.demo:demo", "Show the whole lifecycle on a scratch repository with the built-in demo agent."),
    "config": Entry("exo_cli.commands.config:config", "Show the effective configuration and where it comes from."),
    "trust": Entry("exo_cli.commands.trust:trust", "Trust the repository exo.toml's commands, hosts, store and sandbox."),
    "store": Entry("exo_cli.commands.store:store",
                   "Where exo keeps this repository's state: move it between SQLite and PostgreSQL."),
    "broker": Entry("exo_cli.commands.broker:broker",
                    "The team broker: one exo process per repository that serves every agent on its own socket."),
    "hosts": Entry("exo_cli.commands.hosts:hosts", "List the configured hosts with reachability, exo version and store."),
    "host-call": Entry("exo_cli.commands.hostcall:host_call", "Answer one request of another host's exo (one JSON line on stdin).",
                       hidden=True),
    "completion": Entry("exo_cli.commands.completion:completion", "Print or install the shell completion script."),
}
