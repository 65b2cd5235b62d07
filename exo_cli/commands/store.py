"""``exo store migrate``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.store import MigrateResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_migrate(out: Out, r: MigrateResult) -> None:
    out.line(f"Moved the state from {r.source} to {r.target}: "
             + ", ".join(f"{n} {table}" for table, n in r.counts.items())
             + (" (every row checked)" if r.digests else " (an interrupted migrate finished)"))
    if r.kept:
        out.line(f"The old state is kept, marked moved: {r.kept}")


@click.group(help="Where exo keeps this repository's state: move it between SQLite and PostgreSQL."
             "\n\n\b\nExamples:\n  exo store migrate --to postgresql://exo@db.internal/exo\n"
             "  exo store migrate --to sqlite")
def store() -> None:
    pass


@store.command("migrate", help=op_help("store_migrate") + "\n\n\b\nExamples:\n"
               "  exo store migrate --to postgresql://exo@db.internal/exo\n  exo store migrate --to sqlite")
@op_option("store_migrate", "to", "--to", required=True, metavar="URL|sqlite")
@json_option
@click.pass_obj
def migrate(env: Any, to: str, as_json: bool) -> None:
    emit(invoke("store_migrate", env, to=to), as_json=as_json, human=render_migrate)
