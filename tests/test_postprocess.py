"""Per-tool post-processors on realistic tool outputs: what each keeps, what it drops, what it says."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxc.archive_store import CITATION_RE, citation
from ctxc.compaction.postprocess import (
    ERROR_RE,
    Request,
    ToolCall,
    call_summary,
    kind_of,
    postprocess,
    request_terms,
)

ARCHIVE_ID = "3f2a9c1b4d5e" + "0" * 52
CITE = citation(ARCHIVE_ID, 12, 12)
NO_REQUEST = Request()


def _body(out: str) -> list[str]:
    """The shrunk text without its note line."""
    return out.split("\n")[1:]


def _note(out: str) -> str:
    return out.split("\n", 1)[0]


def _elided_total(lines: list[str]) -> int:
    return sum(int(m.group(1)) for x in lines if (m := re.fullmatch(r"… (\d+) lines? elided …", x)))


# ------------------------------------------------------------------------------------ command runs

PYTEST_OUTPUT = "\n".join(
    [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /work/app",
        "configfile: pyproject.toml",
        "plugins: hypothesis-6.111.0",
        "collected 84 items",
        "",
        *[
            f"tests/test_models.py::test_model_roundtrip[case{i}] PASSED{' ' * 20}[{i:3d}%]"
            for i in range(60)
        ],
        "tests/test_parser.py::test_parse_header FAILED                          [ 72%]",
        *[
            f"tests/test_parser.py::test_parse_body[{i}] PASSED                    [ 8{i}%]"
            for i in range(10)
        ],
        "",
        "=================================== FAILURES ===================================",
        "______________________________ test_parse_header _______________________________",
        "Traceback (most recent call last):",
        '  File "/work/app/tests/test_parser.py", line 41, in test_parse_header',
        '    header = parse_header(b"\\x00\\x01garbage")',
        '  File "/work/app/app/parser.py", line 88, in parse_header',
        '    magic, version = struct.unpack(">HH", data[:4])',
        "                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "struct.error: unpack requires a buffer of 4 bytes",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/work/app/app/parser.py", line 90, in parse_header',
        '    raise HeaderError(f"bad header: {data[:8]!r}")',
        "app.parser.HeaderError: bad header: b'\\x00\\x01garbage'",
        *[f"captured log line {i}: request served in {i}ms" for i in range(30)],
        "=========================== short test summary info ============================",
        "FAILED tests/test_parser.py::test_parse_header - app.parser.HeaderError: bad header",
        "========================= 1 failed, 83 passed in 2.31s =========================",
    ]
)


def test_command_keeps_tail_errors_and_whole_tracebacks() -> None:
    call = ToolCall("Bash", {"command": "pytest -q tests/", "description": "Run the tests"})
    out = postprocess(PYTEST_OUTPUT, call, NO_REQUEST, CITE)
    assert out is not None
    assert len(out) < len(PYTEST_OUTPUT)
    body = _body(out)
    lines = PYTEST_OUTPUT.split("\n")
    # The final output: the last 20 lines, in order, at the end.
    tail = [x for x in body if not x.startswith("… ")][-20:]
    assert tail == lines[-20:]
    # Every error line outside the tail survives.
    for line in lines[:-20]:
        if ERROR_RE.search(line):
            assert line in body, line
    # Both tracebacks are kept whole: frames, source lines and the exception line, contiguous.
    for start in [i for i, x in enumerate(lines) if x.startswith("Traceback")]:
        end = start + 1
        while lines[end].startswith("  "):
            end += 1
        block = lines[start : end + 1]
        assert len(block) >= 4
        assert any(body[p : p + len(block)] == block for p in range(len(body))), block
    # Passing test lines are elided, and the markers account for every dropped line.
    assert "tests/test_models.py::test_model_roundtrip[case5] PASSED" not in out
    kept = [x for x in body if not x.startswith("… ")]
    assert len(kept) + _elided_total(body) == len(lines)
    note = _note(out)
    assert note.startswith("[ctxc: Bash result of `pytest -q tests/` shrunk: kept the last 20 lines")
    assert CITE in note
    assert CITATION_RE.search(note) is not None


def test_command_output_that_is_all_tail_is_not_shrunk() -> None:
    short = "\n".join(f"line {i}" for i in range(20))
    assert postprocess(short, ToolCall("bash", {"command": "ls"}), NO_REQUEST, CITE) is None


def test_codex_json_envelope_is_unwrapped_and_exit_code_kept() -> None:
    output = "\n".join(
        [*(f"compiling crate_{i} v0.{i}.0" for i in range(80)), "error[E0308]: mismatched types"]
    )
    output += "\n" + "\n".join(f"  --> src/lib.rs:{i}:5" for i in range(25))
    text = orjson.dumps({"output": output, "metadata": {"exit_code": 101, "duration_seconds": 3.2}}).decode()
    call = ToolCall("shell", {"command": ["bash", "-lc", "cargo build"], "workdir": "/w"})
    out = postprocess(text, call, NO_REQUEST, CITE)
    assert out is not None
    assert "exit code 101" in _note(out)
    assert "`cargo build`" in _note(out)
    assert "error[E0308]: mismatched types" in _body(out)
    assert "compiling crate_3 v0.3.0" not in out


# --------------------------------------------------------------------------------------- file reads


def _python_file(n: int) -> list[str]:
    lines = [f"    value_{i} = compute({i})  # step {i}" for i in range(1, n + 1)]
    lines[199] = "def parse_header(data: bytes) -> Header:"
    if n >= 350:
        lines[349] = "    header = parse_header(raw)"
    return lines


def test_read_keeps_request_relevant_lines_with_context_and_numbers() -> None:
    source = _python_file(400)
    text = "\n".join(f"{i:6d}→{line}" for i, line in enumerate(source, 1))
    request = Request.of("Why does parse_header fail on short buffers? Please fix it.")
    call = ToolCall("Read", {"file_path": "/work/app/app/parser.py"})
    out = postprocess(text, call, request, CITE)
    assert out is not None
    body = _body(out)
    numbered = [x for x in body if "→" in x]
    kept_numbers = [int(x.split("→")[0]) for x in numbered]
    assert kept_numbers == [*range(195, 206), *range(345, 356)]
    # Lines keep their original numbering and text.
    assert f"{200:6d}→def parse_header(data: bytes) -> Header:" in body
    assert body[0] == "… 194 lines elided …"
    assert body[-1] == "… 45 lines elided …"
    assert "… 139 lines elided …" in body
    assert len(numbered) + _elided_total(body) == 400
    note = _note(out)
    assert "`/work/app/app/parser.py`" in note
    assert "parse_header" in note
    assert CITE in note


def test_read_keeps_cat_n_header_and_works_without_line_numbers() -> None:
    source = _python_file(300)
    header = "Here's the result of running `cat -n` on /workspace/app/parser.py:"
    text = header + "\n" + "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(source, 1))
    request = Request.of("parse_header")
    out = postprocess(
        text, ToolCall("str_replace_editor", {"command": "view", "path": "/w/p.py"}), request, CITE
    )
    assert out is not None
    assert _body(out)[0] == header
    assert "`view /w/p.py`" in _note(out)

    plain = "\n".join(_python_file(300))
    out = postprocess(plain, ToolCall("read", {"path": "src/parser.py"}), request, CITE)
    assert out is not None
    body = _body(out)
    assert "def parse_header(data: bytes) -> Header:" in body
    assert body[0] == "… 194 lines elided …"
    assert len([x for x in body if not x.startswith("… ")]) + _elided_total(body) == 300


def test_read_with_no_relevant_line_elides_everything_and_says_so() -> None:
    text = "\n".join(f"{i:6d}→x = {i}" for i in range(1, 200))
    out = postprocess(
        text, ToolCall("ReadFile", {"path": "a.py"}), Request.of("rename the ColumnTransformer"), CITE
    )
    assert out is not None
    assert _body(out) == ["… 199 lines elided …"]
    assert "mentions the current request" in _note(out)


# ------------------------------------------------------------------------------------------ searches


def test_grep_with_40_matches_keeps_the_top_3() -> None:
    matches = [f"cmd/entire/cli/file_{i}.go:{10 + i}:\tcwd, err := os.Getwd()" for i in range(40)]
    text = "\n".join(matches) + "\n"
    call = ToolCall("Grep", {"pattern": r"os\.Getwd\(\)", "path": "cmd/entire", "output_mode": "content"})
    out = postprocess(text, call, NO_REQUEST, CITE)
    assert out is not None
    assert _body(out) == [*matches[:3], "… 37 more results dropped …"]
    note = _note(out)
    assert "kept the top 3 of 40 results, 37 dropped" in note
    assert r"`os\.Getwd\(\) in cmd/entire`" in note


def test_grep_context_groups_are_results() -> None:
    groups = [
        [f"a.py-{g * 10 + k}-context" for k in range(3)] + [f"a.py:{g * 10 + 3}:match"] for g in range(6)
    ]
    text = "\n--\n".join("\n".join(g) for g in groups)
    out = postprocess(text, ToolCall("rg", {"pattern": "match"}), NO_REQUEST, CITE)
    assert out is not None
    body = "\n".join(_body(out))
    assert "a.py:23:match" in body
    assert "a.py:33:match" not in body
    assert "kept the top 3 of 6 results, 3 dropped" in _note(out)


def test_glob_file_list_with_a_header() -> None:
    files = [f"/repo/lib/spotter/module_{i}.ex" for i in range(12)]
    text = "Found 12 files\n" + "\n".join(files)
    out = postprocess(text, ToolCall("Glob", {"pattern": "**/*.ex"}), NO_REQUEST, CITE)
    assert out is not None
    assert _body(out) == ["Found 12 files", *files[:3], "… 9 more results dropped …"]


def test_claude_code_web_search_keeps_top_3_links() -> None:
    links = [
        {"title": f"Issue #{i} · xtermjs/xterm.js", "url": f"https://github.com/xtermjs/xterm.js/issues/{i}"}
        for i in range(10)
    ]
    text = (
        'Web search results for query: "xterm.js scroll"\n\n'
        f"Links: {orjson.dumps(links).decode()}\n\n"
        "Based on the search results, scrolling is captured by the viewport.\n\n"
        "## Key Issues Found:\n\n**Scroll Event Behavior:**\nThe onScroll event only fires on new lines.\n"
    )
    out = postprocess(text, ToolCall("WebSearch", {"query": "xterm.js scroll"}), NO_REQUEST, CITE)
    assert out is not None
    body = _body(out)
    assert body[0] == 'Web search results for query: "xterm.js scroll"'
    assert body[1:] == [
        f"- Issue #{i} · xtermjs/xterm.js <https://github.com/xtermjs/xterm.js/issues/{i}>" for i in range(3)
    ]
    assert "kept the top 3 of 10 results, 7 dropped" in _note(out)


def test_blank_line_separated_search_results() -> None:
    results = [
        f"Title: Result {i}\nURL: https://example.org/{i}\nSummary: Snippet number {i} about context windows."
        for i in range(8)
    ]
    text = "\n\n".join(results)
    out = postprocess(text, ToolCall("SearchWeb", {"query": "context windows"}), NO_REQUEST, CITE)
    assert out is not None
    body = "\n".join(_body(out))
    assert "\n\n".join(results[:3]) in body
    assert "Result 3" not in body
    assert "5 more results dropped" in body


def test_json_result_list_keeps_top_3_items() -> None:
    items = [{"name": f"index {i}", "daily": f"+0.{i}%"} for i in range(9)]
    out = postprocess(
        orjson.dumps(items).decode(), ToolCall("web_search", {"q": "indices"}), NO_REQUEST, CITE
    )
    assert out is not None
    assert [orjson.loads(x) for x in _body(out)] == items[:3]


def test_search_with_few_results_is_not_shrunk() -> None:
    assert postprocess("a.py:1:x\nb.py:2:x\n", ToolCall("Grep", {"pattern": "x"}), NO_REQUEST, CITE) is None


# --------------------------------------------------------------------------------- choosing by tool


@pytest.mark.parametrize(
    ("name", "tool_input", "kind"),
    [
        ("Read", {"file_path": "a"}, "read"),
        ("ReadFile", {"path": "a"}, "read"),
        ("read", {"path": "a"}, "read"),
        ("WebFetch", {"url": "https://x", "prompt": "p"}, "read"),
        ("Bash", {"command": "ls"}, "command"),
        ("exec_command", '{"cmd": "ls"}', "command"),
        ("shell", {"command": ["bash", "-lc", "ls"]}, "command"),
        ("execute_bash", {"command": "ls"}, "command"),
        ("run_ipython", {"code": "1"}, "command"),
        ("Grep", {"pattern": "x", "path": "src"}, "search"),
        ("Glob", {"pattern": "*.py"}, "search"),
        ("WebSearch", {"query": "q"}, "search"),
        ("mcp__github__search", {}, "search"),
        ("functions.shell", {}, "command"),
        # Unknown names fall back on the shape of the input.
        ("my_lister", {"query": "x", "path": "src"}, "search"),
        ("Edit", {"file_path": "a", "old_string": "x", "new_string": "y"}, "read"),
        ("run_tests", {"cmd": "make test"}, "command"),
        ("TodoWrite", {"todos": []}, None),
        ("apply_patch", "*** Begin Patch", None),
    ],
)
def test_processor_choice(name: str, tool_input: object, kind: str | None) -> None:
    assert kind_of(ToolCall(name, tool_input)) == kind


def test_call_summary() -> None:
    assert call_summary(ToolCall("shell", {"command": ["bash", "-lc", "rg -n ollama"]})) == "`rg -n ollama`"
    assert call_summary(ToolCall("shell", {"command": ["git", "status"]})) == "`git status`"
    assert call_summary(ToolCall("Read", {"file_path": "/a/b.py", "limit": 20})) == "`/a/b.py`"
    assert call_summary(ToolCall("x", {"command": "a\n  b"})) == "`a b`"
    assert call_summary(ToolCall("x", {})) == ""
    long = call_summary(ToolCall("Bash", {"command": "x" * 200}), limit=40)
    assert len(long) == 42
    assert long.endswith("…`")


# ---------------------------------------------------------------------------------- the request


def test_request_terms() -> None:
    terms = request_terms(
        "Please fix the parse_header function in ColumnTransformer, it does not work with data"
    )
    assert terms[:2] == ("parse_header", "columntransformer")
    assert "data" in terms
    for gone in ("please", "function", "with", "fix", "the", "it"):
        assert gone not in terms
    assert request_terms("d9964aa40a9cfda93fa00ce59812881150180a deadbeef") == ("deadbeef",)


# ---------------------------------------------------------------------------------------- property

_LINE = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=60),
    st.sampled_from(
        ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad", "--", ""]
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(_LINE, max_size=80),
    name=st.sampled_from(["Bash", "Read", "Grep", "WebSearch", "shell", "read", "Glob"]),
    request=st.text(max_size=40),
)
def test_postprocess_never_grows_and_always_cites(lines: list[str], name: str, request: str) -> None:
    text = "\n".join(lines)
    out = postprocess(
        text, ToolCall(name, {"command": "x", "path": "p", "pattern": "q"}), Request.of(request), CITE
    )
    if out is not None:
        assert len(out) < len(text)
        assert CITE in _note(out)
        assert out == postprocess(
            text, ToolCall(name, {"command": "x", "path": "p", "pattern": "q"}), Request.of(request), CITE
        )
