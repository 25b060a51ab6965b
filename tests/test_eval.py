"""``ctxc eval``: generated sessions, needles planted through the adapters, the measures, the judge."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import fake_anthropic
import orjson
import pytest
from conftest import SAMPLES, corpus_params, sample_files
from fake_anthropic import MODELS, FakeAnthropic, Scripted, error_body, message_body, user_text

from ctxc import evaluate
from ctxc.cli import main
from ctxc.compaction import strategies
from ctxc.errors import ExitCode
from ctxc.evaluate import EvalOptions, Source, run_eval, sources_from, survival, text_of
from ctxc.evaluate.generate import generate, generate_session
from ctxc.evaluate.judge import AnthropicJudge, parse_answers
from ctxc.evaluate.needles import make_instruction, make_needles, plant
from ctxc.formats import load
from ctxc.live import live_messages
from ctxc.validate import all_problems

anthropic_server = fake_anthropic.anthropic_server

ALL = tuple(sorted(strategies()))


def run(*args: str) -> int:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    code = exc.value.code
    return code if isinstance(code, int) else 0


def loaded(data: bytes, name: str = "t.jsonl") -> Any:
    stream = io.BytesIO(data)
    stream.name = name
    return load(stream)


# ---------------------------------------------------------------------------------------- generating


def test_generated_sessions_are_deterministic_and_valid() -> None:
    a, b = generate(7, 2), generate(7, 2)
    assert [g.data for g in a] == [g.data for g in b]
    assert generate(8, 1)[0].data != a[0].data
    for g in a:
        t = loaded(g.data, g.name)
        assert t.format == "chat"
        assert len(t.messages) > 60
        assert all_problems(t.messages) == []
    assert b'"tool_calls"' in a[1].data
    assert b'"tool_use"' in a[0].data


# ------------------------------------------------------------------------------------------ planting


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in sample_files()])
def test_needles_are_planted_through_the_adapter(path: Path) -> None:
    import random

    t = load(path)
    rng = random.Random(path.name)
    needles = make_needles(rng, 4)
    instruction = make_instruction(rng)
    p = plant(t, needles, instruction=instruction)
    assert len(p.needles) >= 1
    reread = loaded(p.data, path.name)
    assert reread.format == t.format
    assert len(reread.messages) == len(t.messages)
    by_index = {m.index: m for m in reread.messages}
    for n in p.needles:
        assert n.sentence in by_index[n.message].text  # in the bytes, at the message reported
    changed = {m.index for m, o in zip(reread.messages, t.messages, strict=True) if m.text != o.text}
    assert changed <= {n.message for n in p.needles} | {
        m.index for m in reread.messages if instruction in m.text
    }
    assert p.pin is not None
    assert re.search(p.pin, reread.to_bytes().decode())
    assert p.data != path.read_bytes()


def test_needles_avoid_the_first_request_and_the_tail() -> None:
    g = generate_session(3)
    t = loaded(g.data)
    import random

    p = plant(t, make_needles(random.Random(1), 6), keep_last=4)
    first_request = 1  # after the system prompt
    tail = {m.index for m in t.messages[-4:]}
    assert all(n.message != first_request and n.message not in tail for n in p.needles)
    assert all(n.message < len(t.messages) * 0.3 for n in p.needles)  # early


# ------------------------------------------------------------------------------------------ measures


def test_survival_counts_paths_errors_and_decisions() -> None:
    t = loaded(generate_session(1).data)
    full = survival(t.messages, text_of(t.messages))
    assert all(kept == total > 0 for kept, total in full.values())
    none = survival(t.messages, "")
    assert all(kept == 0 for kept, _ in none.values())


def test_eval_on_generated_sessions_recovers_every_needle() -> None:
    options = EvalOptions(strategies=("fifo", "adaptive", "offload"), targets=(0.1,), generated=2)
    report = run_eval(sources_from([], options), options)
    assert len(report.cases) == 6
    assert report.lost_needles() == []
    for c in report.cases:
        assert c.error is None
        assert c.valid
        assert c.first_requests[0] == c.first_requests[1] == 1
        assert c.pinned == (1, 1)
        assert len(c.needles) == 4
    fifo = [c for c in report.cases if c.strategy == "fifo"]
    assert all(c.budget_ok and c.ratio <= 0.1 for c in fifo)
    # fifo drops the early span: every needle comes back through search; the decisions are also still
    # in the output, quoted by the placeholder that replaced their message (as are needles that were
    # planted in a user's own turn: user instructions are quoted too).
    assert all(n.search_rank is not None for c in fifo for n in c.needles)
    assert all(n.retained for c in fifo for n in c.needles if n.kind == "decision")
    assert not all(n.retained for c in fifo for n in c.needles)
    offload = [c for c in report.cases if c.strategy == "offload"]
    assert all(not c.budget_ok for c in offload)  # it only moves outputs over 20k tokens: a finding
    rows = {r.strategy: r for r in report.rows()}
    assert rows["fifo"].needles_recovered == rows["fifo"].needles == 8
    assert rows["fifo"].retained + rows["fifo"].by_search == 8
    assert rows["fifo"].retained >= 2  # the two decisions


def test_eval_is_deterministic_but_for_times() -> None:
    options = EvalOptions(strategies=("selective",), targets=(0.25,), generated=1, seed=5)
    a = [replace(c, seconds=0.0).to_json() for c in run_eval(sources_from([], options), options).cases]
    b = [replace(c, seconds=0.0).to_json() for c in run_eval(sources_from([], options), options).cases]
    assert a == b


def test_a_needle_search_cannot_find_is_reported_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluate, "_search_rank", lambda *a, **k: None)
    options = EvalOptions(strategies=("fifo", "offload"), targets=(0.1,), generated=1)
    report = run_eval(sources_from([], options), options)
    lost = report.lost_needles()
    assert {c.strategy for c, _ in lost} == {"fifo"}  # offload kept them in the output
    # fifo loses what it neither kept nor quoted (its placeholder quotes the decision).
    fifo = [(c, n) for c in report.cases if c.strategy == "fifo" for n in c.needles]
    assert [n for _, n in lost] == [n for _, n in fifo if not n.retained]
    assert 2 <= len(lost) < 4
    assert all(n.kind != "decision" for _, n in lost)


# ------------------------------------------------------------------------- the corpus: the bar


@pytest.mark.parametrize("path", corpus_params())
def test_every_needle_recoverable_for_every_strategy_at_10_percent(path: Path) -> None:
    options = EvalOptions(targets=(0.1,))
    report = run_eval([Source(str(path), path.read_bytes())], options)
    assert len(report.cases) == len(ALL)
    assert all(c.error is None for c in report.cases)
    planted, _asked = report.planted[str(path)]
    if planted == 0:
        # Needles go into the live context only; this fixture's is a call, its result and one request.
        assert len(live_messages(load(path))) <= 4
        return
    assert report.lost_needles() == [], [(c.strategy, n.value, n.query) for c, n in report.lost_needles()]
    assert all(c.valid for c in report.cases)
    assert all(
        c.first_requests[0] == c.first_requests[1] and c.pinned[0] == c.pinned[1] for c in report.cases
    )


# -------------------------------------------------------------------------------------------------- CLI


def test_eval_cli_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("eval", "--generated", "1", "--strategies", "fifo,hierarchical", "--targets", "0.1,0.25")
    assert run(*args, "-f", "json") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["schema"] == "ctxc.eval/1"
    assert {(r["strategy"], r["target_ratio"]) for r in doc["summary"]} == {
        ("fifo", 0.1), ("fifo", 0.25), ("hierarchical", 0.1), ("hierarchical", 0.25)
    }  # fmt: skip
    assert doc["lost"] == []
    assert doc["cases"][0]["needles"][0]["recovered"] is True
    assert run(*args, "-f", "table") == 0
    out = capsys.readouterr().out
    assert "hierarchical" in out
    assert "kept+found" in out
    assert "4/4" in out
    sample = SAMPLES / "codex.jsonl"
    assert run("eval", str(sample), "--strategies", "fifo", "--targets", "0.1", "-f", "json",
               "--archive", str(tmp_path / "a")) == 0  # fmt: skip
    assert orjson.loads(capsys.readouterr().out)["cases"][0]["format"] == "codex"
    assert (tmp_path / "a" / "search.sqlite").is_file()  # --archive keeps it


def folder_with_a_bad_file(tmp_path: Path, bad_bytes: bytes) -> tuple[Path, Path]:
    """A folder of a good transcript (a.jsonl) and a bad one (b.jsonl): the folder and the bad file."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.jsonl").write_bytes((SAMPLES / "codex.jsonl").read_bytes())
    bad = logs / "b.jsonl"
    bad.write_bytes(bad_bytes)
    return logs, bad


def test_eval_cli_goes_on_past_a_bad_file_as_the_batch_commands_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs, bad = folder_with_a_bad_file(tmp_path, b'{"role": "user", "content": "hi"}\n{not json\n')
    args = ("eval", str(logs), "--strategies", "fifo", "--targets", "0.25", "-q")
    assert run(*args, "-f", "json") == ExitCode.PARTIAL
    out, err = capsys.readouterr()
    doc = orjson.loads(out)
    assert {c["source"] for c in doc["cases"]} == {str(logs / "a.jsonl")}  # the good file, evaluated
    assert doc["errors"] == [{"path": str(bad), "error": doc["errors"][0]["error"], "exit_code": 3}]
    assert doc["errors"][0]["error"].startswith(f"{bad}:2: not valid JSON")
    assert doc["exit_code"] == ExitCode.PARTIAL
    assert err.splitlines() == [f"ctxc: error: {doc['errors'][0]['error']}"]  # one line, file and line
    assert run(*args, "-f", "table") == ExitCode.PARTIAL
    assert "fifo" in capsys.readouterr().out
    # --fail-fast, or a single file: that file's own code, as the batch commands.
    assert run(*args, "--fail-fast") == ExitCode.INPUT
    assert run("eval", str(bad), "--strategies", "fifo") == ExitCode.INPUT
    assert f"{bad}:2:" in capsys.readouterr().err
    # A missing file among others is a failed file too; the library reports it the same way.
    options = EvalOptions(strategies=("fifo",), targets=(0.25,))
    report = run_eval([str(tmp_path / "nope.jsonl"), str(logs / "a.jsonl")], options)
    assert [(f.path, f.exit_code) for f in report.failed] == [(str(tmp_path / "nope.jsonl"), 3)]
    assert [c.source for c in report.cases] == [str(logs / "a.jsonl")]


def test_eval_fail_fast_still_writes_its_json_report_as_the_batch_commands_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # analyze, validate, check and compact --out-dir --fail-fast -f json print their report (errors,
    # exit_code); eval printed nothing, so a script reading its JSON got an empty document.
    logs, bad = folder_with_a_bad_file(tmp_path, b"{not json\n")
    args = ("eval", str(logs), "--strategies", "fifo", "--targets", "0.25", "-q", "--fail-fast")
    assert run(*args, "-f", "json") == ExitCode.INPUT
    out, err = capsys.readouterr()
    doc = orjson.loads(out)
    assert doc["cases"] == []  # it stopped before measuring anything
    assert [(e["path"], e["exit_code"]) for e in doc["errors"]] == [(str(bad), 3)]
    assert doc["exit_code"] == ExitCode.INPUT
    assert err.splitlines() == [f"ctxc: error: {doc['errors'][0]['error']}"]


def test_eval_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("eval", "--strategies", "nope") == ExitCode.USAGE
    assert run("eval", "--targets", "0,2") == ExitCode.USAGE
    assert run("eval", "--targets", "abc") == ExitCode.USAGE
    assert run("eval", "-") == ExitCode.USAGE
    assert "Traceback" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ judge


_QUESTION = re.compile(r"^(\d+)\. (.+)$", re.M)
_FACT = re.compile(r"the (.+?) (?:is|we go with) ([^.\n]+?)(?: instead of [^.\n]+)?\.")


def reading_model(body: dict[str, Any]) -> dict[str, Any]:
    """A fake model that answers from the context it is given, as the judge asks: facts it can read
    are answered, the rest is "unknown"."""
    text = user_text(body)
    context = text.split("</context>")[0]
    facts = {m.group(1).lower(): m.group(2) for m in _FACT.finditer(context)}
    answers: dict[str, str] = {}
    for number, question in _QUESTION.findall(text.split("</context>")[1]):
        subject = re.sub(r"^(What is|Who is|What was chosen for) the ", "", question).rstrip("?").lower()
        answers[number] = next((v for k, v in facts.items() if k.endswith(subject)), "unknown")
    return message_body(orjson.dumps(answers).decode())


def test_judge_scores_recall_from_the_compacted_context_alone(anthropic_server: FakeAnthropic) -> None:
    anthropic_server.responder = reading_model
    judge = AnthropicJudge("claude-haiku-4-5", max_retries=0, timeout=5, use_cache=False)
    judge.preflight()
    options = EvalOptions(strategies=("offload", "fifo"), targets=(0.1,), generated=1)
    report = run_eval(sources_from([], options), options, judge=judge)
    scores = {c.strategy: c.judge for c in report.cases}
    assert scores["offload"] is not None
    assert scores["fifo"] is not None
    # offload keeps every planted fact in the output; fifo drops the early span that holds them, but
    # its placeholder quotes the decision (and what a user said), so only the other facts are gone.
    assert scores["offload"].scores["recall"] == 1.0
    assert scores["offload"].scores["decisions"] == 1.0
    assert scores["fifo"].scores["recall"] < 0.5
    assert scores["fifo"].scores["decisions"] == 1.0
    assert set(scores["offload"].scores) >= {"recall", "decisions", "artifacts", "continuation"}
    sent = anthropic_server.message_requests
    assert len(sent) == 2
    assert "<context>" in user_text(sent[0].body)
    assert all(r.body["model"] == "claude-haiku-4-5" for r in sent)


def test_judge_cli_preflight_fails_before_any_work(
    anthropic_server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("eval", "--generated", "1", "--strategies", "fifo", "--targets", "0.1", "--judge", "anthropic")
    assert run(*args, "--judge-model", "claude-nope-1", "--no-cache") == ExitCode.MODEL
    anthropic_server.script(MODELS, Scripted(401, error_body("authentication_error", "bad key")))
    assert run(*args, "--no-cache") == ExitCode.AUTH
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert run(*args, "--no-cache") == ExitCode.AUTH
    assert anthropic_server.message_requests == []
    assert "Traceback" not in capsys.readouterr().err


def test_judge_cli_adds_a_column(anthropic_server: FakeAnthropic, capsys: pytest.CaptureFixture[str]) -> None:
    anthropic_server.responder = reading_model
    args = ("eval", "--generated", "1", "--strategies", "offload", "--targets", "0.1", "-f", "json")
    assert run(*args, "--judge", "anthropic", "--no-cache") == 0
    doc = orjson.loads(capsys.readouterr().out)
    case = doc["cases"][0]["judge"]
    assert doc["summary"][0]["judge"] == pytest.approx(case["overall"])
    assert (
        case["scores"]["recall"] == 1.0
    )  # the fake reads facts only: artifacts score 0, a real one would not
    assert doc["cases"][0]["judge"]["scores"]["recall"] == 1.0


def test_parse_answers_is_lenient() -> None:
    assert parse_answers('Sure: {"1": "a", "2": 3}', 3) == ["a", "3", ""]
    assert parse_answers("no json here", 2) == ["", ""]
