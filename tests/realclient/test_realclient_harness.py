"""The real-client harness itself: the fake API's framing, the request and log readers, the isolation.

These run without the clients (the isolation test needs ``unshare`` and skips without it).
"""

from __future__ import annotations

import http.client
import json
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import clients
import pytest
import wire
from fake_anthropic import FakeAnthropic, message_body, message_events, sse

API_KEY = clients.API_KEY


def _parse_sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of a server-sent-event stream, checking each frame's shape."""
    events = []
    text = raw.decode()
    assert text.endswith("\n\n")
    for frame in text.split("\n\n")[:-1]:
        lines = frame.split("\n")
        assert len(lines) == 2, frame
        assert lines[0].startswith("event: ")
        assert lines[1].startswith("data: ")
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == lines[0].removeprefix("event: ")
        events.append((data["type"], data))
    return events


def _post(server: FakeAnthropic, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(
            "POST" if body is not None else "GET",
            path,
            body=payload,
            headers={"x-api-key": API_KEY, "content-type": "application/json", **(headers or {})},
        )
        response = conn.getresponse()
        return response.status, response.getheader("content-type"), response.read()
    finally:
        conn.close()


@pytest.fixture
def server() -> Any:
    fake = FakeAnthropic(api_key=API_KEY, models=None).start()
    try:
        yield fake
    finally:
        fake.stop()


def test_messages_stream_is_the_sse_sequence_of_the_json_answer(server: FakeAnthropic) -> None:
    body = {"model": "claude-any-1", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    status, kind, raw = _post(server, "/v1/messages", body)
    assert (status, kind) == (200, "application/json")
    answer = json.loads(raw)
    status, kind, raw = _post(server, "/v1/messages?beta=true", {**body, "stream": True})
    assert (status, kind) == (200, "text/event-stream")
    events = _parse_sse(raw)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["content"] == []
    assert events[2][1]["delta"]["text"] == answer["content"][0]["text"]
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"
    assert [r.body for r in server.message_requests] == [body, {**body, "stream": True}]


def test_message_events_frame_every_block() -> None:
    message = message_body("one")
    message["content"].append({"type": "text", "text": "two"})
    events = _parse_sse(sse(message_events(message)))
    deltas = [(d["index"], d["delta"]["text"]) for name, d in events if name == "content_block_delta"]
    assert deltas == [(0, "one"), (1, "two")]


def test_responses_stream_for_codex(server: FakeAnthropic) -> None:
    body = {
        "model": "gpt-test",
        "stream": True,
        "input": [{"type": "message", "role": "user", "content": []}],
    }
    status, kind, raw = _post(server, "/v1/responses", body, {"authorization": f"Bearer {API_KEY}"})
    assert (status, kind) == (200, "text/event-stream")
    events = _parse_sse(raw)
    assert [name for name, _ in events] == [
        "response.created",
        "response.output_item.done",
        "response.completed",
    ]
    item = events[1][1]["item"]
    assert (item["type"], item["role"], item["content"][0]["type"]) == ("message", "assistant", "output_text")
    usage = events[2][1]["response"]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0


def test_websocket_upgrade_gets_426_other_routes_404(server: FakeAnthropic) -> None:
    upgrade = {"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-version": "13"}
    assert _post(server, "/v1/responses", None, upgrade)[0] == 426
    assert _post(server, "/v1/chat/completions", {"model": "x"})[0] == 404
    assert _post(server, "/v1/messages", {"model": "x"}, {"x-api-key": "wrong"})[0] == 401


def test_models_and_count_tokens(server: FakeAnthropic) -> None:
    status, _, raw = _post(server, "/v1/models?limit=20", None)
    listed = json.loads(raw)
    assert status == 200
    assert listed["data"]
    assert listed["has_more"] is False
    assert json.loads(_post(server, "/v1/models/claude-whatever-9", None)[2])["id"] == "claude-whatever-9"
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 400}]}
    assert json.loads(_post(server, "/v1/messages/count_tokens", body)[2])["input_tokens"] > 100


# ------------------------------------------------------------------------------------ request readers


def _claude_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


def test_pairing_finds_orphans_and_unanswered_calls() -> None:
    good = _claude_body(
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok"}]},
    )
    assert wire.pairing_problems(wire.claude_items(good)) == []
    orphan = _claude_body(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "z", "content": ""}]}
    )
    assert wire.pairing_problems(wire.claude_items(orphan)) == [
        "result 'z' (item 0) answers no call before it"
    ]
    codex = {
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
        ]
    }
    assert wire.pairing_problems(wire.codex_items(codex)) == ["call 'c2' (item 1) is never answered"]


def test_first_request_is_the_one_with_the_prompt() -> None:
    side = {
        "method": "POST",
        "path": "/v1/messages?beta=true",
        "body": _claude_body({"role": "user", "content": "t"}),
    }
    main = _claude_body(
        {"role": "user", "content": "old"},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}]},
        {"role": "user", "content": [{"type": "text", "text": clients.PROMPT}]},
    )
    requests = [side, {"method": "GET", "path": "/v1/models", "body": None}, {**side, "body": main}]
    assert wire.first_request(requests, "/v1/messages", clients.PROMPT) is main
    assert wire.first_request(requests[:2], "/v1/messages", clients.PROMPT) is None


def test_text_checks_ignore_whitespace_and_frame_summaries() -> None:
    haystack = wire.request_text(
        [wire.Item(wire.TEXT, "user", "Fix   the\nbug"), wire.Item(wire.TEXT, "user", "now")]
    )
    assert wire.contains(haystack, "Fix the bug now")
    assert not wire.contains(haystack, "Fix the bugs")
    summary = "S" * 300 + " middle " + "E" * 300
    framed = wire.normalize("Earlier conversation, summarized: " + "S" * 300 + " (trimmed) " + "E" * 300)
    assert wire.contains_summary(framed, summary)
    assert not wire.contains_summary(framed, "S" * 300 + " x " + "F" * 300)


def test_requests_skip_wrappers_and_keep_command_arguments() -> None:
    assert (
        wire.as_request("<command-message>review</command-message>\n<command-name>/review</command-name>")
        is None
    )
    cmd = "<command-name>/fix</command-name>\n<command-args>the flaky test</command-args>"
    assert wire.as_request(cmd) == "the flaky test"
    for text in (
        "<environment_context>\n<cwd>/x</cwd>",
        "<user_instructions>a",
        "[Request interrupted by user]",
        " ",
    ):
        assert wire.as_request(text) is None
    assert wire.as_request("  Please fix the slug bug \n") == "Please fix the slug bug"


def _write(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_claude_log_requests_and_summaries(tmp_path: Path) -> None:
    def user(content: Any, **extra: Any) -> dict[str, Any]:
        return {"type": "user", "sessionId": "s1", "message": {"role": "user", "content": content}, **extra}

    own = "This session is being continued from a previous conversation. Summary: the plan."
    ctxc = "Summary of messages 1-3 (ctxc extractive). ctxc archive 0123456789ab\n\n## Session intent\n- x"
    log = _write(
        tmp_path / "s.jsonl",
        user("first ask"),
        user([{"type": "tool_result", "tool_use_id": "a", "content": "out"}]),
        user("side ask", isSidechain=True),
        user("<command-name>/compact</command-name>"),
        user(own, isCompactSummary=True),
        user(ctxc, isCompactSummary=True),
        user([{"type": "text", "text": "last ask"}]),
    )
    assert wire.claude_requests(log) == ["first ask", "last ask"]
    assert wire.own_summary(log, codex=False) == own
    assert wire.ctxc_summary(log, codex=False) == ctxc
    assert clients.claude_session_id(log) == "s1"


def test_codex_summaries_prefer_the_opaque_compaction_item(tmp_path: Path) -> None:
    def compacted(message: str, history: list[Any]) -> dict[str, Any]:
        return {"type": "compacted", "payload": {"message": message, "replacement_history": history}}

    log = _write(
        tmp_path / "r.jsonl",
        {
            "type": "session_meta",
            "timestamp": "t",
            "payload": {"id": "abc", "timestamp": "2026-03-23T08:41:07.512Z"},
        },
        compacted("local summary", []),
        compacted("", [{"type": "compaction", "encrypted_content": "gAAAA-opaque"}]),
    )
    assert wire.codex_compact_summaries(log) == ["local summary", "gAAAA-opaque"]
    assert wire.own_summary(log, codex=True) == "gAAAA-opaque"
    assert clients.codex_session(log) == ("abc", "2026-03-23T08:41:07.512Z")


def test_pi_readers_follow_the_branch_pi_resumes(tmp_path: Path) -> None:
    def entry(n: int, parent: int | None, role: str, content: Any) -> dict[str, Any]:
        message = {"role": role, "content": content}
        return {
            "type": "message",
            "id": f"e{n}",
            "parentId": f"e{parent}" if parent else None,
            "message": message,
        }

    placeholder = (
        "[ctxc] 2 earlier messages (indexes 1-2) were removed; ctxc archive 0123456789ab messages 1-2"
    )
    log = _write(
        tmp_path / "pi.jsonl",
        {"type": "session", "version": 2, "id": "s", "cwd": "/x"},
        entry(1, None, "user", "first ask"),
        entry(2, 1, "user", [{"type": "text", "text": "abandoned ask"}]),
        {"type": "compaction", "id": "e3", "parentId": "e1", "summary": "pi's summary"},
        entry(4, 3, "user", [{"type": "text", "text": placeholder}]),
        entry(5, 4, "toolResult", [{"type": "text", "text": "[ctxc: read result removed]"}]),
        entry(6, 5, "user", [{"type": "text", "text": "last ask"}]),
    )
    assert wire.pi_requests(log) == ["first ask", "last ask"]
    assert wire.pi_left_requests(log) == ["abandoned ask"]
    assert wire.pi_ctxc_texts(log) == [placeholder, "[ctxc: read result removed]"]
    assert wire.pi_own_summary(log) == "pi's summary"
    v1 = _write(
        tmp_path / "v1.jsonl",
        {"type": "session"},
        *(
            {k: v for k, v in e.items() if k != "parentId"}
            for e in (entry(1, None, "user", "one"), entry(2, None, "user", "two"))
        ),
    )
    assert wire.pi_requests(v1) == ["one", "two"]


# ------------------------------------------------------------------------------------------ clients


def test_claude_project_dir_replaces_every_non_alphanumeric() -> None:
    got = clients.claude_project_dir(Path("/h"), Path("/tmp/pytest-1/real_client.x/project"))
    assert got == Path("/h/.claude/projects/-tmp-pytest-1-real-client-x-project")


def test_codex_config_points_at_the_fake_and_turns_off_network_features() -> None:
    config = tomllib.loads(clients.codex_config())
    assert config["model_provider"] == "openai"
    assert config["openai_base_url"] == f"http://127.0.0.1:{clients.PORT}/v1"
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"]["enabled"] is False
    assert {"apps", "plugins", "in_app_updates"} <= {k for k, v in config["features"].items() if v is False}


def test_pi_session_copy_moves_only_the_header_cwd(tmp_path: Path) -> None:
    body = b'{"type":"message","message":{"role":"user","content":"caf\\u00e9  x"}}\r\n{"type":"x"}'
    log = tmp_path / "in.jsonl"
    log.write_bytes(b'{"type":"session","id":"s","cwd":"/Users/me/gone","version":3}\n' + body)
    clients.pi_session_copy(log, tmp_path / "out" / "s.jsonl", tmp_path / "project")
    header, rest = (tmp_path / "out" / "s.jsonl").read_bytes().split(b"\n", 1)
    assert json.loads(header) == {
        "type": "session",
        "id": "s",
        "cwd": str(tmp_path / "project"),
        "version": 3,
    }
    assert rest == body


def test_missing_tools_make_the_clients_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients.shutil, "which", lambda name: None)
    with pytest.raises(clients.Unavailable, match="unshare"):
        clients.install(clients.CLAUDE)


def test_the_sandbox_reaches_its_fake_api_and_nothing_else(tmp_path: Path) -> None:
    problem = clients.isolation_problem()
    if problem:
        pytest.skip(problem)
    probe = textwrap.dedent(
        f"""
        import json, socket, urllib.request
        request = urllib.request.Request("http://127.0.0.1:{clients.PORT}/v1/models",
                                         headers={{"x-api-key": "{API_KEY}"}})
        print(json.load(urllib.request.urlopen(request, timeout=10))["has_more"])
        for address in (("192.0.2.1", 80), ("1.1.1.1", 443)):
            try:
                socket.create_connection(address, timeout=5)
                print("reached", address)
            except OSError:
                print("unreachable")
        """
    )
    run = clients.run_isolated(
        [sys.executable, "-c", probe], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, work=tmp_path
    )
    assert run.ok, run.describe()
    assert run.stdout.split() == ["False", "unreachable", "unreachable"]
    assert [(r["method"], r["path"]) for r in run.requests] == [("GET", "/v1/models")]
