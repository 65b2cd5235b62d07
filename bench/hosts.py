"""An operation on an agent of another host: `exo read` through exo's shared ssh connection,
against what a user would type without exo (`ssh HOST 'cd CLONE && exo read AGENT'`, a fresh
connection each time).

A private sshd on 127.0.0.1 (the tests' harness), a bare origin and two clones, the private
PostgreSQL cluster as the shared store, one demo agent spawned on "host" b. Then, interleaved,
`--runs` times each: `exo read w1` run on A (it goes to b over exo's master connection) and the
manual ssh command (a new connection and handshake each time, then the same exo read on b).
The last line is the ratio of medians (exo / manual): below 1.0 is the handshake saved.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, bench_env, exo_argv, median_ms, precompile, time_commands

sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    import pytest
    from hosts_harness import Sshd, TwoHosts, _stop_all
    from pg_cluster import Cluster, pg_bin

    bindir = pg_bin()
    if bindir is None:
        sys.exit("PostgreSQL is not installed (no initdb)")
    precompile()
    tmp = Path(tempfile.mkdtemp(prefix="exo-bench-hosts-"))
    mp = pytest.MonkeyPatch()
    cluster = Cluster(bindir).start()
    sshd = Sshd().start()
    hosts: TwoHosts | None = None
    try:
        home = tmp / "home"
        home.mkdir()
        for k, v in {"HOME": str(home), "EXO_CONFIG_DIR": str(home / ".config" / "exo"), "NO_COLOR": "1",
                     "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
                     "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}.items():
            mp.setenv(k, v)
        (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
        repo = tmp / "repo"
        repo.mkdir()
        for argv in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
            subprocess.run(["git", *argv], cwd=repo, check=True)
        hosts = TwoHosts(sshd, repo, home, tmp, cluster.url(), mp)
        env = bench_env()
        exo = exo_argv()
        spawn = subprocess.run([*exo, "spawn", "--host", "b", "--worker", "w1", "--prompt", "p", "--agent", "demo"],
                               cwd=repo, env=env, capture_output=True, text=True)
        if spawn.returncode != 0:
            sys.exit(f"spawn on host b failed: {spawn.stderr}")
        manual = [*sshd.ssh_argv("-o", "ControlMaster=no", "-o", "ControlPath=none", "exo-b"),
                  f"cd {shlex.quote(str(hosts.b))} && {hosts.b_exo} read w1"]
        from exo_cli.env import Env

        control = str(Env(cwd=repo).runtime_dir / "ssh-b")
        times = time_commands({
            "exo read (remote)": [*exo, "read", "w1"], "manual ssh + exo read": manual,
            "ssh true (exo's master)": sshd.ssh_argv("-o", f"ControlPath={control}", "exo-b", "true"),
            "ssh true (new connection)": sshd.ssh_argv("-o", "ControlMaster=no", "-o", "ControlPath=none", "exo-b",
                                                       "true"),
        }, runs=args.runs, cwd=repo, env=env)
        warm, cold = median_ms(times["ssh true (exo's master)"]), median_ms(times["ssh true (new connection)"])
        print(f"ssh true through exo's master connection: {warm:.0f} ms; with a new connection: {cold:.0f} ms "
              f"({warm / cold:.2f}x)")
        a, b = median_ms(times["exo read (remote)"]), median_ms(times["manual ssh + exo read"])
        print(f"exo read w1 on host b: {a:.0f} ms; ssh (new connection) + exo read there: {b:.0f} ms")
        print(f"exo / manual: {a / b:.2f}x")
        return 0
    finally:
        if hosts is not None:
            hosts.close()
        _stop_all()
        cluster.stop()
        mp.undo()
        shutil.rmtree(tmp, ignore_errors=True)
        os.environ.pop("EXO_STORE_URL", None)


if __name__ == "__main__":
    sys.exit(main())
