"""A fake Anthropic API on 127.0.0.1 for tests that drive the real ``anthropic`` SDK over real HTTP.

The server implements just enough of the API for the SDK: ``POST /v1/messages`` (JSON, or the SSE
event sequence when the body asks for ``"stream": true``), ``POST /v1/messages/count_tokens``,
``GET /v1/models`` and ``GET /v1/models/{id}``; and, for the real Codex CLI (tests/realclient),
OpenAI's ``POST /v1/responses`` as SSE, with a websocket upgrade answered 426 so Codex falls back to
HTTP. It records every request (path,
headers, JSON body, time), checks the API key (401 otherwise), counts requests in flight at once,
and plays scripted responses per endpoint (status, body, headers such as ``retry-after``, a delay)
before falling back to a default responder: for ``/v1/messages`` a valid summary that echoes the
``## `` headings and the ``ctxc archive`` citation of the request's system prompt, so happy paths
work without scripting.

Use it from a test module (assigning rather than importing the fixtures keeps ruff's F811 quiet when
tests take them as arguments)::

    import fake_anthropic

    anthropic_server = fake_anthropic.anthropic_server
    no_internet = fake_anthropic.no_internet

``anthropic_server`` starts a server per test and points ``ANTHROPIC_BASE_URL`` and
``ANTHROPIC_API_KEY`` at it; ``no_internet`` (autouse once imported) makes any socket connection or
name lookup outside loopback raise, so a test can never reach the real API.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

API_KEY = "sk-ant-test-fake-key"
KNOWN_MODELS = (
    "claude-haiku-5-5",
    "claude-sonnet-5-5",
    "claude-opus-5-5",
    "claude-haiku-4-5",
    "claude-haiku-4-5-20251001",
    "claude-sonnet-4-5",
    "claude-sonnet-4-5-20250929",
    "claude-opus-4-6",
    "claude-sonnet-4-6",
)
#: Endpoint names for scripting.
MESSAGES, COUNT_TOKENS, MODELS, RESPONSES = "messages", "count_tokens", "models", "responses"

_HEADING = re.compile(r"^## (.+?)\s*$", re.M)
_CITATION = re.compile(r"ctxc archive [0-9a-f]{12,64}(?: messages \d+(?:-\d+)?)?")


@dataclass(frozen=True)
class Scripted:
    """One scripted response. ``body`` may be a dict (sent as JSON), or str/bytes (sent as is)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None when the body was empty or not JSON
    raw: bytes
    time: float


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An Anthropic-style error body."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def message_body(
    text: str,
    *,
    model: str = "claude-haiku-4-5",
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int | None = None,
) -> dict[str, Any]:
    """A Messages API response with one text block."""
    return {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}] if text is not None else [],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens if output_tokens is not None else max(1, len(text) // 4),
        },
    }


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system)


def user_text(body: dict[str, Any]) -> str:
    """All text of the request's messages (string or block content)."""
    out: list[str] = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "\n".join(out)


def estimate_tokens(body: dict[str, Any]) -> int:
    """The fake's deterministic token count of a request: a quarter of its JSON's characters."""
    return len(json.dumps([body.get("messages") or [], body.get("system") or ""])) // 4


def default_summary(body: dict[str, Any]) -> dict[str, Any]:
    """A valid summary: the system prompt's citation on the first line, then each heading it asks for."""
    system = system_text(body)
    cite = _CITATION.search(system)
    lines = [f"Summary by the fake API. The full original is archived at {cite.group(0) if cite else '?'}."]
    for i, heading in enumerate(_HEADING.findall(system)):
        lines += ["", f"## {heading}", f"- fake point {i + 1}"]
    text = "\n".join(lines) + "\n"
    return message_body(text, model=str(body.get("model", "")), input_tokens=estimate_tokens(body))


def sse(events: list[dict[str, Any]]) -> bytes:
    """Server-sent events, one per dict, each named by its ``type`` (as both APIs frame them)."""
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n".encode() for e in events
    )


def message_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The Messages API's stream for a complete ``message``: start, each text block, delta, stop."""
    usage = dict(message.get("usage") or {})
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(message.get("content") or []):
        text = str(block.get("text", ""))
        events += [
            {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": i},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 1)},
        },
        {"type": "message_stop"},
    ]
    return events


def response_events(
    text: str, *, model: str = "gpt-5.1-codex", input_tokens: int = 10
) -> list[dict[str, Any]]:
    """The Responses API's stream for one assistant message: created, the item, completed with usage."""
    output_tokens = max(1, len(text) // 4)
    response = {"id": "resp_fake_0001", "object": "response", "model": model, "status": "in_progress"}
    item = {
        "type": "message",
        "id": "msg_fake_0001",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    return [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": [item], "usage": usage},
        },
    ]


def default_response(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A short assistant reply for ``/v1/responses``."""
    chars = len(json.dumps([body.get("input") or [], body.get("instructions") or ""]))
    return response_events(
        "Done (reply from the fake API).", model=str(body.get("model", "")), input_tokens=chars // 4
    )


class FakeAnthropic:
    """The server. ``url`` is its base URL; ``requests`` every request received, in order."""

    def __init__(
        self, api_key: str = API_KEY, models: tuple[str, ...] | None = KNOWN_MODELS, *, port: int = 0
    ) -> None:
        self.api_key = api_key
        self.models = set(models) if models is not None else None  # None: every model id exists
        self.requests: list[Recorded] = []
        self.responder: Callable[[dict[str, Any]], dict[str, Any]] = default_summary
        self.responses_responder: Callable[[dict[str, Any]], list[dict[str, Any]]] = default_response
        self._scripts: dict[str, deque[Scripted]] = {
            MESSAGES: deque(),
            COUNT_TOKENS: deque(),
            MODELS: deque(),
            RESPONSES: deque(),
        }
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, so only when it runs
            self._server.shutdown()
        self._server.server_close()

    # ----------------------------------------------------------------------------------- scripting

    def script(self, endpoint: str, *responses: Scripted) -> None:
        """Queue responses for ``endpoint`` (MESSAGES, COUNT_TOKENS or MODELS), used first in, first out."""
        with self._lock:
            self._scripts[endpoint].extend(responses)

    def pending(self, endpoint: str) -> int:
        with self._lock:
            return len(self._scripts[endpoint])

    def requests_to(self, path_prefix: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.split("?")[0].startswith(path_prefix)]

    @property
    def message_requests(self) -> list[Recorded]:
        return [r for r in self.requests_to("/v1/messages") if r.path.split("?")[0] == "/v1/messages"]

    # ------------------------------------------------------------------------------------ serving

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in h.headers.items()}
        path = h.path.split("?")[0]
        with self._lock:
            self.requests.append(Recorded(method, h.path, headers, body, raw, time.time()))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            status, payload, extra, delay = self._respond(method, path, headers, body)
            if delay:
                time.sleep(delay)
            content_type = "application/json"
            if status == 200 and isinstance(body, dict) and isinstance(payload, dict) and path in _STREAMS:
                # A streamed answer: the same message, framed as the API's event sequence.
                if path == "/v1/responses":
                    payload = sse(self.responses_responder(body))
                elif body.get("stream") is True:
                    payload = sse(message_events(payload))
                content_type = "text/event-stream" if isinstance(payload, bytes) else content_type
            data = (
                payload
                if isinstance(payload, bytes)
                else payload.encode()
                if isinstance(payload, str)
                else (json.dumps(payload).encode())
            )
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                h.send_response(status)
                h.send_header("content-type", content_type)
                h.send_header("content-length", str(len(data)))
                h.send_header("request-id", f"req_fake_{len(self.requests)}")
                for k, v in extra.items():
                    h.send_header(k, v)
                h.end_headers()
                h.wfile.write(data)
                h.wfile.flush()
        finally:
            with self._lock:
                self.in_flight -= 1

    def _respond(
        self, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str], float]:
        if headers.get("upgrade", "").lower() == "websocket":
            # Codex tries a websocket first; 426 makes it fall back to plain HTTP streaming.
            return 426, error_body("upgrade_required", "websockets are not served here"), {}, 0.0
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if key != self.api_key:
            return 401, error_body("authentication_error", "invalid x-api-key"), {}, 0.0
        if method == "POST" and path == "/v1/messages":
            endpoint = MESSAGES
        elif method == "POST" and path == "/v1/messages/count_tokens":
            endpoint = COUNT_TOKENS
        elif method == "GET" and (path.startswith("/v1/models/") or path == "/v1/models"):
            endpoint = MODELS
        elif method == "POST" and path == "/v1/responses":
            endpoint = RESPONSES
        else:
            return 404, error_body("not_found_error", f"no route {method} {path}"), {}, 0.0
        with self._lock:
            queued = self._scripts[endpoint].popleft() if self._scripts[endpoint] else None
        if queued is not None:
            return queued.status, queued.body if queued.body is not None else {}, queued.headers, queued.delay
        if not isinstance(body, dict) and method == "POST":
            return 400, error_body("invalid_request_error", "body is not a JSON object"), {}, 0.0
        if endpoint == MESSAGES:
            return 200, self.responder(body), {}, 0.0
        if endpoint == RESPONSES:
            return 200, {}, {}, 0.0  # framed from ``responses_responder`` in _handle
        if endpoint == COUNT_TOKENS:
            return 200, {"input_tokens": estimate_tokens(body)}, {}, 0.0
        if path == "/v1/models":
            listed = [_model_info(m) for m in sorted(self.models or KNOWN_MODELS)]
            return (
                200,
                {"data": listed, "has_more": False, "first_id": listed[0]["id"], "last_id": listed[-1]["id"]},
                {},
                0.0,
            )
        model = path.removeprefix("/v1/models/")
        if self.models is not None and model not in self.models:
            return 404, error_body("not_found_error", f"model: {model}"), {}, 0.0
        return 200, _model_info(model), {}, 0.0


_STREAMS = ("/v1/messages", "/v1/responses")


def _model_info(model: str) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model,
        "display_name": model.replace("-", " ").title(),
        "created_at": "2025-10-01T00:00:00Z",
        "lifecycle": "active",
    }


@pytest.fixture
def anthropic_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """A fresh fake API per test, with the SDK's environment pointing at it."""
    server = FakeAnthropic().start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", server.api_key)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_CUSTOM_HEADERS", raising=False)
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------ network guard


def _loopback(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(address: object) -> None:
    if isinstance(address, (str, bytes)):
        return  # AF_UNIX paths are local
    host = address[0] if isinstance(address, tuple) and address else address
    if not _loopback(host):
        raise ConnectionRefusedError(f"tests may only connect to loopback, not {address!r}")


@pytest.fixture(autouse=True)
def no_internet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection and name lookup that is not loopback (patches the socket module only)."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_create = socket.create_connection
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _check(address)
        return real_connect_ex(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        _check(address)
        return real_create(address, *args, **kwargs)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and not _loopback(name):
            raise socket.gaierror(socket.EAI_NONAME, f"tests may not resolve {name!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
