"""`exo read` / read_from_agent of several agents in one call (one tmux call), and `clean`."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Exo, git, stop_repo_agents, wait_for, write_trusted
from exo_cli import registry
from exo_cli.adapters.mux import Location
from exo_cli.adapters.mux.tmux import Tmux
from exo_cli.env import Env
from exo_cli.errors import NotFound
from exo_cli.ops.lifecycle import ReadManyResult, ReadResult, clean_screen

tmux_only = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

PRINTER = r"""
import os, sys, time
name = os.environ["EXO_AGENT"]
sys.stdout.write("\x1b[1;31m" + name + " says hello\x1b[0m\n")
sys.stdout.write("\u256d\u2500\u2500\u2500\u256e\n\u2502 > box of " + name + " \u2502\n\u2570\u2500\u2500\u2500\u256f\n")
sys.stdout.write("\x1b]0;title\x07^[[200~pasted " + name + "^[[201~\n\n\n\nready " + name + "\n")
sys.stdout.flush()
time.sleep(600)
"""


@pytest.fixture
def printers(repo: Path, tmp_path: Path) -> Iterator[Path]:
    prog = tmp_path / "printer.py"
    prog.write_text(PRINTER)
    write_trusted(repo, f'[agent]\ndefault = "custom"\ncommand = [{json.dumps(sys.executable)}, '
                                   f'{json.dumps(str(prog))}]\n')
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-q", "-m", "printers")
    yield repo
    stop_repo_agents(repo)


def _spawn(repo: Path, mux: str, *names: str) -> None:
    args = [x for n in names for x in ("--worker", n)]
    r = Exo(repo)("spawn", *args, "--prompt", "print", "--mux", mux, "--json")
    assert r.exit_code == 0, r.stdout
    for n in names:
        wait_for(lambda n=n: f"ready {n}" in Exo(repo)("read", n, "--json").stdout, 30, f"{n} printed")


@tmux_only
def test_several_agents_in_one_tmux_call(printers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _spawn(printers, "tmux", "p1", "p2", "p3")
    calls: list[tuple[str, ...]] = []
    real = Tmux._exec

    def counting(self: Tmux, *args: str, **kw: object) -> object:
        calls.append(args)
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Tmux, "_exec", counting)
    result = registry.invoke("read", Env(cwd=printers), agent=["p3", "p1", "p2"], lines=20)
    assert isinstance(result, ReadManyResult)
    assert [r.agent for r in result.results] == ["p3", "p1", "p2"]
    for r in result.results:
        assert f"{r.agent} says hello" in r.text and f"ready {r.agent}" in r.text
        assert "p1" not in r.text if r.agent != "p1" else True
    assert len(calls) == 1, calls  # one tmux call for the three panes
    single = registry.invoke("read", Env(cwd=printers), agent="p2", lines=20)
    assert isinstance(single, ReadResult) and single.text == result.results[2].text
    # the CLI: one agent keeps its object, several give one result each; --wait-for must match in every one
    r = Exo(printers)("read", "p1", "p2", "--wait-for", "ready p1", "--timeout", "0", "--json")
    assert r.exit_code == 5, r.stdout
    matched = [x["matched"] for x in json.loads(r.stdout)["results"]]
    assert matched == [True, False]
    r = Exo(printers)("read", "p1", "p1", "--json")
    assert r.exit_code == 4 and "twice" in json.loads(r.stdout)["error"]["message"]


@tmux_only
def test_capture_many_refuses_a_gone_or_reused_pane(tmp_path: Path) -> None:
    t = Tmux(f"exo-test-{uuid.uuid4().hex[:10]}", "exotest", runtime_dir=tmp_path / "rt")
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        locs = [t.start(f"w{i}", [sys.executable, "-c", f"print('pane {i}'); import time; time.sleep(60)"],
                        cwd=tmp_path, env=env) for i in range(3)]
        for i, loc in enumerate(locs):
            wait_for(lambda loc=loc, i=i: f"pane {i}" in t.capture(loc, 5), 15, "pane output")
        texts = t.capture_many(locs, 5)
        assert texts == [t.capture(loc, 5) for loc in locs]
        other = Location(**{**locs[1].to_dict(), "pid": 1})
        with pytest.raises(NotFound, match=locs[1].pane or ""):
            t.capture_many([locs[0], other], 5)
        gone = Location(**{**locs[2].to_dict(), "pane": "%9999"})
        with pytest.raises(NotFound, match="%9999"):
            t.capture_many([locs[0], gone], 5)
    finally:
        t.kill_server()


def test_clean_drops_escapes_paste_markers_and_chrome(printers: Path) -> None:
    _spawn(printers, "headless", "h1")
    raw = json.loads(Exo(printers)("read", "h1", "--json").stdout)["text"]
    assert "\x1b[1;31m" in raw and "\u256d" in raw  # a headless agent's log is what it wrote
    r = Exo(printers)("read", "h1", "--clean", "--json")
    assert r.exit_code == 0
    text = json.loads(r.stdout)["text"]
    assert text == clean_screen(raw)
    assert "h1 says hello\n> box of h1\npasted h1\n\nready h1\n" in text
    assert not any(c in text for c in "\x1b\x07\u256d\u2500\u2502") and "[200~" not in text and "\n\n\n" not in text
