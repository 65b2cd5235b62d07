"""Who advances a merge queue whose runner is gone (issue 34 item 5): the broker's reaper and ``exo watch``.

Entries are enqueued with no runner started (as after a runner was killed with ``kill -9``);
the real broker process, or a real ``exo watch`` round, must start the detached runner, which
lands them through the real gate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pr_helpers import env_for, git
from test_merge_queue import configure, enqueue, entry, passed, pr_of

from conftest import run_exo, wait_for
from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.ops import broker as broker_ops
from exo_cli.ops import mergequeue as mq


@pytest.fixture
def stalled(repo: Path, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A repository with a gate and one PR queued that no runner advances."""
    from exo_cli.adapters.git import add_exclude

    add_exclude(repo / ".git", "/.exo/")
    configure(repo, tmp_path / "gates" / "gates.log", extra="[broker]\nidle_exit = 600\n")
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    enqueue(repo, n)  # the test's enqueue starts no runner
    assert entry(repo, n)["state"] == "queued" and not mq.runner_alive(env_for(repo), "main")
    yield repo, n
    adapter.stop(broker_ops.paths(env_for(repo)), __version__, timeout=30)
    wait_for(lambda: not mq.runner_alive(env_for(repo), "main"), timeout=60, what="the runner to exit")


def landed(repo: Path, n: int) -> None:
    wait_for(lambda: entry(repo, n)["pr_state"] == "merged", timeout=120, what="a detached runner to land it")
    assert git(repo, "rev-parse", "main") in passed(repo)


def test_the_brokers_reaper_starts_a_runner_for_a_stalled_queue(stalled: tuple[Path, int]) -> None:
    repo, n = stalled
    broker_ops.ensure(env_for(repo))
    landed(repo, n)
    log = (env_for(repo).state_dir / "broker.log").read_text()
    assert "started a runner for the merge queue of main" in log


def test_exo_watch_starts_a_runner_for_a_stalled_queue(stalled: tuple[Path, int]) -> None:
    repo, n = stalled
    got = run_exo("watch", "--once", "--json", cwd=repo, timeout=60)
    assert got.returncode == 0, got.stderr
    landed(repo, n)
