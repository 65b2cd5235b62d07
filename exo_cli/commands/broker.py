"""``exo broker status|start|stop`` and the hidden ``exo broker serve`` (the broker's own process)."""

from __future__ import annotations

import sys
from typing import Any

import click

from exo_cli.commands._options import json_option, op_help
from exo_cli.ops.broker import BrokerStatus, BrokerStopResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_status(out: Out, r: BrokerStatus) -> None:
    if r.running:
        out.line(f"broker: running (pid {r.pid}, exo {r.exo}, protocol {r.protocol}), "
                 f"{r.connections or 0} open connection(s)")
    else:
        out.line("broker: not running" + ("" if r.enabled else " (disabled: [broker] enabled = false)"))
    out.line(f"log: {r.log}")
    if r.sockets:
        net = any(s.net_carried is not None for s in r.sockets)  # a sandboxed agent's proxy: what it carried
        out.table(["AGENT", "SOCKET", "PRESENT", *(["NET CARRIED"] if net else [])],
                  [[s.agent, s.socket, "yes" if s.present else "no",
                    *([str(s.net_carried) if s.net_carried is not None else "-"] if net else [])] for s in r.sockets])


def render_stop(out: Out, r: BrokerStopResult) -> None:
    if not r.stopped:
        out.line("No broker was running.")
    elif r.agents:
        out.line(f"Stopped the broker; it served {r.agents} agent(s): their relays start it again when they call.")
    else:
        out.line("Stopped the broker.")


@click.group(help="The team broker: one exo process per repository that serves every agent on its own socket."
             "\n\n\b\nExamples:\n  exo broker status\n  exo broker start\n  exo broker stop")
def broker() -> None:
    pass


@broker.command("status", help=op_help("broker_status") + "\n\n\b\nExamples:\n  exo broker status\n"
                "  exo broker status --json")
@json_option
@click.pass_obj
def status(env: Any, as_json: bool) -> None:
    emit(invoke("broker_status", env), as_json=as_json, human=render_status)


@broker.command("start", help=op_help("broker_start") + "\n\n\b\nExamples:\n  exo broker start\n"
                "  exo broker start --json")
@json_option
@click.pass_obj
def start(env: Any, as_json: bool) -> None:
    emit(invoke("broker_start", env), as_json=as_json, human=render_status)


@broker.command("stop", help=op_help("broker_stop") + "\n\n\b\nExamples:\n  exo broker stop\n  exo broker stop --json")
@json_option
@click.pass_obj
def stop(env: Any, as_json: bool) -> None:
    emit(invoke("broker_stop", env), as_json=as_json, human=render_stop)


@broker.command("serve", hidden=True)
@click.option("--ready-fd", type=int, default=None, help="Write 'ready' on this descriptor once listening.")
@click.pass_obj
def serve(env: Any, ready_fd: int | None) -> None:
    """Run the team broker of this repository (exo starts it; not for people).

    Started detached by any exo process that finds no broker running (`exo spawn`, an agent's
    relay, `exo doctor`); it exits by itself once the last agent with a socket is gone.

    \b
    Examples:
      exo broker status
    """
    from exo_cli.broker.serve import serve as run

    sys.exit(run(env, ready_fd=ready_fd))
