"""Usage per agent, turn, model and kind from each CLI's own record, prices, and `exo cost` (both stores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_messages_helpers import env_for, hook_json, make_agent, run_exo_as, run_hook

from conftest import run_exo
from exo_cli.prices import DEFAULTS
from exo_cli.records import Usage


def _jsonl(path: Path, *objs: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for obj in objs:
            fh.write(json.dumps(obj) + "\n")


# One turn's records as each pinned CLI writes them (shapes copied from the files the e2e runs leave).
def _claude(mid: str, model: str, i: int, o: int, w: int, r: int) -> list[dict[str, Any]]:
    usage = {"input_tokens": i, "output_tokens": o, "cache_creation_input_tokens": w, "cache_read_input_tokens": r}
    first = {"type": "assistant", "message": {"id": mid, "model": model, "usage": {**usage, "output_tokens": 1}}}
    return [first, {"type": "assistant", "message": {"id": mid, "model": model, "usage": usage}}]  # one per block


def _gemini(mid: str, model: str, i: int, o: int, cached: int, thoughts: int) -> list[dict[str, Any]]:
    msg = {"id": mid, "type": "gemini", "content": "ok", "model": model}
    tokens = {"input": i + cached, "output": o, "cached": cached, "thoughts": thoughts, "tool": 0,
              "total": i + cached + o + thoughts}
    return [msg, {**msg, "tokens": tokens}, {**msg, "tokens": tokens, "toolCalls": []}]  # written again: counted once


def _codex(rid: str, model: str, i: int, o: int, w: int, r: int) -> list[dict[str, Any]]:
    usage = {"input_tokens": i + w + r, "cached_input_tokens": r, "cache_write_input_tokens": w, "output_tokens": o,
             "reasoning_output_tokens": 0, "total_tokens": i + w + r + o}
    return [{"type": "turn_context", "payload": {"turn_id": "t", "model": model}},
            {"type": "token_usage_record", "payload": {"response_id": rid, "usage": usage, "turn_token_usage": usage}},
            {"type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": usage}}}]


MODELS = {"claude": "claude-sonnet-4-5-20250929", "gemini": "gemini-2.5-pro", "codex": "gpt-5-codex"}
STOP = {"claude": {"hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "ok"},
        "gemini": {"hook_event_name": "AfterAgent", "prompt_response": "ok", "stop_hook_active": False},
        "codex": {"hook_event_name": "Stop", "last_assistant_message": "ok", "stop_hook_active": False}}


def _turn(cli: str, path: Path, n: int, i: int, o: int, w: int, r: int) -> None:
    model = MODELS[cli]
    if cli == "claude":
        _jsonl(path, {"type": "user", "message": {"content": "go"}}, *_claude(f"m{n}", model, i, o, w, r))
    elif cli == "gemini":
        _jsonl(path, {"type": "user", "id": f"u{n}", "content": "go"}, *_gemini(f"g{n}", model, i, o, r, 0))
    else:
        _jsonl(path, *_codex(f"resp_{n}", model, i, o, w, r))


def _cost(repo: Path, *args: str) -> dict[str, Any]:
    proc = run_exo("cost", *args, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.sqlite_only  # the readers and the hook; the store's part runs on both below
@pytest.mark.parametrize("cli", ["claude", "gemini", "codex"])
def test_stop_hook_records_each_clis_usage_by_turn_model_and_kind(repo: Path, tmp_path: Path, cli: str) -> None:
    make_agent(repo, "w1", backend=cli, status="working")
    transcript = tmp_path / "transcript.jsonl"
    payload = dict(STOP[cli], session_id="s", cwd=str(repo), transcript_path=str(transcript))
    w = 0 if cli == "gemini" else 7  # Gemini records no cache writes
    _turn(cli, transcript, 1, 100, 20, w, 1000)
    hook_json(run_hook(repo, "w1", "stop", cli, dict(payload, turn_id="t1")))
    _turn(cli, transcript, 2, 3, 4, 0, 5)
    hook_json(run_hook(repo, "w1", "stop", cli, dict(payload, turn_id="t2")))
    hook_json(run_hook(repo, "w1", "stop", cli, dict(payload, turn_id="t3")))  # nothing new: nothing counted
    store = env_for(repo).store
    assert store.usage(["w1"]) == [("w1", Usage(MODELS[cli], 103, 24, w, 1005))]
    assert store.agent("w1").tokens == 103 + 24 + w + 1005  # type: ignore[union-attr]
    out = _cost(repo, "w1")
    [row] = out["agents"][0]["models"]
    p = DEFAULTS[{"claude": "claude-sonnet-4-5"}.get(cli, MODELS[cli])]
    usd = (103 * p[0] + 24 * p[1] + w * p[2] + 1005 * p[3]) / 1e6
    assert (row["input"], row["output"], row["cache_write"], row["cache_read"], row["price"]) == (103, 24, w, 1005,
                                                                                                   "default")
    assert row["usd"] == pytest.approx(usd) and out["team"]["usd"] == pytest.approx(usd)
    listed = json.loads(run_exo("agents", "--json", cwd=repo).stdout)["agents"][0]
    assert listed["tokens"] == 103 + 24 + w + 1005 and listed["cost_usd"] == pytest.approx(usd)


@pytest.mark.sqlite_only
def test_prices_configured_unknown_and_tree_with_retired_agents(repo: Path) -> None:
    make_agent(repo, "lead", role="tl")
    make_agent(repo, "w1", parent="lead")
    make_agent(repo, "w2", parent="lead", status="done")
    make_agent(repo, "other")
    store = env_for(repo).store
    store.record_usage("lead", 1, [Usage("house-model", 1_000_000, 0, 0, 0)])
    store.record_usage("w1", 1, [Usage("claude-haiku-4-5", 1_000_000, 1_000_000, 0, 0)])
    store.record_usage("w2", 1, [Usage("mystery-model", 10, 0, 0, 0)])
    store.record_usage("other", 1, [Usage("claude-haiku-4-5", 2_000_000, 0, 0, 0)])
    assert store.retire_agent("w2", "w2@1")
    make_agent(repo, "w2", parent="lead")  # its name used again: the retired one still counts in the subtree
    out = _cost(repo, "lead", "--tree")
    assert [a["id"] for a in out["agents"]] == ["lead", "w1", "w2@1", "w2"]
    assert out["agents"][0]["total"]["usd"] is None  # house-model has no price yet: never a guess
    assert out["subtree"]["tokens"] == 1_000_000 + 2_000_000 + 10
    assert out["subtree"]["usd"] is None and out["subtree"]["priced_usd"] == pytest.approx(6.0)
    assert out["subtree"]["unpriced"] == ["house-model", "mystery-model"]
    text = run_exo("cost", "lead", "--tree", cwd=repo).stdout
    assert "price unknown (house-model, mystery-model)" in text and "3,000,010 tokens" in text
    assert "default prices of" in text
    (repo / "exo.toml").write_text('[prices."house-model"]\ninput = 2.5\noutput = 10\ncache_write = 3\ncache_read = 0.25\n'
                                   '[prices."claude-haiku-4-5"]\ninput = 1\noutput = 1\ncache_write = 1\ncache_read = 1\n')
    out = _cost(repo)
    by_id = {a["id"]: a for a in out["agents"]}
    assert by_id["lead"]["models"][0]["price"] == "configured" and by_id["lead"]["total"]["usd"] == pytest.approx(2.5)
    assert by_id["w1"]["total"]["usd"] == pytest.approx(2.0)  # the override wins over the default
    assert out["team"]["unpriced"] == ["mystery-model"] and out["team"]["usd"] is None
    assert "configured: claude-haiku-4-5, house-model" in out["prices"]
    for bad in ('[prices."m"]\ninput = 1\n', '[prices."m"]\ninput = -1\noutput = 1\ncache_write = 1\ncache_read = 1\n',
                '[prices."m"]\ninput = "1"\noutput = 1\ncache_write = 1\ncache_read = 1\nextra = 2\n'):
        (repo / "exo.toml").write_text(bad)
        proc = run_exo("cost", "--json", cwd=repo)
        assert proc.returncode == 4, proc.stdout
        assert json.loads(proc.stdout)["error"]["data"]["key"] == "prices.m"


def test_usage_rows_follow_a_retired_agent_and_sum_per_model(repo: Path) -> None:
    make_agent(repo, "w1")
    store = env_for(repo).store
    store.record_turn("w1", {"status": "idle"}, turns=1, tokens=18, kv=("k", "v"), turn=1,
                      usage=[Usage("a", 1, 2, 3, 4), Usage("b", 0, 0, 0, 8), Usage("c")])
    store.record_usage("w1", 2, [Usage("a", 10, 0, 0, 0)])
    assert store.usage() == [("w1", Usage("a", 11, 2, 3, 4)), ("w1", Usage("b", 0, 0, 0, 8))]
    assert store.agent("w1").tokens == 28  # type: ignore[union-attr]
    assert store.retire_agent("w1", "w1@1")
    assert store.usage(["w1"]) == [] and len(store.usage(["w1@1"])) == 2
    assert store.counts()["usage"] == 3  # one row per agent, turn and model


@pytest.mark.sqlite_only
def test_only_a_custom_agent_reports_its_own_usage(repo: Path) -> None:
    make_agent(repo, "c1", backend="custom", turns=2)
    make_agent(repo, "cl", backend="claude")
    ok = run_exo_as(repo, "c1", "usage", "--model", "my-model", "--input", "5", "--cache-read", "7", "--json")
    assert ok.returncode == 0, ok.stderr
    assert {k: v for k, v in json.loads(ok.stdout).items() if k in ("turn", "tokens", "input")} == {
        "turn": 3, "tokens": 12, "input": 5}
    assert env_for(repo).store.usage(["c1"]) == [("c1", Usage("my-model", 5, 0, 0, 7))]
    refused = run_exo_as(repo, "cl", "usage", "--model", "m", "--input", "5", "--json")
    assert refused.returncode == 5 and "own record" in json.loads(refused.stdout)["error"]["message"]
    assert run_exo_as(repo, None, "usage", "--model", "m", "--input", "5").returncode == 5  # the human
    for args, code in ((["--model", "m\x1b[2J", "--input", "1"], 4), (["--model", "m"], 4),
                       (["--model", "m", "--input", "-1"], 2), (["--input", "1"], 2)):
        assert run_exo_as(repo, "c1", "usage", *args).returncode == code, args
    assert env_for(repo).store.usage(["c1", "cl"]) == [("c1", Usage("my-model", 5, 0, 0, 7))]  # nothing else counted


@pytest.mark.sqlite_only
def test_a_token_budget_stops_the_agent_after_the_turn_that_reaches_it_and_a_raise_releases_it(
        repo: Path, tmp_path: Path) -> None:
    make_agent(repo, "lead", role="tl")
    make_agent(repo, "w1", parent="lead", backend="claude", status="working")
    make_agent(repo, "w2", parent="root")
    assert run_exo_as(repo, "w2", "budget", "w1", "100", "--tokens").returncode == 5  # a dev budgets nobody
    assert run_exo_as(repo, "lead", "budget", "w2", "100", "--tokens").returncode == 5  # not its descendant
    assert run_exo_as(repo, "lead", "budget", "w1", "x1").returncode == 4
    set_ = json.loads(run_exo_as(repo, "lead", "budget", "w1", "100", "--tokens", "--json").stdout)
    assert (set_["budget_tokens"], set_["tokens"], set_["released"]) == (100, 0, False)
    transcript = tmp_path / "t.jsonl"
    payload = dict(STOP["claude"], session_id="s", cwd=str(repo), transcript_path=str(transcript))
    store = env_for(repo).store

    _turn("claude", transcript, 1, 80, 5, 0, 0)  # 85 of 100: told once, at 80%
    assert hook_json(run_hook(repo, "w1", "stop", "claude", dict(payload, turn_id="t1"))) == {}
    assert store.agent("w1").status == "idle"  # type: ignore[union-attr]
    told = [m for m in store.messages(kinds=["event"]) if m.data.get("event") == "budget-warning"]
    assert sorted(m.recipient for m in told) == ["lead", "w1"]

    store.update_agent("w1", status="working")
    store.post("send", "lead", "w1", "more work", data={"from_name": "lead"})  # would keep it going: held instead
    _turn("claude", transcript, 2, 10, 10, 0, 0)  # 105 of 100: this turn overran it, the next never starts
    assert hook_json(run_hook(repo, "w1", "stop", "claude", dict(payload, turn_id="t2"))) == {}
    w1 = store.agent("w1")
    assert (w1.status, w1.status_reason) == ("over-budget", "over budget: 105 of 100 tokens")  # type: ignore[union-attr]
    assert store.messages(recipient="w1", unconsumed=True, undelivered=True)  # held, not handed over
    sent = json.loads(run_exo_as(repo, "lead", "send", "w1", "and this", "--json").stdout)
    assert [(s["delivery"], s["held_by"]) for s in sent["sent"]] == [("held", "agent")]
    assert [m.data.get("event") for m in store.messages(recipient="lead", kinds=["event"])].count("over-budget") == 1
    waited = json.loads(run_exo_as(repo, "lead", "wait", "w1", "--until-idle", "--timeout", "30", "--json").stdout)
    assert waited["timed_out"] is False  # a fan-in returns: over budget counts as idle

    raised = json.loads(run_exo_as(repo, "lead", "budget", "w1", "+50", "--tokens", "--json").stdout)
    assert (raised["budget_tokens"], raised["status"], raised["released"]) == (150, "idle", True)
    assert store.messages(recipient="w1", unconsumed=True, undelivered=True)  # its next hook takes them
    proc = run_exo_as(repo, "lead", "budget", "w1", "1")  # dollars: w1 used a model exo has a price for
    assert proc.returncode == 0, proc.stderr
    store.record_usage("w1", 3, [Usage("no-price-model", 1)])
    proc = run_exo_as(repo, "lead", "budget", "w1", "2", "--json")
    assert proc.returncode == 5 and "no-price-model" in json.loads(proc.stdout)["error"]["message"]


@pytest.mark.sqlite_only
def test_spawn_gives_a_budget_and_a_lead_gives_at_most_what_it_has_left(repo: Path) -> None:
    make_agent(repo, "lead", role="tl", spec={"budget": {"tokens": 1000}})
    env_for(repo).store.record_usage("lead", 1, [Usage("m", 400)])
    args = ("spawn", "--worker", "k1", "--agent", "demo", "--mux", "headless", "--prompt", "hi", "--json")
    refused = run_exo_as(repo, "lead", *args, "--budget-tokens", "700")
    assert refused.returncode == 5 and "600 tokens left" in json.loads(refused.stdout)["error"]["message"]
    proc = run_exo_as(repo, "lead", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = env_for(repo).store
    assert store.agent("k1").spec["budget"] == {"tokens": 600}  # type: ignore[union-attr]  # what the lead had left
    (repo / "exo.toml").write_text("[budget]\nagent_tokens = 5000\n")
    proc = run_exo_as(repo, None, *args[:2], "k2", *args[3:], "--budget-usd", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert store.agent("k2").spec["budget"] == {"usd": 2.0, "tokens": 5000}  # type: ignore[union-attr]
    # raising a child's budget later: the lead still gives at most what it has left (600 tokens), the human anything
    refused = run_exo_as(repo, "lead", "budget", "k1", "+100", "--tokens", "--json")
    assert refused.returncode == 5 and "600 tokens left" in json.loads(refused.stdout)["error"]["message"]
    assert store.agent("k1").spec["budget"]["tokens"] == 600  # type: ignore[union-attr]  # nothing changed
    store.record_usage("k1", 1, [Usage("m", 250)])  # k1 spent 250 of its 600: 350 more fit in the lead's 600
    proc = run_exo_as(repo, "lead", "budget", "k1", "+250", "--tokens", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert run_exo_as(repo, "lead", "budget", "k1", "+1", "--tokens", "--json").returncode == 5
    assert run_exo_as(repo, None, "budget", "k1", "+10000", "--tokens", "--json").returncode == 0
    for a in ("k1", "k2"):
        run_exo_as(repo, None, "kill", a)


@pytest.mark.sqlite_only
def test_a_hostile_transcript_never_blocks_the_hook_nor_breaks_the_count(repo: Path, tmp_path: Path) -> None:
    import os

    make_agent(repo, "w1", backend="claude", status="working")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # an agent acting from its own shell could name one: opening it would block the hook forever
    for cli in ("claude", "gemini"):  # Gemini reads its transcript for an API error too
        payload = dict(STOP[cli], session_id="s", cwd=str(repo), transcript_path=str(fifo),
                       prompt_response="[no response text]")
        assert hook_json(run_hook(repo, "w1", "stop", cli, payload)) == {}
    hostile = tmp_path / "hostile.jsonl"
    _jsonl(hostile, {"type": "assistant", "message": {"id": "a", "model": "m\x1b[2J" + "x" * 500,
                                                       "usage": {"input_tokens": 10**30, "output_tokens": True,
                                                                 "cache_read_input_tokens": -5,
                                                                 "cache_creation_input_tokens": 3}}})
    with open(hostile, "ab") as fh:
        fh.write(b"\xff\xfe not json\n{\"message\": [1]}\n")
    payload = dict(STOP["claude"], session_id="s", cwd=str(repo), transcript_path=str(hostile), turn_id="h")
    assert hook_json(run_hook(repo, "w1", "stop", "claude", payload)) == {}
    [(agent, usage)] = env_for(repo).store.usage(["w1"])
    assert (usage.input, usage.output, usage.cache_write, usage.cache_read) == (0, 0, 3, 0)
    assert len(usage.model) == 200 and usage.model.startswith("m\x1b[2J")  # kept as data; `exo cost` shows it safely
    text = run_exo("cost", "w1", cwd=repo).stdout
    assert "\x1b" not in text and "price unknown" in text


@pytest.mark.sqlite_only
def test_the_stop_hook_waits_for_claude_to_write_the_turns_last_message(repo: Path, tmp_path: Path) -> None:
    """Claude Code runs its Stop hook before it writes the turn's last message: its usage still counts in that turn."""
    import threading

    make_agent(repo, "w1", backend="claude", status="working")
    transcript = tmp_path / "t.jsonl"
    _jsonl(transcript, {"type": "user", "message": {"content": "go"}})
    text = 'Fin "ok"\n'
    last = [{"type": "assistant", "message": {"id": "m9", "model": "m", "content": [{"type": "text", "text": text}],
                                              "usage": {"input_tokens": 7, "output_tokens": 3}}}]
    late = threading.Timer(0.5, lambda: _jsonl(transcript, *last))
    late.start()
    payload = dict(STOP["claude"], session_id="s", cwd=str(repo), transcript_path=str(transcript),
                   last_assistant_message=text, turn_id="t1")
    try:
        assert hook_json(run_hook(repo, "w1", "stop", "claude", payload)) == {}
    finally:
        late.join()
    assert env_for(repo).store.usage(["w1"]) == [("w1", Usage("m", 7, 3, 0, 0))]


def test_retiring_takes_only_the_record_made_then(repo: Path, store_kind: str) -> None:
    """A reap (or spawn) that read a finished agent retires that record, never a namesake made since with its id."""
    make_agent(repo, "w1", status="done")
    store = env_for(repo).store
    old = store.agent("w1")
    assert old is not None and old.created_at
    assert not store.retire_agent("w1", "w1@1", created_at=old.created_at + 1)  # another w1's record: left alone
    assert store.agent("w1") is not None and store.agent("w1@1") is None
    assert store.retire_agent("w1", "w1@1", created_at=old.created_at)
    assert store.agent("w1") is None and store.agent("w1@1") is not None
