"""The real Claude, Gemini and Codex in a bubblewrap sandbox with its own network namespace.

Each CLI runs one headless turn (a shell tool call, then text) under ``bwrap --unshare-net`` with
the network plan: its only way out is the bridge to the allow-list proxy (``NetProxy``), whose
allow-list is derived from the CLI and its login (here the ``*_BASE_URL`` / Codex provider of the
scripted model server on the host's 127.0.0.1). Without the tunnel the plan makes for a loopback
model server, and with ``NO_PROXY`` cleared, the model is reached only by a CLI that honours
``HTTPS_PROXY``/``HTTP_PROXY``; with it (exo's default plan) through the tunnel. The tool call's
``curl`` to another host is refused and logged. The exo spawn path is not used: the
sandbox builder that consumes the plan is issue 31's (``adapters/sandbox.py``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from net_sandbox import bwrap_argv, bwrap_missing

from e2e.agents import AgentHome
from e2e.model_server import ModelServer, tool_results
from exo_cli.adapters import netlog, netpolicy
from exo_cli.adapters.netproxy import NetProxy, network_plan

# curl's error on stdout (2>&1: one stream, in order; a -w code on stdout once cut "response 403" in two)
PROBE = "curl -sS -m 30 -o /dev/null https://evil.example/ 2>&1; echo \" rc=$?\""
SCRIPTS = {
    "claude": {"tool": "Bash", "input": {"command": PROBE, "description": "probe"}},
    "gemini": {"tool": "run_shell_command", "input": {"command": PROBE}},
    "codex": {"tool": "exec_command", "input": {"cmd": PROBE}},
}


def _argv(cli: str, binary: Path) -> list[str]:
    if cli == "claude":
        return [str(binary), "-p", "probe the network", "--output-format", "json", "--dangerously-skip-permissions"]
    if cli == "gemini":
        return [str(binary), "-p", "probe the network", "--output-format", "json", "--yolo"]
    return [str(binary), "exec", "probe the network"]


@pytest.mark.e2e
@pytest.mark.parametrize(("cli", "tunnel"), [("claude", False), ("gemini", False), ("codex", False),
                                             ("claude", True), ("codex", True)])
def test_a_sandboxed_cli_reaches_its_model_through_the_proxy_only(
        cli: str, tunnel: bool, require_cli: Callable[[str], Path], model_server: ModelServer,
        agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    why = bwrap_missing()
    if why:
        pytest.skip(why)
    binary = require_cli(cli)
    proj = tmp_path / "proj"
    proj.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(proj)], check=True)
    home = agent_home(cli, trusted=[proj])
    env = home.env({"NO_PROXY": "", "no_proxy": ""} if not tunnel else None)
    provider = netpolicy.codex_provider_url(home.codex_home) if cli == "codex" else None
    policy = netpolicy.policy_for(cli, env, [], provider_url=provider)
    assert policy.entries() == [f"127.0.0.1:{model_server.url.rsplit(':', 1)[1]}"]
    proxy = NetProxy()
    try:
        folder = tmp_path / "run" / "net"
        folder.parent.mkdir()
        proxy.add("w1", folder, policy, tmp_path / "state" / "net")
        plan = network_plan(folder, policy, tunnels=tunnel)
        if not tunnel:  # the model only through HTTPS_PROXY/HTTP_PROXY: proof that the CLI honours them
            plan.env.update({"NO_PROXY": "", "no_proxy": ""})
        model_server.script(SCRIPTS[cli], {"text": "Done."})
        argv = bwrap_argv(plan, _argv(cli, binary), env=env, writable=[home.home, home.tmpdir, proj], cwd=proj)
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    finally:
        proxy.close()
    assert proc.returncode == 0, f"{cli} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Done." in (json.loads(proc.stdout)["result" if cli == "claude" else "response"] if cli != "codex"
                       else proc.stdout)
    first, second = model_server.agent_requests()
    (result,) = tool_results(second)
    assert "response 403" in str(result["output"]) and "rc=56" in str(result["output"]), result  # CONNECT refused
    refused = netlog.refusals(tmp_path / "state" / "net", "w1")
    assert {(e["host"], e["port"]) for e in refused} == {("evil.example", 443)}, refused  # the CLI tried nothing else
    assert model_server.entries("proxy") == []  # nothing reached the server as a proxy request: ours carried it
