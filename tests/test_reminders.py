"""Reminder rules: parsing, when each trigger fires, max_repeats, state passing, and the CLI
(``ctxc remind`` on samples and corpus files, ``ctxc compact --reminders`` on every sample format)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES, corpus_params, run

from ctxc.errors import ExitCode, InputError, UsageError
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.reminders import (
    ReminderRule,
    ReminderRules,
    ReminderState,
    TurnState,
    count_turns,
    last_response,
    reminder_text,
)
from ctxc.validate import pairing_problems

RULES_TOML = """
[[reminder]]
id = "lang"
every_n_turns = 3
message = "Answer in English."
max_repeats = 2

[[reminder]]
id = "big"
token_threshold = 1000
message = "The context is large: re-read the task."

[[reminder]]
id = "share"
token_threshold = 0.5
message = "Half the window is used."

[[reminder]]
id = "shell"
tool_call = "Bash"
message = "Check side effects."

[[reminder]]
id = "done"
keyword_in_response = "done"
message = "Show the test output."

[[reminder]]
id = "pinned"
after_compaction = true
message = "Keep the public API unchanged."
"""


def fire(rules: ReminderRules, turns: list[TurnState]) -> list[list[str]]:
    state = ReminderState()
    out: list[list[str]] = []
    for t in turns:
        due, state = rules.due(t, state)
        out.append([r.rule for r in due])
    return out


def test_parse_reads_every_trigger() -> None:
    rules = ReminderRules.parse(RULES_TOML)
    assert [r.trigger for r in rules.rules] == [
        "every_n_turns",
        "token_threshold",
        "token_threshold",
        "tool_call",
        "keyword_in_response",
        "after_compaction",
    ]
    assert rules.rules[0].max_repeats == 2
    assert rules.rules[2].token_threshold == 0.5
    assert rules.rules[0].describe() == "every_n_turns = 3"


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[[reminder]]\nid = "a"\nmessage = "m"\n', "exactly one trigger"),
        (
            '[[reminder]]\nid = "a"\nmessage = "m"\nevery_n_turns = 2\ntool_call = "x"\n',
            "exactly one trigger",
        ),
        ('[[reminder]]\nid = "a"\nmessage = "m"\nevery_n_turn = 2\n', "unknown keys"),
        ('[[reminder]]\nid = "a"\nmessage = "m"\nevery_n_turns = "2"\n', "must be int"),
        ('[[reminder]]\nid = "a"\nmessage = "m"\nevery_n_turns = 0\n', "at least 1"),
        ('[[reminder]]\nid = "a"\nmessage = "m"\ntoken_threshold = 1.5\n', "share of the window"),
        ('[[reminder]]\nid = "a"\nmessage = "m"\ntoken_threshold = true\n', "not a boolean"),
        ('[[reminder]]\nid = "a"\nmessage = ""\ntool_call = "x"\n', "empty message"),
        ('[[reminder]]\nid = "a b"\nmessage = "m"\ntool_call = "x"\n', "letters, digits"),
        ('[[reminder]]\nid = "a"\nmessage = "m"\ntool_call = "x"\nmax_repeats = 0\n', "max_repeats"),
        (
            '[[reminder]]\nid = "a"\nmessage = "m"\ntool_call = "x"\n[[reminder]]\nid = "a"\nmessage = "n"\n'
            'tool_call = "y"\n',
            "used twice",
        ),
        ("[[reminder]\n", "not valid TOML"),
        ("[rules]\nx = 1\n", "unknown top-level"),
        ("", "no [[reminder]]"),
    ],
)
def test_bad_rules_are_loud(toml: str, needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        ReminderRules.parse(toml, source="rules.toml")
    assert needle in str(exc.value)
    assert str(exc.value).startswith("rules.toml")


@pytest.mark.parametrize(
    "fields",
    [
        {"id": 5, "message": "m"},
        {"id": None, "message": "m"},
        {"id": "a", "message": None},
        {"id": "a", "message": 7},
    ],
)
def test_a_rule_built_in_code_with_a_wrong_id_or_message_is_a_usage_error(fields: dict[str, Any]) -> None:
    # The library's own rules (ctxc.ReminderRule(...)), not only TOML ones: a CtxcError, not a TypeError.
    with pytest.raises(UsageError, match="must be a string"):
        ReminderRule(**fields, every_n_turns=2)


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        ReminderRules.load(tmp_path / "nope.toml")


def test_every_n_turns_counts_from_the_last_fire_and_stops_at_max_repeats() -> None:
    rules = ReminderRules((ReminderRule("lang", "m", every_n_turns=3, max_repeats=2),))
    fired = fire(rules, [TurnState(turn=t, tokens=0) for t in range(12)])
    assert [t for t, names in enumerate(fired) if names] == [3, 6]  # the third time is over max_repeats


def test_token_threshold_fires_on_crossing_not_on_every_turn() -> None:
    rules = ReminderRules((ReminderRule("big", "m", token_threshold=1000),))
    sizes = [500, 1200, 1500, 1800, 700, 900, 1100, 1300]  # compaction at turn 4 brings it back down
    fired = fire(rules, [TurnState(turn=t, tokens=n) for t, n in enumerate(sizes)])
    assert [t for t, names in enumerate(fired) if names] == [1, 6]


def test_share_threshold_needs_a_window() -> None:
    rules = ReminderRules((ReminderRule("share", "m", token_threshold=0.5),))
    assert fire(rules, [TurnState(turn=1, tokens=900)]) == [[]]  # no window, no share
    assert fire(rules, [TurnState(turn=1, tokens=600, window=1000)]) == [["share"]]


def test_tool_keyword_and_compaction_triggers() -> None:
    rules = ReminderRules.parse(RULES_TOML)
    turn = TurnState(turn=1, tokens=10, tool_calls=("Read", "Bash"), response="All DONE here", compacted=True)
    due, state = rules.due(turn, ReminderState())
    assert [r.rule for r in due] == ["shell", "done", "pinned"]
    assert due[1].detail == "'done' in response"
    assert state.fired == {"shell": 1, "done": 1, "pinned": 1}
    quiet = TurnState(turn=2, tokens=10, tool_calls=("Read",), response="working")
    assert rules.due(quiet, state)[0] == ()


def test_due_is_pure() -> None:
    rules = ReminderRules((ReminderRule("t", "m", tool_call="Bash", max_repeats=1),))
    turn = TurnState(turn=1, tokens=0, tool_calls=("Bash",))
    start = ReminderState()
    first, after = rules.due(turn, start)
    again, _ = rules.due(turn, start)  # the same input state gives the same answer
    assert [r.rule for r in first] == [r.rule for r in again] == ["t"]
    assert start.fired == {}
    assert rules.due(turn, after)[0] == ()  # max_repeats reached in the new state


def _msg(role: str, *blocks: object, index: int = 0) -> Message:
    return Message(role=role, blocks=tuple(blocks), index=index)  # type: ignore[arg-type]


def test_state_from_messages_counts_injected_reminders() -> None:
    msgs = [
        _msg("user", TextBlock("task"), index=0),
        _msg("assistant", TextBlock("a"), index=1),
        _msg("assistant", TextBlock("b"), index=2),  # same turn
        _msg("user", TextBlock(reminder_text("lang", "English please")), index=3),
        _msg("assistant", ToolUseBlock("c1", "Bash", {"cmd": "ls"}), index=4),
        _msg("user", ToolResultBlock("c1", "ok"), TextBlock(reminder_text("lang", "again")), index=5),
    ]
    state = ReminderState.from_messages(msgs)
    assert state.fired == {"lang": 2}
    assert state.last_turn == {"lang": 2}
    assert count_turns(msgs) == 2
    assert last_response(msgs) == (("Bash",), "")


# ------------------------------------------------------------------------------------------ the CLI


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    f = tmp_path / "rules.toml"
    f.write_text(RULES_TOML, encoding="utf-8")
    return f


def test_remind_json_on_a_sample(capsys: pytest.CaptureFixture[str], rules_file: Path) -> None:
    code, out, _ = run(
        capsys, "remind", str(SAMPLES / "claude-code.jsonl"), "--rules", str(rules_file), "--format", "json"
    )
    assert code == 0
    doc = orjson.loads(out)
    assert doc["schema"] == "ctxc.remind/1"
    fired = {r["id"]: r["fired"] for r in doc["rules"]}
    assert fired["lang"] == 2  # every 3 turns, capped at 2
    assert fired["big"] == 1  # one crossing: remind never compacts
    assert fired["pinned"] == 0  # remind never compacts
    assert fired["shell"] >= 1  # the sample runs Bash
    turns = [r["turn"] for r in doc["reminders"] if r["rule"] == "lang"]
    assert turns == [4, 7]  # before the 4th and 7th model calls: 3 responses apart
    assert all(r["line"] > 0 for r in doc["reminders"])


def test_remind_table(capsys: pytest.CaptureFixture[str], rules_file: Path) -> None:
    code, out, _ = run(
        capsys, "remind", str(SAMPLES / "codex.jsonl"), "--rules", str(rules_file), "-f", "table"
    )
    assert code == 0
    assert "every_n_turns = 3" in out
    assert "lang" in out


def test_remind_table_without_a_reminder_prints_no_empty_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[reminder]]\nid = "never"\nkeyword_in_response = "zqxj"\nmessage = "m"\n', "utf-8")
    code, out, _ = run(capsys, "remind", str(SAMPLES / "codex.jsonl"), "--rules", str(rules), "-f", "table")
    assert code == 0
    assert "0 reminder(s) from 1 rule(s)" in out
    assert "context" not in out  # the header of the events table, which has no row
    assert "never" in out  # the rules' table still says each fired 0 times


@pytest.mark.parametrize("path", corpus_params("claude-code/entire-cli_manual*"))
def test_remind_on_a_corpus_file(capsys: pytest.CaptureFixture[str], rules_file: Path, path: Path) -> None:
    code, out, _ = run(
        capsys,
        "remind",
        str(path),
        "--rules",
        str(rules_file),
        "--format",
        "json",
        "--model",
        "claude-opus-4-5",
    )
    assert code == 0
    doc = orjson.loads(out)
    assert doc["turns"] > 10
    assert {r["rule"] for r in doc["reminders"]} >= {"lang", "shell"}


def test_remind_bad_rules_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[reminder]]\nid = "x"\nmessage = "m"\n', encoding="utf-8")
    code, _, err = run(capsys, "remind", str(SAMPLES / "codex.jsonl"), "--rules", str(bad))
    assert code == ExitCode.USAGE
    assert "exactly one trigger" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "sample", ["chat-anthropic.jsonl", "chat-openai.jsonl", "claude-code.jsonl", "codex.jsonl"]
)
def test_compact_appends_reminders_within_target(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rules_file: Path, sample: str
) -> None:
    src = SAMPLES / sample
    out = tmp_path / "out.jsonl"
    report = tmp_path / "report.json"
    target = 6000
    code, _, _ = run(
        capsys,
        "compact",
        str(src),
        "-s",
        "fifo",
        "--target-tokens",
        str(target),
        "--reminders",
        str(rules_file),
        "--archive",
        str(tmp_path / "archive"),
        "--report",
        str(report),
        "-o",
        str(out),
        "-q",
    )
    assert code == 0
    original = load(src)
    compacted = load(out, input_format=original.format)
    assert pairing_problems(compacted.messages, strict=True) == []
    last = compacted.messages[-1]
    assert last.role == "user"
    assert reminder_text("pinned", "Keep the public API unchanged.") in last.text  # compaction happened
    doc = orjson.loads(report.read_bytes())
    conv = doc["conversations"][0]
    assert conv["tokens_after"] <= target  # the reminder is counted against the target
    assert any(a["strategy"] == "reminders" and "pinned" in a["note"] for a in conv["actions"])
    # A second run over the compacted file sees the reminders already there (max_repeats, every_n_turns).
    state = ReminderState.from_messages(compacted.messages)
    assert state.fired.get("pinned") == 1


def test_compact_without_compaction_appends_only_unconditional_reminders(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rules_file: Path
) -> None:
    out = tmp_path / "out.jsonl"
    code, _, _ = run(
        capsys,
        "compact",
        str(SAMPLES / "chat-openai.jsonl"),
        "--window",
        "1000000",
        "--reminders",
        str(rules_file),
        "--archive",
        str(tmp_path / "archive"),
        "-o",
        str(out),
        "-q",
    )
    assert code == 0
    text = load(out).messages[-1].text
    assert 'id="pinned"' not in text  # adaptive found nothing to do at 2% of the window
    assert 'id="big"' in text  # the context is over 1,000 tokens
