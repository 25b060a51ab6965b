"""Adding a format or a strategy is one new module plus one registry line.

A toy format (``{"who": "me"|"it", "said": "..."}`` per line) and a toy strategy (drop the oldest
messages that may go) are defined here, registered at test time, and driven through the library
(``analyze``, ``load``, ``compact``) and the CLI in-process, then unregistered. Nothing in ``ctxc`` is
edited for them: every fact ctxc needs is an attribute of the adapter or of the strategy class.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

import ctxc
from ctxc import formats
from ctxc.batch import collect_inputs
from ctxc.cli import main
from ctxc.compaction import base as strategy_registry
from ctxc.compaction.base import Action, CompactContext, StrategyResult, option
from ctxc.compaction.run import CompactOptions
from ctxc.formats.base import FormatAdapter, Item
from ctxc.model import Message, Record, TextBlock

# ----------------------------------------------------------------------------------- the toy format

_ROLES = {"me": "user", "it": "assistant"}
_WHO = {role: who for who, role in _ROLES.items()}


class ToyAdapter(FormatAdapter):
    name = "toy-chat"
    description = "a toy: one {'who': 'me'|'it', 'said': text} per line"
    suffixes: tuple[str, ...] = (".toy",)

    def sniff(self, sample: Sequence[Record]) -> int:
        ok = [r for r in sample if isinstance(r.data, dict) and r.data.get("who") in _ROLES]
        return 90 if ok and len(ok) == len(sample) else 0

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        for i, rec in records:
            data = rec.data
            if isinstance(data, dict) and data.get("who") in _ROLES and isinstance(data.get("said"), str):
                blocks = (TextBlock(data["said"]),)
                yield Message(_ROLES[data["who"]], blocks, line=rec.line, index=index, records=(i,), raw=data)
                index += 1

    def encode_message(self, message: Message) -> dict[str, Any]:
        return {"who": _WHO.get(message.role, "me"), "said": message.text}


# --------------------------------------------------------------------------------- the toy strategy


@dataclasses.dataclass(frozen=True)
class OldestFirstConfig:
    step: int = option(1, "messages dropped at a time", min=1, max=100)


class OldestFirst:
    """Drop the oldest messages that are neither pinned nor among the last ``keep_last``."""

    name: ClassVar[str] = "toy-oldest-first"
    description: ClassVar[str] = "a toy: drop the oldest messages until the target is met"
    Config: ClassVar[type[OldestFirstConfig]] = OldestFirstConfig
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        step = ctx.config(self).step
        keep = list(messages)
        tail = {m.index for m in messages[-ctx.keep_last :]}
        dropped: list[Message] = []
        while not ctx.under_target(keep):
            may_go = [m for m in keep if m.index not in ctx.pinned and m.index not in tail][:step]
            if not may_go:
                break
            dropped.extend(may_go)
            keep = [m for m in keep if all(m is not g for g in may_go)]
        if not dropped:
            return StrategyResult(tuple(messages))
        saved = ctx.tokens(dropped)
        action = Action(
            self.name, "drop", dropped[0].index, dropped[-1].index, saved, 0, f"{len(dropped)} dropped"
        )
        return StrategyResult(tuple(keep), (action,))


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture
def registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy format and strategy, registered as their modules would (one line each), then removed."""
    # An archive of its own: a toy original in the session's archive would be an unknown format to every
    # later search that indexes it (a warning on stderr where a -q test wants none).
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "toy-archive"))
    formats.register(ToyAdapter())
    strategy_registry.register(OldestFirst)
    try:
        yield
    finally:
        formats.unregister(ToyAdapter.name)
        strategy_registry.unregister(OldestFirst.name)


def toy_file(path: Path, turns: int = 30) -> Path:
    lines = [{"who": "me", "said": "Please tidy the changelog and keep the release dates."}]
    for i in range(turns):
        lines.append({"who": "it", "said": f"Step {i}: " + f"rewrote the entry for version {i}. " * 12})
        lines.append({"who": "me", "said": f"Good, go on with step {i + 1}."})
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return path


# -------------------------------------------------------------------------------------------- tests


def test_library_analyze_and_compact(registered: None, tmp_path: Path) -> None:
    path = toy_file(tmp_path / "session.toy")
    report = ctxc.analyze(str(path), window=4000, use_cache=False)
    assert report.format == "toy-chat"
    assert report.max_context > 1000
    transcript = ctxc.load(str(path))
    assert transcript.format == "toy-chat"
    assert len(transcript.messages) == 61
    result = ctxc.compact(transcript, CompactOptions(strategy="toy-oldest-first", target_tokens=600))
    assert result.tokens_after <= 600 < result.tokens_before
    assert {a.strategy for a in result.actions} == {"toy-oldest-first"}
    out = [orjson.loads(line) for line in result.transcript.to_bytes().splitlines()]
    assert out[0] == orjson.loads(path.read_bytes().splitlines()[0])  # the first request is pinned
    assert out[-1] == orjson.loads(path.read_bytes().splitlines()[-1])
    assert all(set(x) == {"who", "said"} for x in out)  # written back in the toy format


def test_directory_walk_uses_the_format_suffix(registered: None, tmp_path: Path) -> None:
    toy_file(tmp_path / "a.toy")
    (tmp_path / "notes.txt").write_text("not a transcript")
    assert [i.rel for i in collect_inputs([str(tmp_path)])] == ["a.toy"]


def test_cli_analyze_and_compact(
    registered: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = toy_file(tmp_path / "session.toy")
    out = tmp_path / "small.toy"

    def run(*args: str) -> int:
        try:
            main(list(args))
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    assert run("analyze", str(path), "--window", "4000", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["format"] == "toy-chat"
    assert run("compact", str(path), "-s", "toy-oldest-first", "--target-tokens", "600", "-o", str(out)) == 0
    assert len(out.read_bytes().splitlines()) < 61
    assert ctxc.load(str(out)).format == "toy-chat"
    assert run("strategies") == 0
    assert "toy-oldest-first" in capsys.readouterr().out


def test_unregistered_after_use(tmp_path: Path) -> None:
    assert ToyAdapter.name not in formats.adapters()
    assert OldestFirst.name not in strategy_registry.strategies()


def test_a_strategy_must_declare_its_facts() -> None:
    class Vague:
        name: ClassVar[str] = "toy-vague"
        description: ClassVar[str] = "forgets to say whether it summarizes"
        Config = OldestFirstConfig

        def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
            return StrategyResult(tuple(messages))

    with pytest.raises(TypeError, match="uses_summarizer, best_effort"):
        strategy_registry.register(Vague)
    assert "toy-vague" not in strategy_registry.strategies()
