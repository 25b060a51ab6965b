"""The extractive summarizer: fixed sections, citation, budget, tiers, folding, focus, Korean.

The synthetic session below is shaped like a real Claude Code / Codex session: requests, decisions,
file reads and writes, a failing test run and its fix, searches, a todo list and a stated plan.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params

from ctxc.archive_store import CITATION_RE
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.summarize import ESSENTIAL_SECTIONS, SECTIONS, SummaryRequest, get_summarizer, summarizer_names
from ctxc.summarize.extractive import ExtractiveSummarizer, tier_messages
from ctxc.summarize.facts import FIRST_REQUEST_FLOOR, focus_words
from ctxc.summarize.toolcalls import classify_call, error_line, shorten
from ctxc.tokens import make_counter

CITATION = "ctxc archive 3f2a9c1b4d5e messages 0-40"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def o200k() -> Callable[[str], int]:
    counter = make_counter("o200k_base", use_cache=False)
    return lambda text: counter.count([text])[0] if text else 0


def words(text: str) -> int:
    return len(text.split())


# ---------------------------------------------------------------------------------------------------
# A realistic synthetic session


def user(text: str, i: int, **meta: Any) -> Message:
    return Message(role="user", blocks=(TextBlock(text),), index=i, line=i + 1, meta=meta)


def say(text: str, i: int, *calls: ToolUseBlock) -> Message:
    blocks: tuple[Any, ...] = ((TextBlock(text),) if text else ()) + calls
    return Message(role="assistant", blocks=blocks, index=i, line=i + 1)


def call(cid: str, name: str, **inp: Any) -> ToolUseBlock:
    return ToolUseBlock(id=cid, name=name, input=inp)


def result(cid: str, text: str, i: int, *, is_error: bool = False, **meta: Any) -> Message:
    return Message(
        role="user",
        blocks=(ToolResultBlock(tool_use_id=cid, text=text, is_error=is_error),),
        index=i,
        line=i + 1,
        meta=meta,
    )


FIRST_REQUEST = (
    "Build a small inventory service: a REST API over a database, with tests. "
    "재고 관리 서비스를 만들어 주세요. 데이터베이스는 신중하게 골라 주세요."
)
TRACEBACK = (
    "============================= test session starts ==============================\n"
    "tests/test_api.py F\n"
    "Traceback (most recent call last):\n"
    '  File "tests/test_api.py", line 12, in test_count\n'
    "    assert count_items() == 3\n"
    "AssertionError: expected 3 items, got 2\n"
    "FAILED tests/test_api.py::test_count - AssertionError: expected 3 items, got 2\n"
)


def session() -> tuple[Message, ...]:
    msgs = [
        user(FIRST_REQUEST, 0),
        say(
            "Let me look at the layout first.",
            1,
            call("c1", "Read", file_path="src/app.py"),
            call("c2", "Glob", pattern="**/*.py"),
        ),
        Message(
            role="user",
            blocks=(
                ToolResultBlock("c1", "def main():\n    raise ValueError('not configured')\n"),
                ToolResultBlock("c2", "src/app.py\nsrc/models.py"),
            ),
            index=2,
            line=3,
        ),
        say(
            "We'll use PostgreSQL instead of SQLite, because the service needs concurrent writers. "
            "인증에는 JWT를 사용하기로 결정했습니다.",
            3,
            call("c3", "Write", file_path="src/db.py", content="import psycopg\n"),
        ),
        result("c3", "File created successfully at: src/db.py", 4),
        say("", 5, call("c4", "Edit", file_path="src/app.py", old_string="a", new_string="b")),
        result("c4", "The file src/app.py has been updated.", 6),
        say("", 7, call("c5", "Bash", command="cd /repo && pytest -q tests/test_api.py")),
        result("c5", TRACEBACK, 8, is_error=True),
        say(
            "The count query misses archived rows.",
            9,
            call("c6", "Edit", file_path="src/db.py", old_string="x", new_string="y"),
        ),
        result("c6", "The file src/db.py has been updated.", 10),
        say("", 11, call("c7", "Bash", command="cd /repo && pytest -q tests/test_api.py")),
        result("c7", "3 passed in 0.12s", 12),
        user("좋아요. 이제 마이그레이션도 추가해 주세요.", 13),
        say(
            "",
            14,
            call("c8", "Grep", pattern="migrate", path="src"),
            call("c9", "Bash", command="ls -la migrations"),
            call("c10", "Read", file_path="src/models.py"),
        ),
        Message(
            role="user",
            blocks=(
                ToolResultBlock("c8", "src/models.py:3: # migrate later"),
                ToolResultBlock("c9", "total 0"),
                ToolResultBlock("c10", "class Item: ...  # raise KeyError when missing"),
            ),
            index=15,
            line=16,
        ),
        say(
            "",
            16,
            call(
                "c11",
                "TodoWrite",
                todos=[
                    {"content": "Write the schema migration", "status": "in_progress"},
                    {"content": "Add the stock endpoint", "status": "pending"},
                    {"content": "Pick the database", "status": "completed"},
                ],
            ),
        ),
        result("c11", "Todos have been modified successfully.", 17),
        say(
            "The tests pass now. Next, I need to add the migration for the items table, "
            "then wire the stock endpoint.",
            18,
        ),
    ]
    return tuple(msgs)


def summarize(
    messages: Sequence[Message],
    count: Callable[[str], int] = words,
    budget: int = 100_000,
    **kw: Any,
) -> str:
    request = SummaryRequest(
        messages=tuple(messages), citation=kw.pop("citation", CITATION), budget=budget, **kw
    )
    return ExtractiveSummarizer().summarize(request, count)


def sections_of(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = []
        elif current is not None and line.startswith("- "):
            out[current].append(line[2:])
        elif current is not None and line.startswith("  ") and out[current]:
            out[current][-1] += "\n" + line[2:]
    return out


def headings(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


# ---------------------------------------------------------------------------------------------------
# Shape


def test_registered_as_default_name() -> None:
    assert "extractive" in summarizer_names()
    assert isinstance(get_summarizer("extractive"), ExtractiveSummarizer)


def test_sections_in_order_with_citation_line_first() -> None:
    text = summarize(session())
    first = text.splitlines()[0]
    assert first.startswith("Summary of messages 0-40")
    assert f"The full original is archived: {CITATION};" in first
    assert "ctxc restore" in first
    assert "ctxc show" in first
    assert CITATION_RE.search(first) is not None
    assert headings(text) == list(SECTIONS)


def test_empty_span_says_none_recorded() -> None:
    text = summarize([say("ok", 0)])
    secs = sections_of(text)
    for name in (
        "Session intent",
        "Decisions",
        "Artifacts and files touched",
        "Errors and fixes",
        "Next steps",
    ):
        assert secs[name] == ["none recorded"], name


def test_essential_has_only_essential_sections() -> None:
    text = summarize(session(), essential=True)
    assert headings(text) == list(ESSENTIAL_SECTIONS)
    assert "We'll use PostgreSQL" not in text  # decisions are not an essential section
    assert FIRST_REQUEST in text


def test_range_falls_back_to_message_indexes_without_a_range_in_the_citation() -> None:
    text = summarize(session(), citation="ctxc archive 3f2a9c1b4d5e")
    assert text.startswith("Summary of messages 0-18 ")


# ---------------------------------------------------------------------------------------------------
# What is extracted


def test_requests_first_verbatim_later_ones_kept() -> None:
    secs = sections_of(summarize(session()))
    intent = secs["Session intent"]
    assert intent[0] == f"msg 0 (user): {FIRST_REQUEST}"
    assert intent[1] == "msg 13 (user): 좋아요. 이제 마이그레이션도 추가해 주세요."
    assert len(intent) == 2  # tool results are not requests


def test_decisions_quoted_verbatim_korean_included() -> None:
    decisions = sections_of(summarize(session()))["Decisions"]
    quote = "We'll use PostgreSQL instead of SQLite, because the service needs concurrent writers."
    assert f'msg 3 (assistant): "{quote}"' in decisions
    assert 'msg 3 (assistant): "인증에는 JWT를 사용하기로 결정했습니다."' in decisions
    # "Let me look at the layout first." announces a look, not a decision.
    assert not any("layout" in d for d in decisions)


def test_files_grouped_created_edited_read_with_counts() -> None:
    artifacts = sections_of(summarize(session()))["Artifacts and files touched"]
    assert "created src/db.py (then 1 edit, msgs 3-9)" in artifacts
    assert "edited src/app.py (1 edit, msg 5)" in artifacts
    # src/app.py was changed, so only models.py counts as read; the listing and searches are counts.
    assert "read 1 file (src/models.py)" in artifacts
    assert "routine: 2 searches, 1 listing" in artifacts
    assert any(a.startswith("ran 2 commands (pytest tests/test_api.py x2") for a in artifacts)
    # Events come before the routine counts.
    assert artifacts.index("edited src/app.py (1 edit, msg 5)") < artifacts.index(
        "routine: 2 searches, 1 listing"
    )


def test_error_paired_with_the_fix() -> None:
    errors = sections_of(summarize(session()))["Errors and fixes"]
    assert errors == [
        "msg 7: AssertionError: expected 3 items, got 2 [Bash `pytest -q tests/test_api.py`]"
        " → fixed after changing src/db.py: succeeded at msg 11"
    ]


def test_read_results_mentioning_errors_are_not_errors() -> None:
    # src/app.py's content says "raise ValueError" and models.py "raise KeyError": code, not outcomes.
    text = summarize(session())
    assert "ValueError" not in text
    assert "KeyError" not in text


def test_current_state_and_next_steps() -> None:
    secs = sections_of(summarize(session()))
    state = secs["Current state"]
    assert state[0].startswith("last assistant message (msg 18): The tests pass now.")
    assert "msg 16 TodoWrite → ok" in state
    nxt = secs["Next steps"]
    assert nxt[0] == "open plan items (msg 16): [in_progress] Write the schema migration"
    assert nxt[1] == "[pending] Add the stock endpoint"
    assert not any("Pick the database" in n for n in nxt)  # completed
    assert any("Next, I need to add the migration" in n for n in nxt)


def test_stale_plan_sentence_is_not_the_next_step() -> None:
    msgs = [
        user("fix the bug", 0),
        say("I will need to patch parser.py next.", 1),
        say("Patched.", 2),
        say("Tests are green.", 3),
        say("Committed as abc123.", 4),
    ]
    assert sections_of(summarize(msgs))["Next steps"] == ["none recorded"]


def test_client_injected_text_is_not_a_request() -> None:
    msgs = [
        user("<command-name>/compact</command-name>\n<command-message>compact</command-message>", 0),
        user("<system-reminder>be brief</system-reminder>", 1),
        user("caveat", 2, is_meta=True),
        user("please rename the module", 3),
    ]
    assert sections_of(summarize(msgs))["Session intent"] == ["msg 3 (user): please rename the module"]


def test_a_shell_commands_output_is_no_request_and_a_slash_command_is_its_arguments() -> None:
    msgs = [
        user("<command-name>/review</command-name>\n<command-args>the auth module</command-args>", 0),
        user("<bash-input>git log</bash-input>", 1),
        user("<bash-stdout>We decided to use SQLite instead of files</bash-stdout>", 2),
    ]
    secs = sections_of(summarize(msgs))
    assert secs["Session intent"] == ["msg 0 (user): the auth module"]
    assert not any("SQLite" in d for d in secs["Decisions"])  # the command's output, not the user's words


def test_swe_agent_observations_and_demos_are_not_requests() -> None:
    demo = user("Here is a demonstration", 0, is_demo=True, history_index=0)
    task = user("Fix issue 42 in parser.py", 1, history_index=1)
    act = replace(say("I'll create a script.", 2), meta={"action": "create reproduce.py", "history_index": 2})
    obs = user("[File: reproduce.py (1 lines total)]", 3, history_index=3)
    intent = sections_of(summarize([demo, task, act, obs]))["Session intent"]
    assert intent == ["msg 1 (user): Fix issue 42 in parser.py"]


# ---------------------------------------------------------------------------------------------------
# Tiers and the building blocks


def test_tiers() -> None:
    tiers = tier_messages(session())
    # Tier 1: what was said, quoted: requests, decisions, the last words and the plan.
    assert {f.section for f in tiers.verbatim} == {
        "Session intent",
        "Decisions",
        "Current state",
        "Next steps",
    }
    assert all(f.tier == 1 for f in tiers.verbatim)
    # Tier 2: events, one line each; the state's tool outcomes are the last three.
    assert {f.section for f in tiers.events} == {
        "Artifacts and files touched",
        "Errors and fixes",
        "Current state",
    }
    assert all(f.tier == 2 for f in tiers.events)
    assert [f.body for f in tiers.events if f.section == "Current state"] == [
        "Bash `ls -la migrations` → ok",
        "Read src/models.py → ok",
        "TodoWrite → ok",
    ]
    assert [f.body for f in tiers.routine] == [
        "read 1 file (src/models.py)",
        "routine: 2 searches, 1 listing",
        "ran 2 commands (pytest tests/test_api.py x2)",
    ]


@pytest.mark.parametrize(
    ("name", "inp", "kind", "changes", "key"),
    [
        (
            "Bash",
            {"command": "cd /r && sed -i 's/a/b/g' src/a.py"},
            "change",
            [("edited", "src/a.py")],
            "sed src/a.py",
        ),
        (
            "Bash",
            {"command": "sed -i '' -e 's/x/y/' lib/b.ts"},
            "change",
            [("edited", "lib/b.ts")],
            "sed lib/b.ts",
        ),
        (
            "Bash",
            {"command": "cat > notes/todo.md <<'EOF'\nrm -rf /\nEOF"},
            "change",
            [("created", "notes/todo.md")],
            "cat notes/todo.md",
        ),
        ("Bash", {"command": "rm -f build/x.o && ls"}, "change", [("deleted", "build/x.o")], "rm build/x.o"),
        ("Bash", {"command": "python -m pytest tests/test_a.py -q"}, "command", [], "python -m pytest"),
        ("Bash", {"command": "npm run build 2>&1 | tail -5"}, "command", [], "npm run"),
        ("Bash", {"command": "git diff src/a.py"}, "read", [], "git diff"),
        ("Bash", {"command": "grep -rn 'error:' src/"}, "search", [], "grep src/"),
        ("shell", {"command": ["bash", "-lc", "ls -la src"]}, "list", [], "ls src"),
        (
            "shell",
            {"command": ["apply_patch", "*** Begin Patch\n*** Add File: docs/x.md\n+hi\n*** End Patch"]},
            "change",
            [("created", "docs/x.md")],
            "docs/x.md",
        ),
        (
            "apply_patch",
            "*** Begin Patch\n*** Update File: src/cli.py\n@@\n-a\n+b\n*** Delete File: old.py\n",
            "change",
            [("edited", "src/cli.py"), ("deleted", "old.py")],
            "src/cli.py",
        ),
        (
            "exec_command",
            {"cmd": "touch 설정/환경.toml"},
            "change",
            [("created", "설정/환경.toml")],
            "touch 설정/환경.toml",
        ),
        (
            "str_replace_editor",
            {"command": "create", "path": "/w/r.py", "file_text": "x"},
            "change",
            [("created", "/w/r.py")],
            "/w/r.py",
        ),
        ("str_replace_editor", {"command": "view", "path": "/w/r.py"}, "read", [], "/w/r.py"),
        ("MultiEdit", {"file_path": "a/b.go", "edits": []}, "change", [("edited", "a/b.go")], "a/b.go"),
        ("write", {"path": "x/y.ts", "content": "z"}, "change", [("created", "x/y.ts")], "x/y.ts"),
        ("ReadFile", {"path": "README.md"}, "read", [], "README.md"),
        ("Grep", {"pattern": "TODO", "path": "src"}, "search", [], "src"),
        ("WebFetch", {"url": "https://example.com"}, "other", [], "WebFetch"),
    ],
)
def test_classify_call(name: str, inp: Any, kind: str, changes: list[tuple[str, str]], key: str) -> None:
    c = classify_call(ToolUseBlock(id="t", name=name, input=inp), 0, 0)
    assert (c.kind, list(c.changes), c.key) == (kind, changes, key)


def test_plan_tools() -> None:
    todo = classify_call(
        ToolUseBlock("t", "TodoWrite", {"todos": [{"content": "a", "status": "pending"}]}), 0, 0
    )
    plan = classify_call(
        ToolUseBlock(
            "t",
            "update_plan",
            {"plan": [{"step": "b", "status": "completed"}, {"step": "c", "status": "in_progress"}]},
        ),
        0,
        0,
    )
    assert (todo.kind, todo.plan, todo.plan_done) == ("plan", ("[pending] a",), 0)
    assert (plan.kind, plan.plan, plan.plan_done) == ("plan", ("[in_progress] c",), 1)


def _bash(command: str) -> Any:
    return classify_call(ToolUseBlock("t", "Bash", {"command": command}), 0, 0)


def test_error_line_picks_the_exception_of_a_traceback() -> None:
    assert error_line(ToolResultBlock("t", TRACEBACK, is_error=True), _bash("pytest")) == (
        "AssertionError: expected 3 items, got 2"
    )


def test_error_line_needs_a_failure_signal() -> None:
    ok = ToolResultBlock("t", "all good\n")
    assert error_line(ok, _bash("make")) is None
    # Diff lines and comments mention errors without being one.
    diff = ToolResultBlock("t", "+    // error: returned when the file is missing\n- fatal: old text\n")
    assert error_line(diff, _bash("make check")) is None
    # A failing result with no telling line still counts, by its first line.
    assert error_line(ToolResultBlock("t", "\n  nope\n", is_error=True), _bash("make")) == "nope"
    assert error_line(ToolResultBlock("t", "", is_error=True), _bash("make")) == "failed (no output)"


def test_error_line_exit_codes_and_codex_envelopes() -> None:
    codex = ToolResultBlock(
        "t", '{"output":"ls: cannot access \'lib\': No such file or directory\\n","metadata":{"exit_code":2}}'
    )
    assert (
        error_line(codex, _bash("ls lib"), exit_code=2)
        == "ls: cannot access 'lib': No such file or directory"
    )
    # grep exits 1 for "no match": an answer, not a failure.
    assert error_line(ToolResultBlock("t", ""), _bash("rg -n OLLAMA"), exit_code=1) is None
    assert error_line(ToolResultBlock("t", "boom"), _bash("make"), exit_code=1) == "boom"


def test_shorten_is_unicode_safe() -> None:
    text = "한국어 문장은 잘리지 않고 보존되어야 합니다. " * 20
    short = shorten(text, 50)
    assert len(short) <= 50
    assert short.endswith("…")
    assert short.startswith("한국어 문장은")
    assert "\ufffd" not in short


def test_focus_words_strip_korean_particles() -> None:
    assert focus_words("데이터베이스를 중심으로 the schema") == ("데이터베이스", "중심", "schema")
    assert focus_words(None) == ()


# ---------------------------------------------------------------------------------------------------
# Budget


@pytest.mark.parametrize("budget", [60, 150, 250, 400, 700, 1200, 5000])
def test_budget_respected_with_o200k(o200k: Callable[[str], int], budget: int) -> None:
    msgs = long_session()
    text = summarize(msgs, o200k, budget)
    full = summarize(msgs, o200k)
    assert o200k(full) > 1200  # the budgets below it really make it shrink
    minimum = summarize(msgs, o200k, 1)
    if o200k(minimum) <= budget:
        assert o200k(text) <= budget
    else:
        assert text == minimum
    assert headings(text) == list(SECTIONS)
    assert CITATION in text.splitlines()[0]
    assert LONG_FIRST[:FIRST_REQUEST_FLOOR] in " ".join(text.split())


def test_minimum_keeps_headings_citation_and_first_request(o200k: Callable[[str], int]) -> None:
    text = summarize(long_session(), o200k, 1)
    secs = sections_of(text)
    assert list(secs) == list(SECTIONS)
    bullets = [b for bs in secs.values() for b in bs]
    first = [b for b in bullets if b.startswith("msg 0 (user): ")]
    assert len(first) == 1
    assert " ".join(LONG_FIRST.split())[:FIRST_REQUEST_FLOOR] in first[0]
    assert len(first[0]) <= len("msg 0 (user): ") + FIRST_REQUEST_FLOOR + 1
    rest = [b for b in bullets if b not in first]
    assert all(re.fullmatch(r"\(\d+ older items? omitted\)|none recorded", b) for b in rest), rest


LONG_FIRST = (
    "Port the billing module from the legacy PHP code base to Python, keeping every public function's "
    "behaviour; 결제 모듈의 모든 공개 함수 동작을 그대로 유지해야 합니다. "
) * 8


def long_session() -> tuple[Message, ...]:
    msgs: list[Message] = [user(LONG_FIRST, 0)]
    i = 1
    for k in range(40):
        msgs.append(
            say(
                f"We'll use strategy {k} for module{k}.py instead of the old one. "
                f"모듈 {k}은 새 방식을 사용하기로 했습니다.",
                i,
                call(f"e{k}", "Edit", file_path=f"src/module{k}.py", old_string="a", new_string="b"),
                call(f"b{k}", "Bash", command=f"pytest tests/test_module{k}.py"),
            )
        )
        msgs.append(
            Message(
                role="user",
                blocks=(
                    ToolResultBlock(f"e{k}", "updated"),
                    ToolResultBlock(
                        f"b{k}", f"E   ImportError: cannot import name 'f{k}'", is_error=k % 3 == 0
                    ),
                ),
                index=i + 1,
                line=i + 2,
            )
        )
        i += 2
    return tuple(msgs)


def test_shrinking_drops_oldest_bullets_first(o200k: Callable[[str], int]) -> None:
    text = summarize(long_session(), o200k, 700)
    decisions = sections_of(text)["Decisions"]
    assert re.fullmatch(r"\(\d+ older items omitted\)", decisions[0])
    kept = [int(m) for d in decisions for m in re.findall(r"strategy (\d+)", d)]
    assert kept == sorted(kept)
    assert kept[-1] == 39  # the newest survive
    assert 0 not in kept


@pytest.mark.parametrize("budget", [400, 700, 1200])
def test_fitting_counts_whole_summaries_not_each_dropped_line(
    o200k: Callable[[str], int], budget: int
) -> None:
    """A count may be a round trip to a counting worker: dropping bullets to fit must not count each."""
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return o200k(text)

    text = summarize(long_session(), count, budget)
    assert re.fullmatch(r"\(\d+ older items omitted\)", sections_of(text)["Decisions"][0])
    assert o200k(text) <= budget
    assert all(t.startswith("Summary of messages ") for t in counted)
    assert len(counted) <= 20  # one per step or round, not one per bullet (~150 before)


def test_deterministic_across_hash_seeds() -> None:
    script = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "from test_summarize_extractive import long_session, session, summarize\n"
        "print(summarize(session()) + summarize(long_session(), budget=400))\n"
    )
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", script, str(Path(__file__).parent)],
            capture_output=True,
            env=env,
            check=True,
            cwd=ROOT,
        )
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    assert summarize(session()) == summarize(session())


# ---------------------------------------------------------------------------------------------------
# Folding an earlier summary, focus


def test_previous_summary_folds_in_and_keeps_earlier_facts() -> None:
    msgs = session()
    first = summarize(msgs[:9], citation="ctxc archive 3f2a9c1b4d5e messages 0-8")
    second = summarize(msgs[9:], previous=first, citation="ctxc archive 3f2a9c1b4d5e messages 0-18")
    secs = sections_of(second)
    assert second.startswith("Summary of messages 0-18 ")
    assert secs["Session intent"][0] == f"msg 0 (user): {FIRST_REQUEST}"
    assert any("PostgreSQL" in d for d in secs["Decisions"])  # from the first chunk
    assert "created src/db.py (msg 3)" in secs["Artifacts and files touched"]  # first chunk's view
    assert "edited src/db.py (1 edit, msg 9)" in secs["Artifacts and files touched"]  # second chunk's
    assert any("Next, I need to add the migration" in n for n in secs["Next steps"])
    # Earlier bullets come first in each section.
    intent = secs["Session intent"]
    assert intent.index(f"msg 0 (user): {FIRST_REQUEST}") < intent.index(
        "msg 13 (user): 좋아요. 이제 마이그레이션도 추가해 주세요."
    )
    assert second.count("## Decisions") == 1


def test_folding_replaces_the_state_and_adds_up_the_counts() -> None:
    msgs = session()
    first = summarize(msgs[:13])
    assert "last assistant message (msg 9)" in first
    assert "- ran 2 commands (pytest tests/test_api.py x2)" in first
    second = summarize(msgs[13:], previous=first)
    secs = sections_of(second)
    # The newer span has its own state and plan: the earlier ones are stale, not kept.
    assert not any("msg 9" in s for s in secs["Current state"])
    assert secs["Current state"][0].startswith("last assistant message (msg 18)")
    # Routine counts become one line per kind, added up over both spans.
    artifacts = secs["Artifacts and files touched"]
    assert "routine: 2 searches, 1 listing" in artifacts
    assert "- routine: 1 search\n" in first  # the Glob; the Grep and the listing come later
    assert "ran 2 commands (pytest tests/test_api.py x2)" in artifacts
    assert "read 1 file (src/models.py)" in artifacts
    assert sum(a.startswith(("ran ", "routine: ", "read ")) for a in artifacts) == 3
    # An earlier state survives when the newer span says nothing about the state.
    third = summarize([user("thanks", 30)], previous=first)
    assert any("last assistant message (msg 9)" in s for s in sections_of(third)["Current state"])


def test_previous_summary_message_in_the_span_is_merged() -> None:
    earlier = summarize(session()[:9])
    folded = Message(
        role="user", blocks=(TextBlock(earlier),), index=0, meta={"ctxc": "summary", "replaces": (0, 8)}
    )
    text = summarize((folded, *session()[9:]))
    secs = sections_of(text)
    assert secs["Session intent"][0] == f"msg 0 (user): {FIRST_REQUEST}"
    assert any("PostgreSQL" in d for d in secs["Decisions"])
    assert "Summary of messages" not in "\n".join(text.splitlines()[1:])  # no nested header


def test_previous_omitted_counts_carry_over(o200k: Callable[[str], int]) -> None:
    small = summarize(long_session(), o200k, 500)
    omitted = int(re.search(r"\((\d+) older items omitted\)", sections_of(small)["Decisions"][0]).group(1))  # type: ignore[union-attr]
    text = summarize([say("done", 99)], o200k, 100_000, previous=small)
    carried = sections_of(text)["Decisions"][0]
    assert carried == f"({omitted} older items omitted)"


def test_instructions_add_focus_line_and_win_when_shrinking(o200k: Callable[[str], int]) -> None:
    plain = summarize(long_session(), o200k, 700)
    focused = summarize(long_session(), o200k, 700, instructions="module7 결제")
    assert focused.splitlines()[1] == "Focus: module7 결제"
    assert "Focus:" not in plain
    assert not any("module7.py" in d for d in sections_of(plain)["Decisions"])  # old, so dropped
    assert any("module7.py" in d for d in sections_of(focused)["Decisions"])  # matches the focus, kept
    assert o200k(focused) <= 700


# ---------------------------------------------------------------------------------------------------
# Real transcripts


@pytest.mark.parametrize("path", corpus_params())
def test_corpus_summaries_fit_and_are_deterministic(path: Path, o200k: Callable[[str], int]) -> None:
    transcript = load(path)
    for conv in range(min(transcript.conversations, 3)):
        msgs = transcript.conversation(conv)
        if not msgs:
            continue
        cite = f"ctxc archive 3f2a9c1b4d5e messages {msgs[0].index}-{msgs[-1].index}"
        for budget in (300, 2000):
            for essential in (False, True):
                request = SummaryRequest(msgs, cite, budget, essential=essential)
                text = ExtractiveSummarizer().summarize(request, o200k)
                assert text == ExtractiveSummarizer().summarize(request, o200k)
                assert cite in text.splitlines()[0]
                assert headings(text) == list(request.sections)
                minimum = ExtractiveSummarizer().summarize(replace(request, budget=1), o200k)
                assert o200k(text) <= budget or text == minimum
