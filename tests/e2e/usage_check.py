"""The check every lifecycle test makes of exo's cost accounting against what the scripted model sent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.model_server import ModelServer

# Distinct usage per scripted turn (``turn_usage(n)``), so a turn counted twice or missed shows.
PRICE = {"input": 1.0, "output": 2.0, "cache_write": 3.0, "cache_read": 4.0}  # dollars per million tokens


def turn_usage(n: int, *, cache_write: bool = True) -> dict[str, int]:
    return {"input": 100 + n, "output": 20 + n, "cache_write": 7 * n if cache_write else 0, "cache_read": 1000 * n}


def assert_usage_counted(exo_json: Callable[..., Any], repo: Path, server: ModelServer, agent: str = "w1") -> None:
    """exo counted exactly the tokens the model server sent the agent's requests, and prices them from the table."""
    want = server.agent_usage()
    [row] = exo_json("cost", agent)["agents"][0]["models"]
    assert {k: row[k] for k in want} == want, (row, want)
    (repo / "exo.toml").write_text(f'[prices."{row["model"]}"]\n' + "".join(f"{k} = {v}\n" for k, v in PRICE.items()))
    try:
        [row] = exo_json("cost", agent)["agents"][0]["models"]
    finally:
        (repo / "exo.toml").unlink()
    assert row["price"] == "configured"
    assert abs(row["usd"] - sum(want[k] * PRICE[k] for k in want) / 1e6) < 1e-9, row
