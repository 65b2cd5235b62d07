"""Every JSON field the documentation names is a field of what the command prints.

The user docs name JSON fields in two places: the sentences of a command's section of
docs/commands.md about its output (its `--json`, its result, its JSON), and the Agent table of
docs/concepts.md (an agent's fields, which `exo agents --json` rows and `exo status --json`'s
`agent` carry). Each field named there must be a field of the command's result: its result
class, which is exactly what `--json` prints and the MCP structured content carries (the real
output is checked against that class's schema by tests/test_parity_results.py).

How the docs tell a field from a value, in those sentences: a field is written `name`,
`name: ...` or inside a brace list (`{name, other}`, `{"name", "other"}`); a value is quoted
(`"received"`) or follows its field in parentheses (`mode` (`attach`, `log`)); an option starts
with `--`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from exo_cli import registry

ROOT = Path(__file__).resolve().parent.parent
OPS = registry.load_all()
COMMANDS_MD = (ROOT / "docs" / "commands.md").read_text()
CONCEPTS_MD = (ROOT / "docs" / "concepts.md").read_text()
# Agent-table fields that `exo agents --json` leaves out on purpose (the table says so, and which command shows them).
NOT_LISTED = {"session_id", "output"}


# --------------------------------------------------------------------------- what a result holds


def _names() -> dict[str, Any]:
    """Every class of exo's modules by name, to resolve annotations written under TYPE_CHECKING."""
    out: dict[str, Any] = {"Any": Any}
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("exo_cli"):
            out.update({k: v for k, v in vars(mod).items() if isinstance(v, type)})
    return out


def fields_of(tp: Any, seen: set[Any] | None = None) -> set[str]:
    """Every field name anywhere in the JSON of type ``tp`` (dataclasses and records, nested)."""
    seen = set() if seen is None else seen
    origin = typing.get_origin(tp)
    if origin is not None:
        return set().union(*(fields_of(a, seen) for a in typing.get_args(tp) if a is not Ellipsis))
    if not isinstance(tp, type) or tp in seen:
        return set()
    seen.add(tp)
    if dataclasses.is_dataclass(tp):
        names = [f.name for f in dataclasses.fields(tp) if f.repr]
    elif issubclass(tp, tuple) and hasattr(tp, "_fields"):
        names = list(tp._fields)
    else:
        return set()
    hints = typing.get_type_hints(tp, localns=_names())
    return set(names).union(*(fields_of(hints[n], seen) for n in names))


# --------------------------------------------------------------------------- what the docs name


def section(cli: str) -> str:
    """The part of docs/commands.md about `exo CLI` (its ### heading names it first or after a comma)."""
    for part in re.split(r"^### ", COMMANDS_MD, flags=re.M)[1:]:
        head = part.split("\n", 1)[0]
        if re.match(rf"`exo {re.escape(cli)}( |`)", head) or re.search(rf", `exo {re.escape(cli)}( |`)", head):
            return part.split("\n", 1)[1]
    return ""


def _drop_parens(text: str) -> str:
    while True:
        shorter = re.sub(r"\([^()]*\)", "", text)
        if shorter == text:
            return text
        text = shorter


def json_sentences(text: str) -> list[str]:
    """The sentences of ``text`` about JSON output (code blocks left out)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S).replace("\n", " ")
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])", text)
    return [s for s in sentences if re.search(r"--json|\bJSON\b|\b[Rr]esult\b", _drop_parens(s))]


def documented(sentences: list[str]) -> set[str]:
    """The field names these sentences give (see the module docstring for how fields and values differ)."""
    out: set[str] = set()
    for sentence in sentences:
        for braces in re.findall(r"`(\{[^`]*\})`", sentence):  # brace lists, values in parentheses or not
            if braces.startswith("{{"):
                continue
            out |= set(re.findall(r'[{,\s]"?([a-z][a-z0-9_]*)"?(?=\s*[:,}])', braces))
        for token in re.findall(r"`([^`]+)`", _drop_parens(sentence)):
            if m := re.fullmatch(r"([a-z][a-z0-9_]*)(?:: .*)?", token):
                out.add(m.group(1))
    return out


def agent_table() -> set[str]:
    """The fields of the Agent table of docs/concepts.md (its first column)."""
    body = CONCEPTS_MD.split("## Agent\n", 1)[1].split("\n\n| field |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", sorted(n for n, o in OPS.items() if o.cli))
def test_every_json_field_a_command_documents_is_in_its_result(name: str) -> None:
    op = OPS[name]
    named = documented(json_sentences(section(op.cli or "")))
    missing = named - fields_of(op.result_type())
    assert not missing, f"docs/commands.md names JSON fields `exo {op.cli} --json` does not print: {sorted(missing)}"


def test_the_agent_table_is_what_agents_json_prints() -> None:
    from exo_cli.ops.status import AgentView

    table = agent_table()
    assert {"status_reason", "status", "id"} <= table, table
    row = set(AgentView._fields)
    assert table - NOT_LISTED <= row, f"docs/concepts.md's Agent fields missing from `exo agents --json`: " \
                                      f"{sorted(table - NOT_LISTED - row)}"
    assert NOT_LISTED <= table and not NOT_LISTED & row
    said = re.search(r"`exo agents --json` rows .*? carry\s+every field above but (.*?)\n\n", CONCEPTS_MD, re.S)
    assert said, "concepts.md must say what the rows leave out and add"
    left_out, added = said.group(1).split(", plus ", 1)
    assert set(re.findall(r"`([a-z_]+)`", _drop_parens(left_out))) == NOT_LISTED
    assert set(re.findall(r"`([a-z_]+)`", _drop_parens(added))) == row - table, "the rows' own fields, as documented"


def test_the_checker_finds_a_field_the_docs_name_but_a_result_lacks() -> None:
    """The extraction itself: fields, brace lists and `name: ...` count; values and options do not."""
    text = ("`--json` prints the plan: `mode` (`attach` or `log`), `argv` and `{kind, pr}`; a "
            "`{\"rounds\", \"changes\"}` line. The result: `worktrees: [[id, path]]`, `\"received\"`, `--once`.")
    assert documented(json_sentences(text)) == {"mode", "argv", "kind", "pr", "rounds", "changes", "worktrees"}
    assert documented(json_sentences("Without it, `idle` and `mode` are words (not the result).")) == set()
