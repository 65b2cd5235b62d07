"""Shell completion: dynamic values (agents, PRs, beads, configuration keys), the fast path a TAB
takes and its parity with Click's own completion, and `exo completion --install`.

A TAB runs `exo` with Click's protocol: `_EXO_COMPLETE=<shell>_complete`, `COMP_WORDS` (the
words typed) and `COMP_CWORD` (the index of the word being completed; fish passes the word).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.shell_completion import BashComplete

from conftest import ROOT, Exo
from exo_cli.commands import COMMANDS
from exo_cli.commands._complete import GROUPS, SPECS, answer
from exo_cli.env import Env
from exo_cli.main import cli
from exo_cli.ops import completion as kinds
from exo_cli.records import ASKING, DEAD, DONE, IDLE, REMOVAL_DEFERRED, RETIRED_SEP, WORKING, Agent

NAMES = ["alpha", "beta", "bob", "carol", "dora", "eve"]


def _agent(env: Env, name: str, status: str, task: str, reason: str | None = None, *, id: str | None = None) -> None:
    now = time.time()
    env.store.insert_agent(Agent(id=id or name, name=name, role="dev", parent="root", status=status, backend="custom",
                                 mux="headless", task=task, created_at=now, updated_at=now, status_at=now,
                                 status_reason=reason))


@pytest.fixture
def team(repo: Path) -> Path:
    """A repository with exo state: six agents (one dead, one completed, one that completed itself and
    waits for its parent to remove its worktree), two reaped ones, a pending question from carol and an
    answered one from beta, three PRs (two open), and a beads tracker."""
    env = Env(cwd=repo)
    for name, status in zip(NAMES, [WORKING, IDLE, DEAD, ASKING, DONE, DONE], strict=True):
        _agent(env, name, status, f"task of {name}", {"dora": "completed", "eve": REMOVAL_DEFERRED}.get(name))
    for name in ("alpha", "wendy"):  # reaped, kept as history under <name>@<n>
        _agent(env, name, DONE, f"old task of {name}", id=f"{name}-old")
        env.store.retire_agent(f"{name}-old", f"{name}{RETIRED_SEP}1")
    env.store.post("question", "carol", "root", "Which port?", state="pending")
    env.store.post("question", "beta", "root", "Which branch?", state="answered")
    for title, state in (("Add a", "open"), ("Fix b", "merged"), ("Docs: c", "open")):
        env.store.insert_pr(forge="local", title=title, body="", head=f"main.{title[:3]}", base="main",
                            author="alpha", state=state)
    shutil.copytree(ROOT / "tests" / "fixtures" / "beads" / "small", repo / ".beads")
    return repo


def tab(cwd: Path, line: str, shell: str = "bash") -> list[str]:
    """What exo answers the shell for a TAB at the end of ``line`` (a real process)."""
    words = line.split()
    cword = len(words) - (0 if line.endswith(" ") else 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_EXO_COMPLETE": f"{shell}_complete", "COMP_WORDS": line,
           "COMP_CWORD": str(cword) if shell != "fish" else ("" if line.endswith(" ") else words[-1])}
    proc = subprocess.run([sys.executable, "-m", "exo_cli"], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


# -- what a TAB offers ------------------------------------------------------------------------------


def test_each_command_offers_the_agents_it_can_act_on(team: Path) -> None:
    # every agent not reaped, dead and done ones too: their pane, log, diff and output can be visited
    for command in ("attach", "read", "output", "diff", "status", "wait", "conflicts"):
        assert tab(team, f"exo {command} ") == [f"plain,{n}" for n in NAMES], command
        assert tab(team, f"exo {command} b") == ["plain,beta", "plain,bob"], command
        assert tab(team, f"exo {command} w") == [], command  # wendy was reaped
    assert tab(team, "exo read alpha c") == ["plain,carol"]
    assert tab(team, "exo spawn --worker w --after a") == ["plain,alpha"]
    # live agents only: no dead or done one to stop or to message
    assert tab(team, "exo kill ") == ["plain,alpha", "plain,beta", "plain,carol"]
    assert tab(team, "exo send alpha,b") == ["plain,alpha,beta"]
    assert tab(team, "exo send alpha,beta,") == ["plain,alpha,beta,carol"]
    assert tab(team, "exo send d") == []
    # a pending question only (beta's was answered)
    assert tab(team, "exo answer ") == ["plain,carol"]
    assert tab(team, "exo answer carol ") == []  # the message is free text
    # not done (eve completed itself: its removal waits for `exo complete eve`), then the open beads
    assert tab(team, "exo complete b") == ["plain,beta", "plain,bob", "plain,b1"]  # and the open bead ex-b1
    assert tab(team, "exo complete ")[:5] == ["plain,alpha", "plain,beta", "plain,bob", "plain,carol", "plain,eve"]
    assert tab(team, "exo complete d") == []


def test_a_reaped_agent_is_no_longer_offered(team: Path) -> None:
    """`exo reap` retires bob (dead) and dora (done): a TAB no longer offers them, and what it offers works."""
    assert "plain,bob" in tab(team, "exo attach ")
    r = Exo(team)("reap", "--json")
    assert r.exit_code == 0, r.stderr
    assert sorted(r.json()["reaped"]) == ["bob", "dora", "eve"]  # type: ignore[index]
    assert tab(team, "exo attach ") == ["plain,alpha", "plain,beta", "plain,carol"]
    for line in tab(team, "exo output "):
        r = Exo(team)("output", line.split(",", 1)[1], "--json")
        assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
def test_agents_and_prs_on_either_store(repo: Path, store_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL, a TAB reads the store the state folder points to (no EXO_STORE_URL needed)."""
    env = Env(cwd=repo)
    _agent(env, "ada", WORKING, "task of ada")
    _agent(env, "abe", DEAD, "task of abe")
    _agent(env, "ada", DONE, "old task", id="old")
    env.store.retire_agent("old", f"ada{RETIRED_SEP}1")
    env.store.post("question", "abe", "root", "Which port?", state="pending")
    env.store.insert_pr(forge="local", title="Add a", body="", head="main.a", base="main", author="ada", state="open")
    env.store.insert_pr(forge="local", title="Fix b", body="", head="main.b", base="main", author="ada",
                        state="merged")
    monkeypatch.delenv("EXO_STORE_URL", raising=False)  # the shell of a user who never set it
    assert tab(repo, "exo attach a") == ["plain,abe", "plain,ada"]
    assert tab(repo, "exo kill a") == ["plain,ada"]
    assert tab(repo, "exo answer ") == ["plain,abe"]
    assert tab(repo, "exo pr merge ") == ["plain,1"]
    assert tab(repo, "exo pr show ") == ["plain,1", "plain,2"]
    assert (env.state_path / "state.db").exists() == (store_kind == "sqlite")


def test_an_unreachable_postgresql_store_offers_nothing(repo: Path) -> None:
    state = repo / ".git" / "exo"
    state.mkdir()
    (state / "store-url").write_text("postgresql://nobody@127.0.0.1:9/none\n")  # nothing listens on port 9
    assert tab(repo, "exo attach ") == []
    assert tab(repo, "exo pr show ") == []
    assert sorted(p.name for p in state.iterdir()) == ["store-url"]


def test_descriptions_for_zsh_and_fish(team: Path) -> None:
    assert tab(team, "exo kill al", "zsh") == ["plain", "alpha", "working dev: task of alpha"]
    assert tab(team, "exo kill al", "fish") == ["plain,alpha\tworking dev: task of alpha"]
    assert tab(team, "exo pr show ", "zsh") == ["plain", "1", "open: Add a", "plain", "2", "merged: Fix b",
                                                "plain", "3", "open: Docs: c"]


def test_pr_numbers_bead_ids_and_config_keys(team: Path) -> None:
    assert tab(team, "exo pr merge ") == ["plain,1", "plain,3"]  # open ones only
    assert tab(team, "exo pr show ") == ["plain,1", "plain,2", "plain,3"]
    ready = tab(team, "exo spawn ")
    assert ready and all(x.startswith("plain,ex-") for x in ready)
    assert "plain,ex-a4" not in ready  # blocked by ex-a3 in the fixture
    assert tab(team, "exo spawn a1") == ["plain,a1"]  # the short form, as typed
    shown = tab(team, "exo beads show ex-")
    assert set(ready) < set(shown)
    assert tab(team, "exo config mux.") == ["plain,mux.default"]
    assert tab(team, "exo config agent.default limits.m") == ["plain,limits.max_agents", "plain,limits.max_depth"]
    assert "plain,status" in tab(team, "exo s")
    assert tab(team, "exo -C . kill c") == ["plain,carol"]


def test_no_state_no_repo_nothing_printed_nothing_written(repo: Path, tmp_path: Path) -> None:
    before = sorted(str(p) for p in repo.rglob("*"))
    for line in ("exo attach ", "exo pr merge ", "exo complete ", "exo send a,", "exo spawn --after "):
        assert tab(repo, line) == [], line
    assert sorted(str(p) for p in repo.rglob("*")) == before
    assert not (repo / ".git" / "exo").exists()
    outside = tmp_path / "nowhere"
    outside.mkdir()
    assert tab(outside, "exo kill ") == []
    assert list(outside.iterdir()) == []


PROBE = """
import sys, json
from exo_cli.main import main
try:
    main([])
except SystemExit:
    pass
sys.stderr.write('\\nMODULES=' + json.dumps(sorted(sys.modules)) + '\\n')
"""


def test_a_tab_loads_no_command_module_and_nothing_heavy(team: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_EXO_COMPLETE": "bash_complete", "COMP_WORDS": "exo attach a",
           "COMP_CWORD": "2"}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=team, env=env, capture_output=True, text=True)
    assert proc.stdout.split() == ["plain,alpha"]
    modules = json.loads(proc.stderr.rsplit("MODULES=", 1)[1])
    heavy = [m for m in modules if m.split(".")[0] in ("mcp", "rich", "git", "yaml", "tomli_w", "pydantic", "psutil")
             or m.startswith(("exo_cli.ops.spawn", "exo_cli.commands.lifecycle", "exo_cli.registry"))
             or m in ("exo_cli.env", "exo_cli.records", "exo_cli.adapters.git", "exo_cli.adapters.store.sqlite")]
    assert heavy == []


def test_the_copies_a_tab_keeps_match_their_sources() -> None:
    from exo_cli import records
    from exo_cli.adapters import store
    from exo_cli.adapters.store import peek
    from exo_cli.env import STATE_DIR_VAR
    from exo_cli.ops import delivery

    assert kinds.STATE_DIR_VAR == STATE_DIR_VAR
    assert (kinds.RETIRED_SEP, kinds.REMOVAL_DEFERRED) == (records.RETIRED_SEP, records.REMOVAL_DEFERRED)
    statuses = {v for k, v in vars(records).items() if k.isupper() and isinstance(v, str) and v in
                (*records.LIVE_STATUSES, records.DONE, records.DEAD)}
    assert statuses - set(records.LIVE_STATUSES) == {kinds.DONE, kinds.DEAD}  # every other status is live
    assert (peek.DB_FILE, peek.POINTER_FILE) == (store.DB_FILE, store.POINTER_FILE)
    assert (peek.QUESTION, peek.PENDING) == (delivery.QUESTION, delivery.PENDING)


# -- the fast path and Click agree --------------------------------------------------------------------


LINES = ["", "s", "sta", "attach ", "attach b", "read --lines 3 ", "read ", "kill x", "wait alpha ", "status ",
         "output c", "answer ", "answer alpha ", "send ", "send alpha,", "complete ", "complete ex-a", "spawn ",
         "spawn --after ", "spawn ex-a1 ", "pr merge ", "pr show 2", "beads show ", "config ", "config agent.",
         "pr ", "beads ", "attach alpha ", "init ", "-C . attach "]
CLICK_DECIDES = {"read --lines 3 ", "pr ", "beads ", "init "}  # an option before, a group's subcommands, no table entry


@pytest.mark.parametrize("line", LINES)
def test_fast_path_answers_as_click_does(team: Path, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(team)
    words = line.split()
    args, incomplete = (words, "") if line.endswith(" ") or not line else (words[:-1], words[-1])
    fast = answer(args, incomplete)
    slow = [(i.value, i.help or "") for i in BashComplete(cli, {}, "exo", "_EXO_COMPLETE").get_completions(args, incomplete)
            if i.type == "plain"]
    assert (fast is None) == (line in CLICK_DECIDES)
    if fast is not None:
        assert [(v, h or "") for v, h in fast[1]] == slow


def _positionals(cmd: click.Command) -> list[click.Argument]:
    return [p for p in cmd.params if isinstance(p, click.Argument)]


def _kind(param: click.Parameter) -> str | None:
    fn = getattr(param, "_custom_shell_complete", None)
    return getattr(fn, "kind", None) if fn is not None else None


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    out: dict[str, click.Command] = {}
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out.update({f"{name} {sub}": c for sub, c in cmd.commands.items()})
        else:
            out[name] = cmd
    return out


def test_the_fast_table_matches_the_click_commands() -> None:
    commands = _commands()
    ctx = click.Context(cli)
    assert set(GROUPS) == {n for n in COMMANDS if isinstance(cli.get_command(ctx, n), click.Group)}
    for path, cmd in commands.items():
        args = [_kind(p) for p in _positionals(cmd)]
        options = {o: _kind(p) for p in cmd.params if isinstance(p, click.Option) and _kind(p) for o in p.opts}
        spec = SPECS.get(path)
        if spec is None:
            assert not any(args) and not options, f"exo {path} completes values: add it to SPECS"
            continue
        assert tuple(args) == spec.args, path
        assert spec.repeat == bool(_positionals(cmd) and _positionals(cmd)[-1].nargs == -1), path
        assert options == dict(spec.options), path
    assert set(SPECS) <= set(commands)
    assert {k for s in SPECS.values() for k in (*s.args, *s.options.values()) if k} <= set(kinds.KINDS)
