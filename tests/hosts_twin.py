"""Two exo "hosts" on one machine for the hosts attack tests: the private sshd on 127.0.0.1 of
``hosts_harness``, a bare origin, clone A (reached directly) and clone B (reached over ssh as
``[hosts.b]``), each with its own HOME, tmux folder and exo configuration, sharing one PostgreSQL store."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from hosts_harness import Sshd

EXO_BIN = str(Path(sys.executable).parent / "exo")
GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}


class Twin:
    """Clone A (here) and clone B (``[hosts.b]`` over ssh) of one bare origin, one shared store."""

    def __init__(self, root: Path, sshd: Sshd, store_url: str) -> None:
        self.root, self.sshd, self.url = root, sshd, store_url
        self.origin = root / "origin.git"
        self.a, self.b = root / "A", root / "B"
        self.home_a, self.home_b = root / "homeA", root / "homeB"
        self.tmux_a, self.tmux_b = root / "tmuxA", root / "tmuxB"
        for d in (self.home_a, self.home_b, self.tmux_a, self.tmux_b):
            d.mkdir(mode=0o700, parents=True)
        for h in (self.home_a, self.home_b):
            (h / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
        env = {**os.environ, **GIT_ID, "HOME": str(self.home_a), "GIT_CONFIG_GLOBAL": str(self.home_a / ".gitconfig")}
        run = lambda *a, cwd=root: subprocess.run(a, cwd=cwd, env=env, check=True, capture_output=True)  # noqa: E731
        run("git", "init", "-q", "--bare", "-b", "main", str(self.origin))
        run("git", "clone", "-q", str(self.origin), str(self.a))
        (self.a / "README.md").write_text("# twin\n")
        run("git", "add", "README.md", cwd=self.a)
        run("git", "commit", "-q", "-m", "initial", cwd=self.a)
        run("git", "push", "-q", "origin", "main", cwd=self.a)
        run("git", "clone", "-q", str(self.origin), str(self.b))
        self.b_env = {"HOME": str(self.home_b), "TMUX_TMPDIR": str(self.tmux_b), "NO_COLOR": "1",
                      "EXO_CONFIG_DIR": str(self.home_b / ".config" / "exo"),
                      "GIT_CONFIG_GLOBAL": str(self.home_b / ".gitconfig"),
                      "PATH": f"{Path(EXO_BIN).parent}:/usr/local/bin:/usr/bin:/bin", **GIT_ID}
        self.exo_b = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.b_env.items()) + " " + EXO_BIN
        self.config_a = self.home_a / ".config" / "exo"
        self.config_a.mkdir(parents=True)
        self.write_hosts()

    def write_hosts(self, extra: str = "", **entry: str) -> None:
        fields = {"ssh": "exo-b", "path": str(self.b), "exo": self.exo_b, **entry}
        body = "".join(f"{k} = {_toml(v)}\n" for k, v in fields.items())
        (self.config_a / "config.toml").write_text(
            f"[ssh]\ncommand = {_toml('ssh -F ' + str(self.sshd.config))}\npersist = 60\n\n[hosts.b]\n{body}{extra}")

    def env_a(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EXO_", "TMUX"))}
        env.update(GIT_ID)
        env.update({"HOME": str(self.home_a), "TMUX_TMPDIR": str(self.tmux_a), "EXO_CONFIG_DIR": str(self.config_a),
                    "GIT_CONFIG_GLOBAL": str(self.home_a / ".gitconfig"), "NO_COLOR": "1", "EXO_STORE_URL": self.url,
                    "COLUMNS": "200"})
        env.update(extra)
        return env

    def exo_a(self, *args: str, input: str | None = None, timeout: float = 180, **extra: str
              ) -> subprocess.CompletedProcess[str]:
        """exo on host A (a real process, in clone A)."""
        return subprocess.run([EXO_BIN, *args], cwd=self.a, env=self.env_a(**extra), input=input,
                              capture_output=True, text=True, timeout=timeout)

    def exo_on_b(self, *args: str, input: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """exo run directly on host B (its own HOME and configuration, in clone B)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EXO_", "TMUX"))}
        env.update(self.b_env)
        return subprocess.run([EXO_BIN, *args], cwd=self.b, env=env, input=input, capture_output=True, text=True,
                              timeout=timeout)

    def stop(self) -> None:
        """Stop both hosts' tmux servers, exo's ssh masters and every agent group."""
        for tmp in (self.tmux_a, self.tmux_b):
            for sock in tmp.glob("tmux-*/*"):
                subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
        from exo_cli.adapters.files import runtime_dir_for

        for clone in (self.a, self.b):
            run = Path(runtime_dir_for(str((clone / ".git" / "exo").resolve()), create=False))
            for ctl in run.glob("ssh-*"):
                if ctl.suffix not in (".lock", ".log"):
                    subprocess.run(["ssh", "-F", str(self.sshd.config), "-o", f"ControlPath={ctl}", "-O", "exit",
                                    "exo-b"], capture_output=True, timeout=30)

    def runtime_dir(self, clone: Path) -> Path:
        from exo_cli.adapters.files import runtime_dir_for

        return Path(runtime_dir_for(str((clone / ".git" / "exo").resolve()), create=False))


def _toml(v: str) -> str:
    import json

    return json.dumps(v)
