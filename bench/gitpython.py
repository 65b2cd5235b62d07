"""GitPython or the git binary on exo's cold paths: which costs a whole command less?

exo declares GitPython but runs the git binary through its own client
(``exo_cli.adapters.git.Git``). This measures the two cold paths that read objects, each as
a fresh Python process (as a CLI call or an MCP tool call pays it): reading three blobs of
a commit (``exo reconstitute`` reads the beads JSONL this way) and the content-aware "already
merged" check of ``exo complete`` (ancestry, merge-tree, tree, patch-ids). GitPython cannot
do merge-tree or cherry itself, so there it runs the binary too. Also printed: the import
cost of each, and the per-call cost inside one process (where GitPython's long-lived
``cat-file --batch`` process pays off only after dozens of reads).
Prints one line per measurement, and the verdict last.

    python bench/gitpython.py [--runs 15]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIT_IDENTITY, ROOT, bench_env, median_ms, precompile, time_commands  # noqa: E402

sys.path.insert(0, str(ROOT))

BLOBS = ("f1.txt", "f2.txt", "d/e/g3.txt")


def make_repo(tmp: Path, env: dict[str, str]) -> Path:
    """200 commits on main, a three-commit topic branch squash-merged into main, packed."""
    repo = tmp / "repo"
    genv = {**env, **GIT_IDENTITY}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, env=genv, check=True, capture_output=True)

    repo.mkdir()
    git("init", "-q", "-b", "main")
    (repo / "d" / "e").mkdir(parents=True)
    for i in range(200):
        (repo / f"f{i % 20}.txt").write_text(f"{i}\n")
        (repo / "d" / "e" / f"g{i % 7}.txt").write_text(f"{i}\n")
        git("add", "-A")
        git("commit", "-q", "-m", f"c{i}")
    git("checkout", "-q", "-b", "topic")
    for i in range(3):
        with open(repo / "f1.txt", "a") as fh:
            fh.write(f"topic {i}\n")
        git("commit", "-q", "-am", f"topic {i}")
    git("checkout", "-q", "main")
    git("merge", "-q", "--squash", "topic")
    git("commit", "-q", "-m", "squash topic")
    git("gc", "-q")
    return repo


def programs(repo: Path) -> dict[str, str]:
    r = str(repo)
    return {
        "import exo's git client": "import exo_cli.adapters.git",
        "import GitPython": "import git",
        "3 blobs, exo's git client": (
            f"from exo_cli.adapters.git import Git\ng = Git({r!r})\n"
            f"for p in {BLOBS!r}: g.blob('main', p)"),
        "3 blobs, GitPython": (
            f"import git\nrepo = git.Repo({r!r})\n"
            f"for p in {BLOBS!r}: (repo.commit('main').tree / p).data_stream.read()"),
        "already merged, exo's git client": (
            f"from exo_cli.adapters.git import Git\nassert Git({r!r}).merged_by_content('topic', 'main')"),
        "already merged, GitPython": (
            f"import git\nrepo = git.Repo({r!r})\n"
            "list(repo.iter_commits('main..topic', max_count=1))\n"
            "tree = repo.git.merge_tree('--write-tree', '--name-only', '--no-messages', 'main', 'topic').split()[0]\n"
            "assert tree == repo.commit('main').tree.hexsha or repo.git.cherry('main', 'topic')"),
    }


def in_process(repo: Path, runs: int) -> tuple[float, float]:
    """Median ms of one blob read inside a running process: exo's client vs GitPython (warm)."""
    import git

    from exo_cli.adapters.git import Git

    client, repo_gp = Git(repo), git.Repo(repo)
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs * 4):
        t0 = time.perf_counter()
        client.blob("main", BLOBS[2])
        a.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        (repo_gp.commit("main").tree / BLOBS[2]).data_stream.read()
        b.append(time.perf_counter() - t0)
    return median_ms(a), median_ms(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory(prefix="exo-bench-gitpython-") as tmp:
        repo = make_repo(Path(tmp), env)
        progs = programs(repo)
        cmds = {name: [sys.executable, "-c", code] for name, code in progs.items()}
        cmds["baseline: python -c pass"] = [sys.executable, "-c", "pass"]
        times = time_commands(cmds, runs=args.runs, cwd=repo, env=env)
        base = median_ms(times.pop("baseline: python -c pass"))
        print(f"{'fresh process (median ms, minus python -c pass)':50} {'ms':>7}")
        result = {name: median_ms(ts) - base for name, ts in times.items()}
        for name, ms in result.items():
            print(f"{name:50} {ms:7.1f}")
        one, other = in_process(repo, args.runs)
        print(f"{'one blob inside a process, exo client / GitPython':50} {one:7.2f} / {other:.2f}")
        worse = min(result["3 blobs, GitPython"] - result["3 blobs, exo's git client"],
                    result["already merged, GitPython"] - result["already merged, exo's git client"])
        verdict = "GitPython is slower on every cold path" if worse > 0 else "GitPython wins somewhere"
        print(f"{verdict}: by at least {worse:.1f} ms per command")


if __name__ == "__main__":
    main()
