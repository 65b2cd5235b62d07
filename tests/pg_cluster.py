"""A private PostgreSQL cluster for the tests: a temp folder, a Unix socket (0700), no TCP port.

``initdb`` and ``pg_ctl`` come from the distribution's packages (``/usr/lib/postgresql/*/bin``
or on PATH). As root they run as the ``postgres`` user (initdb refuses root); the socket's
permissions keep every other local user out.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def pg_bin() -> Path | None:
    """The folder of initdb/pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


class Cluster:
    """One running cluster; ``url(db)`` is a libpq URL over its socket."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="exo-pg-"))
        self.root.chmod(0o755)
        self.as_root = os.geteuid() == 0
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        (self.root / "pg").mkdir()
        if self.as_root:
            shutil.chown(self.root / "pg", "postgres", "postgres")
        self.data = self.root / "pg" / "data"
        self.sock = self.root / "pg" / "sock"
        self.user = "postgres" if self.as_root else os.environ.get("USER") or "postgres"

    def _run(self, *argv: str) -> None:
        cmd = ["runuser", "-u", "postgres", "--", *argv] if self.as_root else list(argv)
        subprocess.run(cmd, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)

    def start(self, *, fsync: bool = False, max_connections: int = 300) -> Cluster:
        """initdb and start; ``fsync`` off by default (tests: speed), on for benchmarks (real commits)."""
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.user, "-A", "trust", "-E", "UTF8",
                  "--no-instructions")
        self._run("mkdir", str(self.sock))
        with open(self.data / "postgresql.conf", "a") as fh:
            fh.write(f"listen_addresses = ''\nunix_socket_directories = '{self.sock}'\n"
                     f"unix_socket_permissions = 0700\nmax_connections = {max_connections}\nfsync = {'on' if fsync else 'off'}\n")
        self.start_server()
        return self

    def start_server(self) -> None:
        """Start the (stopped) server and wait until it accepts connections."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "pg" / "server.log"),
                  "-w", "start")

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions are terminated, as in a restart; ``immediate``: a crash)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart``: every session is terminated, the server is back when this returns."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "pg" / "server.log"),
                  "-m", mode, "-w", "restart")

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{db}?host={self.sock}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        """Run SQL through psycopg (not the psql binary) and return the first column of the rows."""
        import psycopg

        with psycopg.connect(self.url(db), autocommit=True) as conn:
            cur = conn.execute(sql)
            return "\n".join(str(r[0]) for r in cur.fetchall()) if cur.description else ""

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
