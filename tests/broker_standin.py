"""A stand-in for a broker of another exo version (an older exo cannot be installed beside this one).

Usage: ``python broker_standin.py CTL_PATH VERSION AGENTS``. It speaks the broker's control
protocol exactly as ``exo_cli.broker.conn`` does (the same frames, through the same adapter) and
claims to be exo VERSION serving AGENTS agents: ``ping`` answers so, ``register`` is refused as
the real broker refuses another version, ``stop`` makes it exit. It prints ``ready`` once it
listens. The mock stands only where this machine cannot run the real thing: another version.
"""

from __future__ import annotations

import os
import sys

from exo_cli.adapters import brokerio
from exo_cli.adapters.broker import PROTOCOL


def main(path: str, version: str, agents: int) -> None:
    sock, _ = brokerio.listen(path)
    print("ready", flush=True)
    while True:
        conn, _ = sock.accept()
        with conn:
            try:
                hello = brokerio.recv(conn)
                if hello is None:
                    continue
                brokerio.send(conn, {"ok": True, "exo": version, "protocol": PROTOCOL, "broker_pid": os.getpid()})
                req = brokerio.recv(conn) or {}
            except (OSError, ValueError):
                continue
            cmd = req.get("cmd")
            if cmd == "ping":
                brokerio.send(conn, {"ok": True, "pid": os.getpid(), "exo": version, "protocol": PROTOCOL,
                                     "agents": agents, "connections": 0})
            elif cmd == "stop":
                brokerio.send(conn, {"ok": True})
                conn.close()
                sock.close()
                os.unlink(path)
                return
            else:
                brokerio.send(conn, {"ok": False, "error": {"code": -32004, "name": "StateError",
                                                            "message": f"This broker runs exo {version}",
                                                            "hint": None, "data": {}}})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
