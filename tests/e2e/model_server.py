"""A scripted stand-in for the model APIs the real agent CLIs talk to, plus an egress trap.

One HTTP server on 127.0.0.1 (port 0) answers, from a script of turns:

- Anthropic Messages (Claude Code): ``POST /v1/messages[?beta=true]`` streamed (SSE) or not,
  ``POST /v1/messages/count_tokens``, ``HEAD /`` and other GETs.
- Gemini (Gemini CLI): ``POST /v1beta/models/<model>:generateContent``,
  ``:streamGenerateContent?alt=sse`` and ``:countTokens``.
- OpenAI Responses (Codex CLI): ``POST /v1/responses`` (streamed events).

A script is a list of turns, each ``{"text": "..."}`` or ``{"tool": name, "input": {...}}`` (optionally
with a ``"text"`` said before the call), ``{"error": <HTTP status>, "message": "..."}`` (an API error in
that API's format), or a callable ``(entry) -> turn``. A turn may carry ``"usage": {"input", "output",
"cache_write", "cache_read"}`` (tokens, each kind apart: input excludes the cache reads and writes),
sent in that API's own usage fields (``USAGE`` otherwise; side requests get ``SIDE_USAGE``); each
entry records what it was sent (``usage``), and ``agent_usage`` sums the agent requests'. Turns are consumed only by
*agent* requests, i.e. requests that carry a non-empty tool list. Side requests (Claude's session
title, Gemini's model router and next-speaker check, Codex's title thread) get a minimal instance of
the JSON schema they ask for, or a canned text, and never consume a turn. When the script is
exhausted the agent gets the text ``done``.

Every request is appended to a JSONL log (and kept in memory) with a ``kind`` tag: ``agent``,
``side``, ``count_tokens``, ``probe`` (HEAD/GET), ``proxy`` (a refused egress attempt) or
``unknown``. Used as ``HTTPS_PROXY``/``HTTP_PROXY``, the same server refuses every ``CONNECT`` and
absolute-URI request with 403, so nothing leaves the machine even when a CLI tries.

The protocol notes (tool names and request shapes per CLI version) are in tests/e2e/README.md.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

Turn = dict[str, Any]
Entry = dict[str, Any]
TurnSource = Turn | Callable[[Entry], Turn]

DONE: Turn = {"text": "done"}
USAGE = {"input": 10, "output": 5, "cache_write": 0, "cache_read": 0}
SIDE_USAGE = {"input": 1, "output": 1, "cache_write": 0, "cache_read": 0}  # told apart from any agent turn's
SIDE_TEXT = "E2E"
_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


class ModelServer:
    """Serve scripted model answers on 127.0.0.1 and log every request; also an egress trap."""

    def __init__(self, log_path: Path, script: Iterable[TurnSource] = ()) -> None:
        self.log_path = Path(log_path)
        self._turns: list[TurnSource] = list(script)
        self._next_turn = 0
        self._entries: list[Entry] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ModelServer:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread."""
        handler = type("BoundHandler", (_Handler,), {"model": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="model-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """Return the bound port."""
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Return the base URL, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def proxy_env(self) -> dict[str, str]:
        """Return the env that routes every non-local connection into the trap."""
        proxy = self.url
        local = "127.0.0.1,localhost,::1"
        return {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
                "ALL_PROXY": proxy, "all_proxy": proxy, "NO_PROXY": local, "no_proxy": local}

    # -- script --------------------------------------------------------------------------------

    def script(self, *turns: TurnSource) -> None:
        """Append turns to the script (consumed in order by agent requests)."""
        with self._cond:
            self._turns.extend(turns)

    @property
    def turns_left(self) -> int:
        """Return how many scripted turns are not consumed yet."""
        with self._cond:
            return len(self._turns) - self._next_turn

    def _take_turn(self, entry: Entry) -> tuple[int | None, Turn]:
        with self._cond:
            if self._next_turn >= len(self._turns):
                return None, DONE
            index = self._next_turn
            self._next_turn += 1
            source = self._turns[index]
        turn = source(entry) if callable(source) else source
        return index, turn

    # -- log -----------------------------------------------------------------------------------

    def _record(self, entry: Entry) -> Entry:
        with self._cond:
            entry["seq"] = len(self._entries)
            entry["time"] = time.time()
            self._entries.append(entry)
            with self.log_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, default=str) + "\n")
            self._cond.notify_all()
        return entry

    def entries(self, kind: str | None = None, api: str | None = None) -> list[Entry]:
        """Return logged requests, optionally only one kind and/or api."""
        with self._cond:
            return [e for e in self._entries
                    if (kind is None or e["kind"] == kind) and (api is None or e.get("api") == api)]

    def agent_usage(self, api: str | None = None) -> dict[str, int]:
        """The tokens of each kind sent to the agent requests so far (what exo must have counted)."""
        total = dict.fromkeys(USAGE, 0)
        for entry in self.agent_requests(api):
            for k in total:
                total[k] += int(entry.get("usage", {}).get(k, 0))
        return total

    def agent_requests(self, api: str | None = None) -> list[Entry]:
        """Return the logged agent requests (the ones that carried tools)."""
        return self.entries("agent", api)

    def wait_for(self, predicate: Callable[[Entry], bool], timeout: float = 30.0) -> Entry:
        """Block until a logged request satisfies predicate; return it, or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for entry in self._entries[seen:]:
                    if predicate(entry):
                        return entry
                seen = len(self._entries)
                left = deadline - time.monotonic()
                if left <= 0:
                    kinds = [(e["kind"], e["path"]) for e in self._entries]
                    raise TimeoutError(f"no matching request within {timeout}s; log: {kinds}")
                self._cond.wait(left)

    def wait_agent_requests(self, n: int, timeout: float = 30.0, api: str | None = None) -> list[Entry]:
        """Block until at least n agent requests arrived; return all of them."""
        count = 0

        def enough(entry: Entry) -> bool:
            nonlocal count
            if entry["kind"] == "agent" and (api is None or entry.get("api") == api):
                count += 1
            return count >= n

        if n > 0:
            self.wait_for(enough, timeout)
        return self.agent_requests(api)

    # -- request handling (called from handler threads) ----------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[int, str, bytes]:
        """Answer one request; return (status, content type, body)."""
        if method == "CONNECT" or target.startswith(("http://", "https://")):
            self._record({"kind": "proxy", "api": None, "method": method, "path": target, "status": 403,
                          "headers": _pick_headers(headers), "body": None})
            return 403, "text/plain", b"egress refused by the e2e model server\n"
        url = urlsplit(target)
        path, query = url.path, parse_qs(url.query)
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        entry: Entry = {"method": method, "path": target, "headers": _pick_headers(headers), "body": body,
                        "auth": _auth_digests(headers)}
        if method in ("HEAD", "GET"):
            entry.update(kind="probe", api=None)
            self._record(entry)
            if path.rstrip("/").endswith("/models"):
                return 200, "application/json", json.dumps({"object": "list", "data": [], "models": []}).encode()
            return 200, "application/json", b"{}"
        if method != "POST" or not isinstance(body, dict):
            entry.update(kind="unknown", api=None)
            self._record(entry)
            return 404, "application/json", _error_json(f"unsupported {method} {path}")
        if path in ("/v1/messages", "/messages"):
            return self._anthropic(entry, body)
        if path in ("/v1/messages/count_tokens", "/messages/count_tokens"):
            entry.update(kind="count_tokens", api="anthropic")
            self._record(entry)
            return 200, "application/json", json.dumps({"input_tokens": _approx_tokens(raw)}).encode()
        if path in ("/v1/responses", "/responses"):
            return self._openai(entry, body)
        match = _GEMINI_PATH.match(path)
        if match:
            return self._gemini(entry, body, match["model"], match["method"], query)
        entry.update(kind="unknown", api=None)
        self._record(entry)
        return 404, "application/json", _error_json(f"unsupported POST {path}")

    def _classify(self, entry: Entry, api: str, tools: Any) -> Turn:
        """Tag entry agent/side, record it, and pick the turn (agent) or side answer.

        A tool turn gets its call id here (``tool_id``; Gemini's CLI makes its own ids) so that tests
        can find the matching tool result in a later request.
        """
        entry["api"] = api
        if tools:
            entry["kind"] = "agent"
            index, turn = self._take_turn(entry)
            entry["turn"] = index
            entry["answer"] = turn
            if not turn.get("error"):  # an API error uses no tokens
                entry["usage"] = {**USAGE, **(turn.get("usage") or {})}
            if turn.get("tool") and api != "gemini":
                entry["tool_id"] = f"{'toolu' if api == 'anthropic' else 'call'}_e2e_{next(self._ids)}"
            self._record(entry)
            return turn
        entry["kind"] = "side"
        schema = find_schema(entry["body"])
        answer = json.dumps(schema_instance(schema)) if schema is not None else SIDE_TEXT
        entry["answer"] = {"text": answer}
        entry["usage"] = dict(SIDE_USAGE)
        self._record(entry)
        return {"text": answer, "usage": SIDE_USAGE}

    # Anthropic Messages ------------------------------------------------------------------------

    def _anthropic(self, entry: Entry, body: dict[str, Any]) -> tuple[int, str, bytes]:
        turn = self._classify(entry, "anthropic", body.get("tools"))
        if turn.get("error"):
            return int(turn["error"]), "application/json", json.dumps(
                {"type": "error", "error": {"type": "invalid_request_error", "message": turn.get("message", "")}}).encode()
        model = str(body.get("model", "claude-e2e"))
        content: list[dict[str, Any]] = []
        if turn.get("text") is not None:
            content.append({"type": "text", "text": str(turn["text"])})
        if turn.get("tool"):
            content.append({"type": "tool_use", "id": entry["tool_id"], "name": turn["tool"],
                            "input": turn.get("input", {})})
        stop = "tool_use" if turn.get("tool") else "end_turn"
        u = {**USAGE, **(turn.get("usage") or {})}
        usage = {"input_tokens": u["input"], "output_tokens": u["output"],
                 "cache_creation_input_tokens": u["cache_write"], "cache_read_input_tokens": u["cache_read"]}
        msg_id = f"msg_e2e_{next(self._ids)}"
        if not body.get("stream"):
            message = {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
                       "stop_reason": stop, "stop_sequence": None, "usage": usage}
            return 200, "application/json", json.dumps(message).encode()
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {
            "type": "message_start",
            "message": {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
                        "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}})]
        for index, block in enumerate(content):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
                       ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                       ("content_block_stop", {"type": "content_block_stop", "index": index})]
        events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": u["output"]}}),
                   ("message_stop", {"type": "message_stop"})]
        return 200, "text/event-stream", _sse(events)

    # Gemini ------------------------------------------------------------------------------------

    def _gemini(self, entry: Entry, body: dict[str, Any], model: str, method: str,
                query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        if method == "countTokens":
            entry.update(kind="count_tokens", api="gemini")
            self._record(entry)
            return 200, "application/json", json.dumps({"totalTokens": 10}).encode()
        if method not in ("generateContent", "streamGenerateContent"):
            entry.update(kind="unknown", api="gemini")
            self._record(entry)
            return 404, "application/json", _error_json(f"unsupported Gemini method {method}")
        tools = [t for t in body.get("tools") or [] if t.get("functionDeclarations")]
        turn = self._classify(entry, "gemini", tools)
        if turn.get("error"):
            return int(turn["error"]), "application/json", json.dumps(
                {"error": {"code": int(turn["error"]), "message": turn.get("message", ""),
                           "status": "INVALID_ARGUMENT"}}).encode()
        parts: list[dict[str, Any]] = []
        if turn.get("text") is not None:
            parts.append({"text": str(turn["text"])})
        if turn.get("tool"):
            parts.append({"functionCall": {"name": turn["tool"], "args": turn.get("input", {})}})
        response = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": _gemini_usage({**USAGE, **(turn.get("usage") or {})}),
                    "modelVersion": model, "responseId": f"resp_e2e_{next(self._ids)}"}
        if method == "streamGenerateContent":
            if query.get("alt") == ["sse"]:
                return 200, "text/event-stream", f"data: {json.dumps(response)}\r\n\r\n".encode()
            return 200, "application/json", json.dumps([response]).encode()
        return 200, "application/json", json.dumps(response).encode()

    # OpenAI Responses --------------------------------------------------------------------------

    def _openai(self, entry: Entry, body: dict[str, Any]) -> tuple[int, str, bytes]:
        turn = self._classify(entry, "openai", body.get("tools"))
        if turn.get("error"):
            return int(turn["error"]), "application/json", json.dumps(
                {"error": {"message": turn.get("message", ""), "type": "invalid_request_error", "param": None,
                           "code": None}}).encode()
        resp_id = f"resp_e2e_{next(self._ids)}"
        model = str(body.get("model", "fake-model"))
        items: list[dict[str, Any]] = []
        if turn.get("text") is not None:
            items.append({"type": "message", "id": f"msg_e2e_{next(self._ids)}", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": str(turn["text"]), "annotations": []}]})
        if turn.get("tool"):
            call: dict[str, Any] = {"type": "function_call", "id": f"fc_e2e_{next(self._ids)}",
                                    "call_id": entry["tool_id"], "name": turn["tool"],
                                    "arguments": json.dumps(turn.get("input", {})), "status": "completed"}
            explicit = turn.get("namespace")
            namespace = explicit or _openai_namespace(body.get("tools"), turn["tool"])
            if namespace:
                call["namespace"] = namespace
                if not explicit:  # "mcp__exo__note" -> namespace "mcp__exo", name "note"
                    call["name"] = turn["tool"][len(namespace) + 2:]
            items.append(call)
        base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": {**base, "status": "in_progress",
                                                                           "output": []}})]
        for index, item in enumerate(items):
            events.append(("response.output_item.added", {"type": "response.output_item.added",
                                                          "output_index": index,
                                                          "item": {**item, "status": "in_progress"}}))
            if item["type"] == "message":
                events.append(("response.output_text.delta", {
                    "type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                    "content_index": 0, "delta": item["content"][0]["text"]}))
            events.append(("response.output_item.done", {"type": "response.output_item.done",
                                                         "output_index": index, "item": item}))
        u = {**USAGE, **(turn.get("usage") or {})}
        usage = {"input_tokens": u["input"] + u["cache_read"], "input_tokens_details": {"cached_tokens": u["cache_read"]},
                 "output_tokens": u["output"], "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": u["input"] + u["cache_read"] + u["output"]}
        events.append(("response.completed", {"type": "response.completed",
                                              "response": {**base, "status": "completed", "output": items,
                                                           "usage": usage}}))
        return 200, "text/event-stream", _sse(events)


class _Handler(BaseHTTPRequestHandler):
    """HTTP glue: read the request, let ModelServer.handle answer it."""

    model: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        """Stay quiet (the JSONL log is the record)."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.command == "CONNECT":
            self.close_connection = True
        status, ctype, body = self.model.handle(self.command, self.path, dict(self.headers.items()), raw)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if self.command == "CONNECT" or status == 403:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_CONNECT = _serve


# -- reading logged requests -------------------------------------------------------------------


def tool_results(entry: Entry) -> list[dict[str, Any]]:
    """Return the tool results a request carries, as ``{"id", "name", "output"}`` (any API).

    Anthropic ``tool_result`` blocks (id = tool_use_id), Gemini ``functionResponse`` parts (name),
    OpenAI ``function_call_output`` items (id = call_id). ``output`` is the result flattened to text.
    """
    body = entry.get("body") or {}
    found: list[dict[str, Any]] = []
    for message in body.get("messages") or []:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found.append({"id": block.get("tool_use_id"), "name": None, "output": _flatten(block.get("content"))})
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            response = part.get("functionResponse") if isinstance(part, dict) else None
            if response:
                found.append({"id": response.get("id"), "name": response.get("name"),
                              "output": _flatten(response.get("response"))})
    for item in body.get("input") if isinstance(body.get("input"), list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            found.append({"id": item.get("call_id"), "name": None, "output": _flatten(item.get("output"))})
    return found


def tool_names(entry: Entry) -> list[str]:
    """Return the tool names a request offers, in the form a script calls them (any API).

    Codex lists MCP tools inside ``namespace`` tools; they come back as ``<namespace>__<tool>``.
    """
    names: list[str] = []
    for tool in (entry.get("body") or {}).get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("functionDeclarations"):
            names += [f["name"] for f in tool["functionDeclarations"]]
        elif tool.get("type") == "namespace":
            names += [f"{tool['name']}__{t['name']}" for t in tool.get("tools") or []]
        elif tool.get("name"):
            names.append(tool["name"])
    return names


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_flatten(v.get("text", v) if isinstance(v, dict) else v) for v in value)
    return json.dumps(value)


# -- helpers -----------------------------------------------------------------------------------


def _openai_namespace(tools: Any, name: str) -> str | None:
    """Return the namespace tool whose member name is (``<namespace>__<member>``), as Codex lists MCP tools."""
    for tool in tools or []:
        if tool.get("type") == "namespace" and tool.get("name"):
            prefix = tool["name"] + "__"
            members = {t.get("name") for t in tool.get("tools") or []}
            if name.startswith(prefix) and name[len(prefix):] in members:
                return str(tool["name"])
    return None


def _gemini_usage(u: dict[str, int]) -> dict[str, int]:
    """Gemini's usageMetadata: the prompt count includes the cached tokens (Gemini has no cache write)."""
    prompt = u["input"] + u["cache_read"]
    out = {"promptTokenCount": prompt, "candidatesTokenCount": u["output"], "totalTokenCount": prompt + u["output"]}
    if u["cache_read"]:
        out["cachedContentTokenCount"] = u["cache_read"]
    return out


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _error_json(message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": "not_found_error", "message": message}}).encode()


def _approx_tokens(raw: bytes) -> int:
    return max(1, len(raw) // 4)


def _auth_digests(headers: dict[str, str]) -> dict[str, str]:
    """Which credential headers came, as SHA-256 digests of their values (never the values)."""
    import hashlib

    out = {}
    for k, v in headers.items():
        if k.lower() in ("x-api-key", "authorization", "x-goog-api-key"):
            value = v.removeprefix("Bearer ") if k.lower() == "authorization" else v
            out[k.lower()] = hashlib.sha256(value.encode()).hexdigest()
    return out


def _pick_headers(headers: dict[str, str]) -> dict[str, str]:
    keep = {"user-agent", "host", "anthropic-beta", "anthropic-version", "x-goog-api-client", "originator"}
    return {k.lower(): v for k, v in headers.items() if k.lower() in keep}


_SCHEMA_KEYS = ("responseJsonSchema", "responseSchema", "response_json_schema", "schema", "json_schema")


def find_schema(body: Any) -> dict[str, Any] | None:
    """Return the JSON schema a side request asks its answer to follow, if any (tools are ignored)."""
    if isinstance(body, dict):
        for key in _SCHEMA_KEYS:
            value = body.get(key)
            if isinstance(value, dict) and ("properties" in value or "type" in value):
                return value
            if isinstance(value, dict) and isinstance(value.get("schema"), dict):
                return value["schema"]
        for key, value in body.items():
            if key in ("tools", "messages", "contents", "input", "system", "systemInstruction", "instructions"):
                continue
            found = find_schema(value)
            if found is not None:
                return found
    elif isinstance(body, list):
        for value in body:
            found = find_schema(value)
            if found is not None:
                return found
    return None


def schema_instance(schema: dict[str, Any]) -> Any:
    """Return a minimal value that satisfies a (simple) JSON schema."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return schema_instance(schema[key][0])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    kind = str(kind).lower()
    if kind == "object":
        return {name: schema_instance(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        items = schema.get("items") or {"type": "string"}
        return [schema_instance(items) for _ in range(int(schema.get("minItems", 0)))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        high = schema.get("maximum")
        value = max(1, low) if high is None or high >= 1 else low
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    text = SIDE_TEXT
    min_len = int(schema.get("minLength", 0))
    return text + "x" * max(0, min_len - len(text))
