"""Answers of every shape from another host: none ends exo with exit 70 (a bug), each names the host.

Host b's ``exo`` is a fake: a real program at the other end of the real ssh (the private sshd
of ``tests/hosts_harness.py``), configured as ``[hosts.b] exo``, that logs the request it gets
and prints whatever the test puts in its answer file. Every operation that asks another host
(``read``, ``status AGENT``, ``diff``, ``kill``, ``complete``, ``spawn --host``, ``hosts``,
``doctor --hosts``, ``agents`` (refresh), ``send`` (delivery), ``reap``, ``kill`` of a parent
whose child runs on b, the fetch after a merge) meets every shape: a string, null, a list, a
result of the wrong kind, missing fields, numbers where text is expected, extra fields, error
objects no exo sends (data carrying ``self``, named ``ExoError``, unknown class, wrong code),
NaN, numbers out of range, nesting past the parser's limit, bytes that are not UTF-8, no
output, and more output than exo reads.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import HOST_NAME, TwoHosts

from conftest import Exo

HUGE = "HUGE"  # the fake prints 20 MiB for this answer (exo reads at most 16)


def field_names(cls: type) -> list[str]:
    """The fields of a result class: a dataclass's, or a record's (NamedTuple: the hot paths' results)."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(cls._fields)  # type: ignore[attr-defined]


def _fields() -> dict[str, int]:
    """Every field name of every result class a host answers with, each given a number."""
    from exo_cli.ops.complete import CompleteResult
    from exo_cli.ops.diff import DiffResult
    from exo_cli.ops.hosts import Hello
    from exo_cli.ops.lifecycle import KillResult, ReadManyResult, ReadResult, ReapResult
    from exo_cli.ops.spawn.result import SpawnResult
    from exo_cli.ops.status import StatusResult
    from exo_cli.records import Agent

    names: dict[str, int] = {}
    for cls in (CompleteResult, DiffResult, Hello, KillResult, ReadManyResult, ReadResult, ReapResult, SpawnResult,
                StatusResult):
        names.update({name: 7 for name in field_names(cls)})
    names.update({f: 7 for f in Agent._fields})
    return names


NUMBERS = _fields()
SHAPES: dict[str, tuple[bytes | str, int]] = {  # name -> (what the fake prints, its exit status)
    "string": ('"an answer"', 0),
    "null": ("null", 0),
    "list": ("[1, 2]", 0),
    "result string": ('{"ok": true, "result": "an answer"}', 0),
    "result null": ('{"ok": true, "result": null}', 0),
    "result list": ('{"ok": true, "result": [1, 2]}', 0),
    "result missing fields": ('{"ok": true, "result": {}}', 0),
    "result numbers for text": (json.dumps({"ok": True, "result": NUMBERS}), 0),
    "result list of numbers for text": (json.dumps({"ok": True, "result": [NUMBERS]}), 0),
    "result extra fields only": ('{"ok": true, "result": {"surprise": {"deep": [1, {"x": null}]}}}', 0),
    "envelope extra fields": ('{"ok": true, "result": {}, "also": 1}', 0),
    "ok not a boolean": ('{"ok": "yes", "result": {}}', 0),
    "no ok": ('{"result": {}}', 0),
    "error a string": ('{"ok": false, "error": "it broke"}', 5),
    "error missing": ('{"ok": false}', 5),
    "error data self": ('{"ok": false, "error": {"code": -32004, "name": "StateError", "message": "busy",'
                        ' "hint": null, "data": {"self": 1, "agent": "w1"}}}', 5),
    "error data message": ('{"ok": false, "error": {"code": -32004, "name": "StateError", "message": "busy",'
                           ' "hint": null, "data": {"message": 2, "hint": 3}}}', 5),
    "error named ExoError": ('{"ok": false, "error": {"code": -32603, "name": "ExoError", "message": "bug there",'
                             ' "hint": null, "data": {}}}', 70),
    "error unknown class": ('{"ok": false, "error": {"code": -32004, "name": "Bogus", "message": "x", "hint": null,'
                            ' "data": {}}}', 5),
    "error wrong code": ('{"ok": false, "error": {"code": 1, "name": "NotFound", "message": "x", "hint": null,'
                         ' "data": {}}}', 3),
    "error message a number": ('{"ok": false, "error": {"code": -32001, "name": "NotFound", "message": 5,'
                               ' "hint": null, "data": {}}}', 3),
    "error data a list": ('{"ok": false, "error": {"code": -32001, "name": "NotFound", "message": "x",'
                          ' "hint": null, "data": [1]}}', 3),
    "NaN": ('{"ok": true, "result": {"text": NaN, "age_seconds": NaN}}', 0),
    "float out of range": ('{"ok": true, "result": {"turns": 1e400}}', 0),
    "integer out of range": ('{"ok": true, "result": {"turns": 1' + "0" * 30 + "}}", 0),
    "nested too deep": ('{"ok": true, "result": ' + "[" * 100_000 + "]" * 100_000 + "}", 0),
    "not UTF-8": (b'\xff\xfe{"ok": true}\n{"ok": true, "result": "\xff\xfe\xc3"}', 0),
    "nothing": ("", 0),
    "nothing, failing": ("", 70),
    "huge": (HUGE, 0),
}
# A well-formed error of exo's own comes back as itself (its class and exit code), naming the host.
CONTROL = ('{"ok": false, "error": {"code": -32001, "name": "NotFound", "message": "no agent w1 here",'
           ' "hint": null, "data": {"agent": "w1"}}}', 3)


class Fake:
    """Host b's exo: logs each request and answers ``answer`` with exit status ``status``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.program = root / "fake-exo"
        self.program.write_text(
            "#!/bin/sh\n"
            f"cd {root}\n"
            "IFS= read -r line\n"
            "printf '%s\\n' \"$line\" >> requests\n"
            f"if [ \"$(cat answer)\" = {HUGE} ]; then head -c 20971520 /dev/zero | tr '\\0' '{{'; else cat answer; fi\n"
            "exit \"$(cat status)\"\n")
        self.program.chmod(0o755)
        self.answer(*CONTROL)

    def answer(self, text: bytes | str, status: int) -> None:
        (self.root / "answer").write_bytes(text if isinstance(text, bytes) else text.encode())
        (self.root / "status").write_text(f"{status}\n")
        (self.root / "requests").write_text("")

    def requests(self) -> list[str]:
        return [json.loads(ln).get("op") or next(iter(json.loads(ln).get("args") or {"?": 0}))
                for ln in (self.root / "requests").read_text().splitlines() if ln.strip()]


@pytest.fixture
def fake(two_hosts: TwoHosts, tmp_path: Path) -> Fake:
    """Host b's exo is the fake; the shared store records agents on b (w1 live, d1 dead) and a lead here."""
    from hosts_harness import _write_toml

    from exo_cli.env import Env
    from exo_cli.records import Agent

    f = Fake(tmp_path / "fake")
    _write_toml(two_hosts.a_config, {"hosts": {HOST_NAME: {"exo": str(f.program)}}})
    env = Env(cwd=two_hosts.a)
    here = env.host_name
    wt = str(two_hosts.b / ".exo" / "worktrees")
    env.store.insert_agent(Agent(id="tl", name="tl", role="tl", parent=None, status="idle", backend="demo",
                                 mux="headless", branch="main", spec={"host": here}))
    for agent_id, status in (("w1", "idle"), ("d1", "dead")):
        env.store.insert_agent(Agent(
            id=agent_id, name=agent_id, role="dev", parent="tl", status=status, backend="demo", mux="tmux",
            worktree=f"{wt}/{agent_id}", branch=f"main.{agent_id}", base_branch="main",
            location={"mux": "tmux", "pane": "%1", "session": "exo", "window": agent_id},
            spec={"host": HOST_NAME, "base_ref": "refs/remotes/origin/main", "worktree_created": True}))
    return f


def _json(res: Any) -> Any:
    try:
        return json.loads(res.stdout)
    except ValueError:
        return None


def _names_b(err: dict[str, Any]) -> bool:
    return err.get("data", {}).get("host") == HOST_NAME and f"host {HOST_NAME}" in err.get("message", "")


def _raises(*args: str) -> Any:
    """An operation that fails with the host's error: ExternalFailure (6) naming the host."""

    def check(exo: Exo, control: bool) -> str | None:
        res = exo(*args, "--json")
        err = (_json(res) or {}).get("error") or {}
        want = (3, "NotFound") if control else (6, "ExternalFailure")
        if (res.exit_code, err.get("name")) != want or not _names_b(err):
            return f"exit {res.exit_code} {err.get('name')}: {res.stdout[-300:]}{res.stderr[-300:]}"
        return None

    return check


def _hosts(exo: Exo, control: bool) -> str | None:
    res = exo("hosts", "--json")
    data = _json(res) or {}
    [view] = data.get("hosts") or [{}]
    if res.exit_code != 0 or not view.get("reachable") or f"host {HOST_NAME}" not in (view.get("error") or ""):
        return f"exit {res.exit_code}: {res.stdout[-300:]}{res.stderr[-300:]}"
    return None


def _doctor(exo: Exo, control: bool) -> str | None:
    res = exo("doctor", "--hosts", "--dry-run", "--json")
    data = _json(res) or {}
    if res.exit_code != 5 or not any(p.get("kind") == "host" for p in data.get("problems", [])):
        return f"exit {res.exit_code}: {res.stdout[-300:]}{res.stderr[-300:]}"
    return None


def _agents(exo: Exo, control: bool) -> str | None:
    res = exo("agents", "--json")
    data = _json(res) or {}
    w1 = [a for a in data.get("agents", []) if a.get("id") == "w1"]
    if res.exit_code != 0 or not w1 or w1[0]["status"] != "idle" or w1[0]["host"] != HOST_NAME:
        return f"exit {res.exit_code}: {res.stdout[-300:]}{res.stderr[-300:]}"  # shown as recorded
    return None


def _send(exo: Exo, control: bool) -> str | None:
    res = exo("send", "w1", "hello", "--json")
    data = _json(res) or {}
    if res.exit_code != 0 or [s.get("delivery") for s in data.get("sent", [])] != ["queued"]:
        return f"exit {res.exit_code}: {res.stdout[-300:]}{res.stderr[-300:]}"  # stored; its hooks hand it over
    return None


def _reap(exo: Exo, control: bool) -> str | None:
    res = exo("reap", "--json")
    data = _json(res) or {}
    if res.exit_code != 0 or data.get("unreached") != ["d1"]:
        return f"exit {res.exit_code}: {res.stdout[-300:]}{res.stderr[-300:]}"
    return None


def _kill_parent(exo: Exo, control: bool) -> str | None:
    res = exo("kill", "tl", "--json")
    data = _json(res) or {}
    said = " ".join(data.get("warnings", []))
    if res.exit_code != 0 or "w1" not in said or f"host {HOST_NAME}" not in said:
        return f"exit {res.exit_code}: {res.stdout[-300:]}{res.stderr[-300:]}"
    return None


def _fetch_after_merge(exo: Exo, control: bool) -> str | None:
    from exo_cli.env import Env
    from exo_cli.errors import ExoError
    from exo_cli.ops.remote import fetch_bases_there

    env = Env(cwd=exo.cwd)
    try:
        got = fetch_bases_there(env, [env.store.agent("w1")])  # type: ignore[list-item]
    except ExoError as exc:
        return f"raised {exc!r}"
    if len(got) != 1 or f"host {HOST_NAME}" not in got[0]:
        return f"warnings {got!r}"
    return None


OPERATIONS = {
    "read": (_raises("read", "w1"), "read"),
    "status": (_raises("status", "w1"), "status"),
    "diff": (_raises("diff", "w1"), "diff"),
    "kill": (_raises("kill", "w1"), "kill"),
    "complete": (_raises("complete", "w1"), "complete"),
    "spawn": (_raises("spawn", "--host", HOST_NAME, "--worker", "w9", "--prompt", "p", "--agent", "demo"), "spawn"),
    "hosts": (_hosts, "hello"),
    "doctor": (_doctor, "hello"),
    "agents": (_agents, "refresh"),
    "send": (_send, "deliver"),
    "reap": (_reap, "reap"),
    "kill parent": (_kill_parent, "kill"),
    "fetch after merge": (_fetch_after_merge, "fetch_base"),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_answer_from_another_host_is_read_or_refused_naming_it(fake: Fake, exo: Exo, operation: str) -> None:
    """Every shape on the first operation; on each other one, a sixth of them, in turn (the answers are read by
    one decoder, so every shape meets several operations and every operation meets each kind of shape)."""
    check, asked = OPERATIONS[operation]
    problems = []
    index = list(OPERATIONS).index(operation)
    shapes = list(SHAPES.items()) if index == 0 else list(SHAPES.items())[(index - 1) % 6::6]
    for shape, (text, status) in [("a well-formed NotFound", CONTROL), *shapes]:
        fake.answer(text, status)
        why = check(exo, shape == "a well-formed NotFound")
        if why is not None:
            problems.append(f"{shape}: {why}")
        elif asked not in fake.requests():  # the call really went to host b
            problems.append(f"{shape}: host b was never asked ({fake.requests()})")
    assert problems == [], "\n".join(problems)


def test_every_result_class_a_host_answers_with_can_be_checked_and_built() -> None:
    """The decoder knows every annotation of every result that crosses the wire (no silent pass-through)."""
    from exo_cli import registry
    from exo_cli.ops.hosts import Hello
    from exo_cli.records import Agent, to_jsonable
    from exo_cli.schema import type_schema
    from exo_cli.wire import Unreadable, decode

    types = [registry.get(op.name).result_type() for op in registry.OPS.values() if op.on_host] + [
        registry.get("spawn").result_type(), registry.get("reap").result_type(), list[Agent], list[str], str, Hello]
    for tp in types:
        type_schema(tp, output=True)  # raises for an annotation it cannot describe
        with pytest.raises(Unreadable):
            decode(tp, {"surprise": 1} if typing.get_origin(tp) is not list else [{"surprise": 1}])
    agent = Agent(id="w1", name="w1", role="dev", parent=None, status="idle", backend="demo", mux="tmux")
    assert decode(list[Agent], json.loads(json.dumps(to_jsonable([agent])))) == [agent]
