"""What a new user reads: every command's --help, every man page and every MCP tool description.

The rules, checked on all of them:
- no reST double backticks (the text is read in a terminal, a man page or by a model);
- no internal wording: no numbered references to the tool families exo took its tools from, no
  names of exo's own functions (private or not) unless they are also public names (a tool, a
  parameter, a JSON field);
- every command's help ends with an "Examples" block (kept verbatim with Click's \\b);
- every man page has its whole one-line summary in NAME, and EXIT STATUS, ENVIRONMENT, FILES,
  EXAMPLES and SEE ALSO sections;
- a mistyped command gets "Did you mean", at the top level as under a group.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import click
import pytest

from conftest import ROOT, Exo
from exo_cli import registry
from exo_cli.commands import COMMANDS
from exo_cli.config import SCHEMA
from exo_cli.main import cli

INTERNAL = re.compile(r"(?i)\bseeds?[\s_]*\d{3}\b|\bformats\.md\b|\breference/|\bfield[- ]lessons\b")


def command_paths() -> dict[str, click.Command]:
    """Every command by path ("" is the root), hidden aliases and group subcommands included."""
    ctx = click.Context(cli)
    out: dict[str, click.Command] = {"": cli}
    for name in sorted(COMMANDS):
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        out[name] = cmd
        if isinstance(cmd, click.Group):
            out.update({f"{name} {sub}": c for sub, c in sorted(cmd.commands.items())})
    return out


@cache
def public_names() -> frozenset[str]:
    """Names users and models legitimately see: tools, parameters, JSON fields, configuration keys."""
    names: set[str] = set()
    for op in registry.load_all().values():
        names.add(op.name)
        names.update(p.name for p in op.params())
        for tool in op.tools:
            names.add(tool.name)
            if tool.adapt is not None:
                names.update(inspect.signature(tool.adapt).parameters)
    for key in SCHEMA:
        names.update(key.split("."))
    for snap in (ROOT / "tests" / "snapshots").glob("list_tools.*.json"):
        names.update(re.findall(r'"(\w+)":', snap.read_text()))  # every property of every schema
    return frozenset(names)


@cache
def code_names() -> frozenset[str]:
    """exo's own function and class names that no user should meet: private ones, and ones with an
    underscore that are not also public names."""
    found: set[str] = set()
    for path in (ROOT / "exo_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
    return frozenset(n for n in found if not n.startswith("__") and (n.startswith("_") or "_" in n)
                     and n not in public_names())


def problems(text: str) -> list[str]:
    out = []
    if "``" in text:
        out.append("reST double backticks")
    if m := INTERNAL.search(text):
        out.append(f"internal wording {m.group(0)!r}")
    for name in dict.fromkeys(m.group(1) for m in code_names_re().finditer(text)):
        out.append(f"names exo's own function {name!r}")
    return out


@cache
def code_names_re() -> re.Pattern[str]:
    """One pattern for every name of ``code_names`` as a whole word (one pass per text, not one per name)."""
    names = sorted(code_names(), key=lambda n: (-len(n), n))
    return re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")


def test_the_checker_sees_what_it_forbids() -> None:
    assert problems("Run ``exo init``.") == ["reST double backticks"]
    assert problems("as se" + "ed 000 does")[0].startswith("internal wording")
    assert problems("see _resolve for details") == ["names exo's own function '_resolve'"]
    assert problems("calls rebase_onto_base first") == ["names exo's own function 'rebase_onto_base'"]
    assert problems("Run `exo init`; the spawn_workers tool takes specs; since_last and pr_number too.") == []


@pytest.mark.parametrize("path", sorted(command_paths()), ids=lambda p: p or "exo")
def test_command_help_reads_clean_and_has_examples(path: str, repo: Path) -> None:
    r = Exo(repo)(*path.split(), "--help")
    assert r.exit_code == 0, r.stderr
    assert problems(r.stdout) == [], f"exo {path} --help"
    lines = r.stdout.splitlines()
    assert "Examples:" in [x.strip() for x in lines], f"exo {path} --help has no Examples block"
    after = lines[[x.strip() for x in lines].index("Examples:") + 1:]
    assert after and after[0].strip().startswith("exo "), f"exo {path}: the examples must be exo commands"


def test_mcp_tool_descriptions_read_clean() -> None:
    for op in registry.load_all().values():
        for text in (op.doc, *op.help.values(), *(t.description or "" for t in op.tools),
                     *(h for t in op.tools for h in t.help.values())):
            assert problems(text) == [], f"{op.name}: {text[:80]}"
    for snap in sorted((ROOT / "tests" / "snapshots").glob("list_tools.*.json")):
        texts = list(_descriptions(json.loads(snap.read_text())))
        assert len(texts) > 20
        for text in texts:
            assert problems(text) == [], f"{snap.name}: {text[:80]}"


def _descriptions(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield value
            else:
                yield from _descriptions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _descriptions(value)


MAN = sorted((ROOT / "man").glob("*.1"))


@pytest.mark.parametrize("page", MAN, ids=lambda p: p.name)
def test_man_page_is_whole(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert problems(text.replace("\\-", "-").replace("\\e", "\\")) == [], page.name
    path = page.stem.removeprefix("exo").replace("-", " ").strip()
    cmd = command_paths()[path]
    summary = " ".join(inspect.cleandoc(cmd.help or "").split("\n\n")[0].split())
    lines = text.splitlines()
    name_line = lines[lines.index(".SH NAME") + 1]
    assert name_line == page.stem.replace("-", "\\-") + " \\- " + summary.replace("-", "\\-"), page.name
    assert not name_line.endswith("..."), page.name
    sections = [x[4:] for x in lines if x.startswith(".SH ")]
    for wanted in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"):
        assert wanted in sections, f"{page.name} has no {wanted} section"
    assert "\b" not in text, f"{page.name}: a raw \\b from the help"
    examples = text.split(".SH EXAMPLES\n", 1)[1].split(".SH ", 1)[0]
    assert ".nf" in examples and "\nexo" in examples


def test_every_visible_command_has_a_man_page() -> None:
    expected = {"exo" + ("-" + p.replace(" ", "-") if p else "") for p, c in command_paths().items() if not c.hidden}
    assert {p.stem for p in MAN} == expected


def test_exit_status_of_commands_with_their_own_rules() -> None:
    spawn = (ROOT / "man" / "exo-spawn.1").read_text()
    assert "0 when every task spawned" in spawn.split(".SH EXIT STATUS")[1].split(".SH")[0]
    hook = (ROOT / "man" / "exo-hook.1").read_text()
    assert "Always 0" in hook.split(".SH EXIT STATUS")[1]


def test_did_you_mean_for_typos(repo: Path) -> None:
    r = Exo(repo)("spwan")
    assert r.exit_code == 2
    assert "Error: No such command 'spwan'. Did you mean 'spawn'?" in r.stderr
    r = Exo(repo)("agnets")
    assert "Did you mean 'agents'?" in r.stderr
    r = Exo(repo)("pr", "lst")
    assert r.exit_code == 2 and "Did you mean 'list'?" in r.stderr
    r = Exo(repo)("zzzz")
    assert r.exit_code == 2 and "Did you mean" not in r.stderr
    r = Exo(repo)("spwan", "--json")
    assert r.exit_code == 2 and "Did you mean 'spawn'?" in r.json()["error"]["message"]  # type: ignore[index]


# --------------------------------------------------------------------------- words for each front end
#
# Help strings and docstrings are shared by `--help` and the MCP tool descriptions. They name an
# operation's own parameters as `{--since-last}`, which the command line shows as `--since-last` and
# a model as `since_last`; they say what happens in words, never the name of an exception class.

EXCEPTIONS = re.compile(r"\b(?:Raises|NotFound|InvalidInput|StateError|ExternalFailure|EnvironmentError|UsageError"
                        r"|ExoError)\b")
OTHER_PROGRAMS = ("git", "gh", "claude", "codex", "gemini", "zellij", "tmux", "bd", "process-compose", "pip", "pipx",
                  "uv", "python", "man")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _flags(cmd: click.Command) -> set[str]:
    ctx = click.Context(cmd)
    return {o for p in cmd.get_params(ctx) for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}


def _named_command(words: list[str]) -> click.Command | None:
    """The command `exo WORDS...` runs (the longest path of commands), or None."""
    paths = command_paths()
    found = None
    for n in range(len(words) + 1):
        if " ".join(words[:n]) in paths:
            found = paths[" ".join(words[:n])]
    return found


def unknown_flags(text: str, cmd: click.Command) -> list[str]:
    """The `--flags` a help text names that the command it speaks of does not have.

    A backtick span or an example line that starts with `exo ...` speaks of that command; one that
    starts with another program (git, gh, claude, ...) is that program's business; everything else
    speaks of ``cmd`` itself.
    """
    bad: list[str] = []
    text = text.split("\nCommands:\n")[0]  # a group's list of subcommands: their own pages check them
    segments = re.findall(r"`([^`]*)`", text)
    prose = re.sub(r"`[^`]*`", " ", text)
    lines = prose.splitlines()
    segments += [x.strip() for x in lines if x.strip().startswith("exo ")]
    prose = "\n".join(x for x in lines if not x.strip().startswith("exo "))
    for seg in segments:
        words = re.sub(r"'[^']*'|\"[^\"]*\"", "ARG", seg).split()  # a quoted argument is text, not flags
        if words and words[0] in OTHER_PROGRAMS:
            continue
        target = _named_command(words[1:]) if words and words[0] == "exo" else cmd
        flags = _flags(target or cli) | {"--help"}
        bad += [f for f in FLAG.findall(" ".join(words)) if f not in flags]
    bad += [f for f in FLAG.findall(prose) if f not in _flags(cmd) | {"--help"}]
    return bad


def cli_wording(path: str, text: str) -> list[str]:
    """What a command's `--help` must not say (see above)."""
    cmd = command_paths()[path]
    out = [f"names the exception {m}" for m in EXCEPTIONS.findall(text)]
    dests = {p.name for p in cmd.params if p.name and isinstance(p, click.Option)}
    for m in re.finditer(r"\bWith `?([a-z_]+)\b", text):
        if m.group(1) in dests:
            out.append(f"'With {m.group(1)}': name the flag")
    for d in dests:
        if "_" in d and re.search(r"(?<![-\w.{])" + d + r"\b", text):  # agent.skip_permissions is a key
            out.append(f"names the parameter {d}, not its flag")
    out += [f"names {f}, which exo {path} does not have" for f in unknown_flags(re.sub(r"\{--\w+\}", "", text), cmd)]
    if "{--" in text:
        out.append("an unrendered {--flag}")
    if re.search(r"\bTLs?\b", text):
        out.append("says TL (say team lead)")
    if re.search(r"\bx\s*[<>]=|\b(?:INTEGER|FLOAT) RANGE\b", text):
        out.append("shows Click's range")
    ctx = click.Context(cmd)
    for p in cmd.get_params(ctx):
        record = p.get_help_record(ctx) if isinstance(p, click.Option) else None
        if record and "[default:" in record[1] and "default" in record[1].split("[default:")[0].lower():
            out.append(f"{record[0]} states its default twice")
    return out


def test_the_wording_checker_sees_what_it_forbids() -> None:
    assert cli_wording("read", "With since_last, only new lines. NotFound for an unknown agent.") == [
        "names the exception NotFound", "'With since_last': name the flag", "names the parameter since_last, not its flag"]
    assert cli_wording("read", "Use --since-lost; the root TL reads it; a {--since_last} too.") == [
        "names --since-lost, which exo read does not have", "an unrendered {--flag}", "says TL (say team lead)"]
    assert cli_wording("read", "Polls until `--wait-for` matches, as `exo done --output` says; `git push -u` too.\n"
                       "Examples:\n  exo spawn --worker w1 --prompt x\n  exo spawn --nope") == [
        "names --nope, which exo read does not have"]
    assert cli_wording("read", "Lines  [default: 50; x>=1]") == ["shows Click's range"]


@pytest.mark.parametrize("path", sorted(command_paths()), ids=lambda p: p or "exo")
def test_help_names_flags_not_parameters_nor_exceptions(path: str, repo: Path) -> None:
    r = Exo(repo)(*path.split(), "--help")
    assert r.exit_code == 0, r.stderr
    assert cli_wording(path, r.stdout) == [], f"exo {path} --help"


def test_placeholders_name_parameters() -> None:
    """Every `{--param}` in an operation's texts is one of its parameters, and its command has that flag;
    no tool description names a flag where it takes an argument."""
    for op in registry.load_all().values():
        params = {p.name for p in op.params()}
        cmd = command_paths()[op.cli] if op.cli else None
        for text in (op.doc, *op.help.values(), *(t.description or "" for t in op.all_tools()),
                     *(h for t in op.all_tools() for h in t.help.values())):
            assert not EXCEPTIONS.search(text), f"{op.name} names an exception: {text[:80]}"
            assert not re.search(r"\bTLs?\b", text), f"{op.name} says TL: {text[:80]}"
            for name in re.findall(registry.PLACEHOLDER, text):
                assert name in params, f"{op.name}: {{--{name}}} names no parameter of it"
                if cmd is not None:
                    assert op.cli_flag(name) in _flags(cmd), f"exo {op.cli} has no {op.cli_flag(name)} (declare flags=)"
    for snap in sorted((ROOT / "tests" / "snapshots").glob("list_tools.*.json")):
        for tool in json.loads(snap.read_text())["tools"]:
            args = set(tool["inputSchema"].get("properties", {}))
            for text in _descriptions(tool):
                assert "{--" not in text and not EXCEPTIONS.search(text), f"{tool['name']}: {text[:80]}"
                assert not re.search(r"\bTLs?\b", text), f"{tool['name']} says TL: {text[:80]}"
                flags = {f[2:].replace("-", "_") for f in FLAG.findall(re.sub(r"`[^`]*`", "", text))}
                assert not flags & args, f"{tool['name']} names flags for its arguments {flags & args}: {text[:80]}"


def test_each_front_end_renders_a_parameter_its_way() -> None:
    op = registry.get("beads_list")
    text = "closed ones only with {--show_all} or {--status}"
    assert op.cli_text(text) == "closed ones only with --all or --status"
    assert op.tool_text(text) == "closed ones only with `show_all` or `status`"
    read = registry.get("read")
    assert (read.cli_text("With {--since_last}, new lines."), read.tool_text("With {--since_last}, new lines.")) == (
        "With --since-last, new lines.", "With `since_last`, new lines.")
    wait = registry.get("wait")
    assert wait.tool_text("at most {--max_messages}", wait.tools[0]) == "at most `max`"  # the tool's own name for it
    assert not any("`{--" in text for op in registry.load_all().values() for text in (op.doc, *op.help.values())), \
        "write {--param} bare: each front end decides how it looks"
