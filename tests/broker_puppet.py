"""A custom agent the broker tests steer: it runs exo commands as the agent and reports what they did.

Usage (the custom agent command in ``exo.toml``): ``python broker_puppet.py RESULTS``. exo starts
it headless with the agent's environment (``EXO_SOCKET``, the proof, ...); every line its runner
hands it on stdin is a JSON request ``{"id", "argv", "unset", "set", "stdin", "cwd"}``; it runs
``argv`` as a child (so the command descends from the agent's recorded process, as an agent
CLI's hooks and tools do) and writes ``RESULTS/<id>.json``: ``{"rc", "stdout", "stderr", "pid"}``.
It is a real process tree, not a mock: the relay, the socket and the broker it reaches are exo's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(results: str) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        env = dict(os.environ)
        for name in req.get("unset", []):
            env.pop(name, None)
        env.update(req.get("set", {}))
        proc = subprocess.Popen(req["argv"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=req.get("cwd"))
        out, err = proc.communicate(req.get("stdin") or "")
        tmp = os.path.join(results, f".{req['id']}.tmp")
        with open(tmp, "w") as fh:
            json.dump({"rc": proc.returncode, "stdout": out, "stderr": err, "pid": proc.pid}, fh)
        os.replace(tmp, os.path.join(results, f"{req['id']}.json"))


if __name__ == "__main__":
    main(sys.argv[1])
