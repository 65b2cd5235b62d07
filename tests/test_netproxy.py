"""A sandboxed agent's network: the allow-list, the proxy outside, the bridge inside, the refusals counted.

Real sockets, real bubblewrap (``--unshare-net``), real curl, a real broker; 127.0.0.1 only. The
one boundary replaced is the public DNS: the stand-in registry listens on 127.0.0.1 and the
proxy's resolver (``STANDIN_DNS``) answers ``registry.npmjs.org`` with it.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from net_sandbox import bwrap_argv, bwrap_missing

from conftest import Exo, wait_for, write_trusted
from exo_cli.adapters import brokerio, netlog, netpolicy, netproxy
from exo_cli.adapters.netpolicy import model_entries, parse, policy_for
from exo_cli.adapters.netproxy import NetProxy, Refused, network_plan, parse_head
from exo_cli.env import Env
from exo_cli.errors import InvalidInput

PROBE = Path(__file__).with_name("fixtures") / "net_probe.py"


# --------------------------------------------------------------------------- the allow-list


def test_entries_presets_wildcards_and_ports() -> None:
    policy = parse(["npm", "*.example.org", "api.example.com:8443", "127.0.0.1:9000", "[::1]:9001", "GitHub"])
    assert policy.allows("registry.npmjs.org", 443) and policy.allows("REGISTRY.npmjs.org.", 80)
    assert not policy.allows("registry.npmjs.org", 22)
    assert policy.allows("a.b.example.org", 443) and not policy.allows("example.org", 443)
    assert not policy.allows("evilexample.org", 443)
    assert policy.allows("api.example.com", 8443) and not policy.allows("api.example.com", 443)
    assert policy.allows("127.0.0.1", 9000) and not policy.allows("127.0.0.1", 9001)
    assert policy.allows("::1", 9001) and policy.allows("[0:0::1]", 9001)
    assert policy.allows("raw.githubusercontent.com", 443)
    assert not policy.allows("registry.npmjs.org\x00.evil", 443) and not policy.allows("", 443)
    assert parse(policy.entries()) == policy  # what the record keeps reads back the same
    tunnels = network_plan(Path("/x"), policy).prelude  # a tunnel for each loopback address with one port
    assert " ".join(tunnels).endswith("--tunnel 9000=127.0.0.1:9000 --tunnel 9001=[::1]:9001 --")


@pytest.mark.parametrize("entry", ["", "npmx", "*.1.2.3.4", "host:0", "host:99999", "a b.com", "ex\x1bample.com",
                                  "[::1", "*.", "-bad.com", "*.com", "*"])
def test_a_bad_entry_is_invalid_input_naming_the_key(entry: str) -> None:
    with pytest.raises(InvalidInput, match="sandbox.allow_hosts") as info:
        parse([entry])
    assert "\x1b" not in info.value.message


def test_the_model_api_follows_the_cli_and_its_login_kind(tmp_path: Path) -> None:
    assert model_entries("claude", {"ANTHROPIC_API_KEY": "k"}) == ["api.anthropic.com:443"]
    assert model_entries("claude", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/x"}) == ["127.0.0.1:8080"]
    assert model_entries("claude", {}) == ["api.anthropic.com:443", "platform.claude.com:443"]  # OAuth refresh
    assert model_entries("claude", {"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_REGION": "eu-west-1"}) == [
        "bedrock-runtime.eu-west-1.amazonaws.com:443", "sts.amazonaws.com:443"]
    assert model_entries("claude", {"CLAUDE_CODE_USE_VERTEX": "1", "CLOUD_ML_REGION": "global"}) == [
        "aiplatform.googleapis.com:443", "oauth2.googleapis.com:443"]
    assert model_entries("gemini", {"GEMINI_API_KEY": "k"}) == ["generativelanguage.googleapis.com:443"]
    assert model_entries("gemini", {"GOOGLE_GEMINI_BASE_URL": "https://gw.corp.example"}) == ["gw.corp.example:443"]
    assert model_entries("gemini", {}) == ["cloudcode-pa.googleapis.com:443", "oauth2.googleapis.com:443"]
    assert model_entries("gemini", {"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_LOCATION": "europe-west4"}) == [
        "europe-west4-aiplatform.googleapis.com:443", "oauth2.googleapis.com:443"]
    assert model_entries("codex", {"OPENAI_API_KEY": "k"}) == ["api.openai.com:443"]
    assert model_entries("codex", {}) == ["chatgpt.com:443", "auth.openai.com:443"]  # a ChatGPT login
    (tmp_path / "config.toml").write_text('model_provider = "fake"\n[model_providers.fake]\n'
                                          'base_url = "http://127.0.0.1:7000/v1"\n')
    url = netpolicy.codex_provider_url(tmp_path)
    assert model_entries("codex", {"OPENAI_API_KEY": "k"}, provider_url=url) == ["127.0.0.1:7000"]
    assert model_entries("demo", {"ANTHROPIC_API_KEY": "k"}) == [] == model_entries("custom", {})
    # a hostile base URL or region never becomes a wildcard or another host
    assert model_entries("claude", {"ANTHROPIC_BASE_URL": "file:///etc/passwd"}) == []
    assert model_entries("claude", {"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_REGION": "x.evil.com/"}) == [
        "bedrock-runtime.us-east-1.amazonaws.com:443", "sts.amazonaws.com:443"]
    assert policy_for("gemini", {"GEMINI_API_KEY": "k"}, ["pypi"]).entries() == [
        "generativelanguage.googleapis.com:443", "pypi.org", "files.pythonhosted.org"]


def test_allow_hosts_in_exo_toml_is_checked_entry_by_entry(repo: Path) -> None:
    (repo / "exo.toml").write_text('[sandbox]\nallow_hosts = ["npm", "pypi.org:8o"]\n')
    r = Exo(repo)("config", "sandbox.allow_hosts")
    assert r.exit_code == 4, r.stdout + r.stderr
    assert "pypi.org:8o" in r.stderr and "exo.toml" in r.stderr and "Traceback" not in r.stderr
    write_trusted(repo, '[sandbox]\nallow_hosts = ["npm", "*.corp.example:8443"]\n')
    assert Env(cwd=repo).config.get("sandbox.allow_hosts") == ["npm", "*.corp.example:8443"]


@pytest.mark.parametrize(("head", "want"), [
    (b"CONNECT example.com:443 HTTP/1.1", ("example.com", 443, True)),
    (b"CONNECT [::1]:8080 HTTP/1.1", ("::1", 8080, True)),
    (b"GET http://user@example.com/a?b HTTP/1.1\r\nProxy-Authorization: x\r\nHost: fronted.evil.example",
     ("example.com", 80, False)),
])
def test_request_heads(head: bytes, want: tuple[str, int, bool]) -> None:
    request = parse_head(head, b"")
    assert (request.host, request.port, request.connect) == want
    if not request.connect:
        assert request.forward.startswith(b"GET /a?b HTTP/1.1\r\nHost: example.com\r\n")
        assert b"Proxy-Authorization" not in request.forward and b"evil" not in request.forward
        assert request.forward.endswith(b"Connection: close\r\n\r\n")


@pytest.mark.parametrize("head", [b"CONNECT example.com HTTP/1.1", b"GET /relative HTTP/1.1", b"\x1b[31m",
                                  b"CONNECT :443 HTTP/1.1", b"CONNECT h:65536 HTTP/1.1"])
def test_malformed_heads_are_refused_with_400(head: bytes) -> None:
    with pytest.raises(Refused) as info:
        parse_head(head, b"")
    assert info.value.status == 400


def test_a_name_that_resolves_to_a_local_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boundary replaced: the DNS answer (a hostile one cannot be had from a real resolver here)."""
    answers = {"rebind.example": ["127.0.0.1", "169.254.169.254", "::1", "::ffff:127.0.0.1", "0.0.0.0"],
               "mixed.example": ["127.0.0.1", "192.0.2.7"]}

    def dns(host: str, port: int, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
                for ip in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", dns)
    with pytest.raises(Refused, match="local address") as info:
        netproxy.system_resolve("rebind.example", 443)
    assert info.value.status == 403 and info.value.counted
    assert netproxy.system_resolve("mixed.example", 443) == [(socket.AF_INET, ("192.0.2.7", 443))]
    assert netproxy.system_resolve("localhost", 8080) == [(socket.AF_INET, ("127.0.0.1", 8080))]  # by definition


# --------------------------------------------------------------------------- proxy + bridge in bubblewrap


class Counting(http.server.ThreadingHTTPServer):
    hits: list[str]


def _server(body: bytes) -> Counting:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.server.hits.append(f"{self.headers.get('Host')} {self.path}")  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = Counting(("127.0.0.1", 0), Handler)
    server.hits = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Net:
    def __init__(self, tmp: Path) -> None:
        self.registry = _server(b"standin-registry")  # stands in for registry.npmjs.org
        self.model = _server(b"standin-model")  # an allowed model server on the host's 127.0.0.1
        self.outside = _server(b"SHOULD-NEVER-BE-READ")  # a listener outside the allow-list
        standin = ("127.0.0.1", self.registry.server_address[1])

        self.asked: list[str] = []

        def standin_dns(host: str, port: int) -> list[netproxy.Address]:
            """The boundary: the public DNS cannot be used here; the preset's name resolves to the stand-in."""
            self.asked.append(host)
            if host == "registry.npmjs.org":
                return [(socket.AF_INET, standin)]
            raise Refused(502, f"no test DNS entry for {host}", counted=False)

        self.logs: list[str] = []
        self.proxy = NetProxy(resolve=standin_dns, log=self.logs.append)
        self.policy = parse(["npm", f"127.0.0.1:{self.model.server_address[1]}"])
        self.log_dir = tmp / "state" / "net"
        self.folder = tmp / "run" / "net"
        self.folder.parent.mkdir(parents=True)
        self.proxy.add("w1", self.folder, self.policy, self.log_dir)
        self.plan = network_plan(self.folder, self.policy)

    def close(self) -> None:
        self.proxy.close()
        for server in (self.registry, self.model, self.outside):
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    why = bwrap_missing()
    if why:
        pytest.skip(why)
    made = Net(tmp_path_factory.mktemp("net"))
    yield made
    made.close()


def test_in_the_sandbox_only_the_allow_list_is_reached_and_each_refusal_is_logged(net: Net) -> None:
    outside = net.outside.server_address[1]
    argv = bwrap_argv(net.plan, [sys.executable, "-I", str(PROBE), str(outside), str(net.model.server_address[1])],
                      env={"PATH": "/usr/bin:/bin"}, readable=[PROBE.parent])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["npm"][:2] == [0, "standin-registry"]  # the preset's name, resolved outside, reached
    assert got["raw_connect_npm"] == "HTTP/1.1 200 Connection established | standin-registry"
    assert got["model"][:2] == [0, "standin-model"]  # the allowed loopback model server, through the tunnel
    assert got["evil_https"][1] == "000" and "403" in got["evil_https"][2]
    assert got["outside_via_proxy"][1] == "403"
    assert got["raw_connect_outside"] == "HTTP/1.1 403 Forbidden"
    assert got["raw_junk"] == "HTTP/1.1 400 Bad Request"
    # the sandbox's own loopback has nothing of the host's: a direct connection finds nobody
    assert got["outside_direct"][0] == 7 and got["raw_direct"] == 111
    assert all(v.startswith("failed") for k, v in got.items() if k.startswith("dns:")), got  # no resolver inside
    assert got["env"]["HTTPS_PROXY"] == "http://127.0.0.1:3128" and "127.0.0.1" in got["env"]["NO_PROXY"]
    assert net.outside.hits == []
    assert set(net.asked) == {"registry.npmjs.org"}  # a refused name is never looked up, outside either
    assert net.registry.hits == ["registry.npmjs.org /exo-standin", "registry.npmjs.org /tunnelled"]
    refused = netlog.refusals(net.log_dir, "w1")
    assert [(e["host"], e["port"]) for e in refused] == [("evil.example", 443), ("127.0.0.1", outside),
                                                         ("127.0.0.1", outside), ("-", 0)]  # the junk too
    assert {e["agent"] for e in refused} == {"w1"} and netlog.refused_count(net.log_dir, "w1") == 4
    assert any("refused w1 -> evil.example:443" in line for line in net.logs)


def test_a_hostile_host_name_is_logged_visible_and_never_resolved(net: Net) -> None:
    before = netlog.refused_count(net.log_dir, "w1")
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(net.folder / "sock"))
        s.sendall(b"CONNECT secret-data.evil\x1b[2J.example:443 HTTP/1.1\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 403")
    assert netlog.refused_count(net.log_dir, "w1") == before + 1
    last = netlog.refusals(net.log_dir, "w1")[-1]
    assert "\x1b" not in str(last["host"]) and last["reason"] == "not a valid host name"
    with socket.socket(socket.AF_UNIX) as s:  # a connection closed before a word tried nothing: not counted
        s.connect(str(net.folder / "sock"))
    wait_for(lambda: net.proxy.agents["w1"].open == 0, what="the empty connection to be served")
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(net.folder / "sock"))
        s.sendall(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n")
        assert b"evil.example:443: not in the allow-list ([sandbox] allow_hosts)" in s.recv(300)
    assert netlog.refused_count(net.log_dir, "w1") == before + 2
    assert set(net.asked) == {"registry.npmjs.org"}


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(x) for x in text.split()]


@pytest.mark.parametrize("how", ["exit", "kill -9"])
def test_the_bridge_starts_before_the_agent_and_dies_with_it(net: Net, how: str) -> None:
    """Outside bwrap on purpose: without a pid namespace to end it, the bridge must end by itself."""
    port = 20000 + os.getpid() % 20000
    prelude = [p if p != "3128" else str(port) for p in net.plan.prelude]
    agent = subprocess.Popen([*prelude[:prelude.index("--tunnel")], "--",
                              sys.executable, "-c",
                              f"import socket,sys; socket.create_connection(('127.0.0.1',{port})).close(); "
                              "print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None and agent.stdout.readline() == "up\n"  # its first connect found the bridge
        bridge = wait_for(lambda: _children(agent.pid), what="the bridge process")[0]
        if how == "exit":
            agent.communicate("", timeout=60)
        else:
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=60)
        wait_for(lambda: _gone(bridge), what="the bridge to die with its agent")
    finally:
        agent.kill()
        agent.wait()


def test_the_bridge_says_so_when_it_cannot_listen() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-I", "-S", str(netproxy.BRIDGE), "/nonexistent", str(port), "--", "true"],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 71 and "cannot listen on 127.0.0.1" in r.stderr


# --------------------------------------------------------------------------- hosted by the team broker


def _kill(info: dict[str, object] | None) -> None:
    """SIGKILL the broker and wait until it is gone (a connect to a dying broker's socket still succeeds)."""
    assert info is not None
    pid = int(str(info["pid"]))
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pid), what="the killed broker to be gone")


def test_the_broker_serves_a_sandboxed_agents_proxy_and_exo_agents_counts_its_refusals(sleepers: Path) -> None:
    from exo_cli import __version__
    from exo_cli.adapters import broker as broker_adapter
    from exo_cli.ops import broker as broker_ops
    from exo_cli.ops.board import BoardRow
    from exo_cli.render import teamboard

    repo = sleepers
    (repo / "exo.toml").write_text('[agent]\ncommand = ["sleep", "600"]\n[broker]\nidle_exit = 1\n')
    exo = Exo(repo)
    for name in ("w1", "w2"):
        # unsandboxed: the test records the allow-list a sandboxed spawn would (a proxy a broker opens from it)
        r = exo("spawn", "--worker", name, "--prompt", "x", "--agent", "custom", "--mux", "headless", "--no-sandbox",
                "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
    env = Env(cwd=repo)
    paths = broker_ops.paths(env)
    record = env.store.agent("w1")
    assert record is not None
    folder = paths.agent_dir(str(record.spec["socket_key"])) / "net"
    assert not folder.exists()  # no allow-list recorded: no proxy
    # spawn of a sandboxed agent records its allow-list; a broker (here: a restarted one) opens its proxy
    env.store.update_agent("w1", spec={**record.spec, "net_allow": ["pypi"]})
    _kill(broker_adapter.ping(paths, __version__))
    assert exo("agents", "--json").exit_code == 0  # the human's look starts the broker again
    wait_for(lambda: (folder / "sock").is_socket(), what="w1's proxy socket")
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(folder / "sock"))
        s.sendall(b"CONNECT exfil.example:443 HTTP/1.1\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 403")
    r = exo("agents", "--json")
    views = {a["id"]: a for a in json.loads(r.stdout)["agents"]}
    assert (views["w1"]["net_refused"], views["w2"]["net_refused"]) == (1, 0)
    assert "NET REFUSED" in exo("agents").stdout
    assert "network 1 connection(s) refused by its allow-list" in " ".join(exo("status", "w1").stdout.split())
    from exo_cli.ops.status import AgentView

    row = BoardRow(agent=AgentView(**{**views["w1"]}), needs=None, conflicts=[])
    assert "net refused 1" in teamboard.line(row, 100)
    log = netlog.folder(env.state_dir) / f"{netlog.stem(str(record.spec['socket_key']))}.log"
    assert log.read_text().count("exfil.example") == 1
    # a broker killed -9 leaves a dead socket file; the next one publishes a new socket in the same folder
    # (what the sandbox binds) and goes on counting
    _kill(broker_adapter.ping(paths, __version__))
    assert exo("agents", "--json").exit_code == 0  # (or the headless runner already started one)
    wait_for(lambda: brokerio.answers(str(folder / "sock")), what="w1's proxy socket from the new broker")
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(folder / "sock"))
        s.sendall(b"CONNECT exfil.example:443 HTTP/1.1\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 403")
    views = {a["id"]: a for a in json.loads(exo("agents", "--json").stdout)["agents"]}
    assert views["w1"]["net_refused"] == 2
    # the agent goes: so does its proxy socket; a new agent of the same name starts with none refused
    r = exo("complete", "w1", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    wait_for(lambda: not folder.exists(), what="w1's proxy socket to go")
    r = exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    views = {a["id"]: a for a in json.loads(exo("agents", "--json", "--all").stdout)["agents"]}
    assert views["w1"]["net_refused"] == 0 and log.exists()
    (old_life,) = [v for k, v in views.items() if k.startswith("w1@")]  # the first w1, kept as history
    assert old_life["net_refused"] == 2


def test_an_agent_past_its_connection_limit_waits_for_one_to_end(net: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netproxy, "MAX_CONNECTIONS", 2)
    entry = net.proxy.agents["w1"]
    held = [socket.socket(socket.AF_UNIX) for _ in range(2)]
    waiting = socket.socket(socket.AF_UNIX)
    try:
        for s in held:
            s.connect(str(net.folder / "sock"))  # no request head yet: each holds a thread
        wait_for(lambda: entry.paused, what="the proxy to stop accepting w1's connections")
        waiting.connect(str(net.folder / "sock"))  # the kernel's backlog takes it
        waiting.sendall(b"CONNECT over.limit.example:443 HTTP/1.1\r\n\r\n")
        held[0].close()
        waiting.settimeout(60)
        assert waiting.recv(100).startswith(b"HTTP/1.1 403")  # served once a slot was free
        waiting.close()
        wait_for(lambda: not entry.paused, what="w1's listener back")
    finally:
        for s in [*held, waiting]:
            s.close()


def test_spawn_gets_the_policy_and_the_plan_from_the_config_and_the_clis_own_files(repo: Path, tmp_path: Path) -> None:
    from exo_cli.ops import broker as broker_ops
    from exo_cli.ops import network

    write_trusted(repo, '[sandbox]\nallow_hosts = ["github", "pypi.org:8443"]\n')
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text('model_provider = "corp"\n[model_providers.corp]\n'
                                            'base_url = "https://llm.corp.example/v1"\nenv_key = "CORP_LLM_KEY"\n')
    env = Env(cwd=repo)
    policy = network.policy(env, backend="codex", environ={"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "k"})
    assert policy.entries()[0] == "llm.corp.example:443" and "pypi.org:8443" in policy.entries()
    assert policy.allows("codeload.github.com", 443) and not policy.allows("api.openai.com", 443)
    plan = network.plan(env, socket_key="abc123", policy=policy)
    folder = broker_ops.paths(env).agent_dir("abc123") / "net"
    assert plan.binds == ((str(folder), "/run/exo-net"),) and plan.policy == policy
    assert plan.prelude[-1] == "--" and "--tunnel" not in plan.prelude  # no loopback model server here
    assert plan.env["HTTPS_PROXY"] == plan.env["http_proxy"] == "http://127.0.0.1:3128"
    # the sandbox keeps the variable the provider's key is in (and nothing else of the caller's)
    from exo_cli.ops.spawn import sandboxing

    (tmp_path / "agent").mkdir()
    (tmp_path / "clone").mkdir()
    inside = sandboxing.plan_for(env, backend="codex", path=tmp_path / "clone", agent_dir=tmp_path / "agent",
                                 argv=["codex"], environ={"CODEX_HOME": str(codex_home), "CORP_LLM_KEY": "k",
                                                          "OTHER_SECRET": "s", "PATH": "/usr/bin:/bin"},
                                 tty=False, binds=[]).env
    assert inside["CORP_LLM_KEY"] == "k" and "OTHER_SECRET" not in inside
    for hostile in ("*", "CORP_*", "A B", ""):  # never a glob: it would let every variable in
        (codex_home / "config.toml").write_text(f'model_provider = "c"\n[model_providers.c]\nenv_key = "{hostile}"\n')
        assert netpolicy.codex_provider_key(codex_home) is None


def test_a_localhost_base_url_reaches_the_hosts_own_server_and_gets_a_tunnel(net: Net, tmp_path: Path) -> None:
    port = net.model.server_address[1]
    policy = policy_for("claude", {"ANTHROPIC_BASE_URL": f"http://localhost:{port}"}, [])
    assert policy.entries() == [f"localhost:{port}"]
    proxy = NetProxy()  # the system resolver: localhost is loopback by definition, no DNS answer involved
    try:
        folder = tmp_path / "net"
        proxy.add("w9", folder, policy, tmp_path / "log")
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(folder / "sock"))
            s.sendall(f"GET http://localhost:{port}/v1/models HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            s.settimeout(60)
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"standin-model")
        plan = network_plan(folder, policy)
        assert plan.prelude[-3:] == ("--tunnel", f"{port}=localhost:{port}", "--")
    finally:
        proxy.close()


def test_the_bridge_answers_502_when_the_proxy_is_down(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = subprocess.Popen([sys.executable, "-I", "-S", str(netproxy.BRIDGE), str(tmp_path / "nobody.sock"), str(port),
                              "--", sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None and agent.stdout.readline() == "up\n"
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:  # listening before the agent ran
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 502") and b"network proxy does not answer" in body
        assert int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]) == len(body)
    finally:
        agent.kill()
        agent.wait()


def test_the_terminals_ctrl_c_is_the_agents_not_the_bridges(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent_code = ("import signal, sys; signal.signal(signal.SIGINT, lambda *a: print('INT', flush=True)); "
                  "print('up', flush=True); sys.stdin.read()")
    agent = subprocess.Popen([sys.executable, "-I", "-S", str(netproxy.BRIDGE), str(tmp_path / "nobody.sock"), str(port),
                              "--", sys.executable, "-c", agent_code],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert agent.stdout is not None and agent.stdout.readline() == "up\n"
        os.killpg(agent.pid, signal.SIGINT)  # what a Ctrl-C in the agent's terminal does: its foreground group
        assert agent.stdout.readline() == "INT\n"
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:  # the bridge still serves
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 502")
    finally:
        agent.kill()
        agent.wait()


# --------------------------------------------------------------------------- an agent exo spawned, sandboxed

PROBE_AGENT = 'out=.exo/net-result; "$0" -I "$1" "$2" "$3" > "$out.tmp" 2>"$out.err"; mv "$out.tmp" "$out"; exec sleep 600'


def test_a_sandboxed_agents_network_is_its_allow_list_through_the_brokers_proxy(net: Net, repo: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """exo spawn --sandbox: the agent's curl and raw sockets reach the allow-list only, through the team broker's proxy.

    The preset's name (npm: registry.npmjs.org) is mapped to the stand-in registry on 127.0.0.1 by
    ``[sandbox] resolve``, in the proxy's resolver only (no /etc/hosts): inside, no lookup works.
    """
    from conftest import ROOT, stop_repo_agents

    outside, model = net.outside.server_address[1], net.model.server_address[1]
    standin = net.registry.server_address[1]
    command = ["sh", "-c", PROBE_AGENT, sys.executable, str(PROBE), str(outside), str(model)]
    write_trusted(repo, f'[agent]\ncommand = {json.dumps(command)}\n[sandbox]\nmode = "on"\n'
                        f'allow_hosts = ["npm", "127.0.0.1:{model}"]\n'
                        f'resolve = {{ "registry.npmjs.org" = "127.0.0.1:{standin}" }}\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    exo = Exo(repo)
    hits = len(net.registry.hits)
    try:
        r = exo("spawn", "--worker", "w1", "--prompt", "probe", "--agent", "custom", "--mux", "headless", "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        assert r.json()["agents"][0]["sandboxed"] is True  # type: ignore[index]
        result = Path(r.json()["agents"][0]["worktree"]) / ".exo" / "net-result"  # type: ignore[index]
        got = json.loads(wait_for(lambda: result.exists() and result.read_text(), 180, what="the probe's report"))
        assert got["npm"][:2] == [0, "standin-registry"], got  # the preset's name, resolved outside, reached
        assert got["raw_connect_npm"] == "HTTP/1.1 200 Connection established | standin-registry"
        assert got["model"][:2] == [0, "standin-model"]  # the allowed loopback port, through the bridge's tunnel
        assert got["evil_https"][1] == "000" and "403" in got["evil_https"][2]  # curl: CONNECT refused
        assert got["outside_via_proxy"][1] == "403"  # curl through the proxy to the listener off the list
        assert got["raw_connect_outside"] == "HTTP/1.1 403 Forbidden"  # a raw socket asking the proxy for it
        assert got["outside_direct"][0] == 7 and got["raw_direct"] == 111  # the sandbox's own loopback: nobody
        assert all(v.startswith("failed") for k, v in got.items() if k.startswith("dns:")), got  # no resolver inside
        assert net.outside.hits == []
        assert net.registry.hits[hits:] == ["registry.npmjs.org /exo-standin", "registry.npmjs.org /tunnelled"]
        # each refusal logged with host and agent, and counted where the human looks
        env = Env(cwd=repo)
        record = env.store.agent("w1")
        assert record is not None
        refused = netlog.refusals(netlog.folder(env.state_dir), netlog.stem(str(record.spec["socket_key"])))
        assert [(e["agent"], e["host"], e["port"]) for e in refused] == [
            ("w1", "evil.example", 443), ("w1", "127.0.0.1", outside), ("w1", "127.0.0.1", outside), ("w1", "-", 0)]
        (view,) = exo("agents", "--json").json()["agents"]  # type: ignore[index]
        assert view["net_refused"] == 4
        # what it carried: the npm name twice (plain and CONNECT) and the model's port once, nothing else
        (sock,) = exo("broker", "status", "--json").json()["sockets"]  # type: ignore[index]
        assert (sock["agent"], sock["net_carried"]) == ("w1", 3)
        assert "NET CARRIED" in exo("broker", "status").stdout
    finally:
        stop_repo_agents(repo)


def test_resolve_entries_are_checked_and_need_trust(repo: Path) -> None:
    assert netpolicy.parse_pins({"Registry.NPMJS.org.": "127.0.0.1", "a.example": "[::1]:8080",
                                 "b.example": "10.0.0.1:443"}) == {
        "registry.npmjs.org": "127.0.0.1", "a.example": "[::1]:8080", "b.example": "10.0.0.1:443"}
    assert netpolicy.pin_address("127.0.0.1", 80) == ("127.0.0.1", 80)
    assert netpolicy.pin_address("[::1]:8080", 443) == ("::1", 8080)
    for table in ({"x.example": "evil.example"}, {"127.0.0.1": "127.0.0.2"}, {"*.example.com": "127.0.0.1"},
                  {"x.example": "127.0.0.1:99999"}, {"x.example": 5}, {"bad host": "127.0.0.1"}):
        with pytest.raises(InvalidInput) as info:
            netpolicy.parse_pins(table)  # type: ignore[arg-type]
        assert "sandbox.resolve" in info.value.message
    exo = Exo(repo)
    (repo / ".exo").mkdir()
    (repo / ".exo" / "config.toml").write_text('[sandbox]\nresolve = { "x.example" = "nowhere" }\n')
    r = exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless")
    assert r.exit_code == 4 and "sandbox.resolve" in r.stderr and "not an IP address" in r.stderr, r.stderr
    (repo / ".exo" / "config.toml").unlink()
    # the repository's own exo.toml cannot send the agents' traffic elsewhere until its user trusts it
    (repo / "exo.toml").write_text('[sandbox]\nresolve = { "registry.npmjs.org" = "192.0.2.1" }\n')
    r = exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--sandbox")
    assert r.exit_code == 5 and "sandbox.resolve" in r.stderr, r.stderr
