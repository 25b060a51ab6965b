"""``ctxc eval --judge anthropic``: probe questions answered by a model from the compacted context alone,
in one JSON object, scored without a second model by the share of the known answers they name."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ctxc.compaction.postprocess import request_terms
from ctxc.errors import SummarizerError, UsageError
from ctxc.evaluate.measures import tool_paths
from ctxc.model import Message, TextBlock, Transcript
from ctxc.summarize.anthropic import AnthropicAPI, resolve_model
from ctxc.summarize.cache import SummaryCache, summary_cache
from ctxc.summarize.prompt import clip, render_transcript

if TYPE_CHECKING:
    from ctxc.evaluate.needles import Planted

#: Characters kept of each tool result and of the whole context: the judge sees what the agent would.
RESULT_CHARS = 20_000
CONTEXT_CHARS = 400_000
MAX_TOKENS = 1_024
_CHANGE_TOOLS = frozenset({"write", "edit", "multiedit", "str_replace_editor", "apply_patch", "writefile"})
_CHANGE_KEYS = ("file_path", "path", "filename")
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.+)$", re.M)

SYSTEM = (
    "You are given the context an AI coding agent has left after its conversation history was "
    "compacted. Answer each question using only that context: if the context does not say, answer "
    '"unknown". Reply with one JSON object and nothing else, mapping each question number (as a '
    'string) to a short answer, e.g. {"1": "...", "2": "..."}.'
)


@dataclass(frozen=True, slots=True)
class Probe:
    kind: str  # recall | decisions | artifacts | continuation
    question: str
    #: What a right answer mentions; the score is the share mentioned (one for recall and decisions).
    expected: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JudgeScore:
    """Per probe kind, the mean score (0-1) over that kind's probes; kinds without probes are absent."""

    scores: Mapping[str, float]
    answers: tuple[tuple[str, str, float], ...] = ()

    @property
    def overall(self) -> float:
        return sum(self.scores.values()) / len(self.scores) if self.scores else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "overall": round(self.overall, 4),
            "scores": {k: round(v, 4) for k, v in self.scores.items()},
            "answers": [{"question": q, "answer": a, "score": round(s, 4)} for q, a, s in self.answers],
        }


class Judge(Protocol):
    def score(self, output: Sequence[Message], planted: Planted, original: Transcript) -> JudgeScore: ...


def _changed(tool: str, key: str, value: str) -> bool:
    """A path a change tool names (MCP tools are named server__tool)."""
    return key in _CHANGE_KEYS and tool.lower().rsplit("__", 1)[-1] in _CHANGE_TOOLS and bool(value.strip())


def _last_request(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.is_request:
            return " ".join(b.text for b in m.blocks if isinstance(b, TextBlock))
    return ""


def probes(planted: Planted, original: Transcript) -> list[Probe]:
    """The probe questions for one planted transcript, with their known answers."""
    out = [
        Probe("decisions" if n.kind == "decision" else "recall", n.question, (n.value,))
        for n in planted.needles
    ]
    messages = original.conversation(planted.conversation)
    files = tool_paths(messages, _changed, _PATCH_FILE)[:8]
    if files:
        question = "Which files were created or modified in this session? List their paths."
        out.append(Probe("artifacts", question, tuple(files)))
    terms = request_terms(_last_request(messages))[:5]
    if terms:
        out.append(Probe("continuation", "What did the user ask for most recently?", tuple(terms)))
    return out


def score_answer(probe: Probe, answer: str) -> float:
    low = answer.lower()
    if probe.kind == "artifacts":
        hits = sum(p.lower() in low or p.rsplit("/", 1)[-1].lower() in low for p in probe.expected)
    else:
        hits = sum(e.lower() in low for e in probe.expected)
    return hits / len(probe.expected) if probe.expected else 0.0


def parse_answers(text: str, count: int) -> list[str]:
    """The answers of a reply that should be one JSON object; missing ones are empty."""
    start, end = text.find("{"), text.rfind("}")
    data: Any = None
    if start >= 0 and end > start:
        with contextlib.suppress(orjson.JSONDecodeError):
            data = orjson.loads(text[start : end + 1])
    if not isinstance(data, dict):
        return [""] * count
    answers = (data.get(str(i), "") for i in range(1, count + 1))
    return [v if isinstance(v, str) else orjson.dumps(v).decode() for v in answers]


def build_prompt(output: Sequence[Message], questions: Sequence[Probe]) -> str:
    context = clip(render_transcript(output, result_chars=RESULT_CHARS), CONTEXT_CHARS)
    numbered = "\n".join(f"{i}. {p.question}" for i, p in enumerate(questions, 1))
    return f"<context>\n{context}\n</context>\n\nQuestions:\n{numbered}"


class AnthropicJudge:
    """A Claude model as the judge, through the anthropic summarizer's API client."""

    def __init__(
        self,
        model: str | None = None,
        *,
        max_retries: int = 2,
        timeout: float = 120.0,
        use_cache: bool = True,
    ) -> None:
        self.model = resolve_model(model)
        self.api = AnthropicAPI(
            self.model, max_retries=max_retries, timeout=timeout, needs="{judge} anthropic"
        )
        self._cache = summary_cache(use_cache)

    def preflight(self) -> None:
        """Check the key and the model before any work (exit 10 or 11 with a one-line message)."""
        self.api.run(self.api.preflight())

    def ask(self, user: str) -> str:
        """One answer to ``user`` (the system prompt is :data:`SYSTEM`), from the cache or the API."""
        key = SummaryCache.key("ctxc-eval-judge", self.model, SYSTEM, user, MAX_TOKENS)
        if (hit := self._cache.lookup(key, self.api.spent)) is not None:
            return hit
        reply = self.api.run(self.api.create(SYSTEM, user, MAX_TOKENS))
        if not reply.text.strip():
            raise SummarizerError(f"the judge model {self.model} returned an empty answer")
        self._cache.put(key, self.model, reply.text, reply.input_tokens, reply.output_tokens)
        return reply.text

    def score(self, output: Sequence[Message], planted: Planted, original: Transcript) -> JudgeScore:
        questions = probes(planted, original)
        if not questions:
            return JudgeScore({})
        answers = parse_answers(self.ask(build_prompt(output, questions)), len(questions))
        scored = [(p, a, score_answer(p, a)) for p, a in zip(questions, answers, strict=True)]
        per_kind: dict[str, list[float]] = {}
        for probe, _, score in scored:
            per_kind.setdefault(probe.kind, []).append(score)
        means = {k: sum(v) / len(v) for k, v in per_kind.items()}
        return JudgeScore(means, tuple((p.question, a, score) for p, a, score in scored))


def make_judge(
    name: str,
    *,
    model: str | None = None,
    max_retries: int = 2,
    timeout: float = 120.0,
    use_cache: bool = True,
) -> Judge:
    """The judge called ``name`` (only ``anthropic``), preflighted: a key or model problem fails now."""
    if name != "anthropic":
        raise UsageError(f"unknown judge {name!r} (known: anthropic)")
    judge = AnthropicJudge(model, max_retries=max_retries, timeout=timeout, use_cache=use_cache)
    judge.preflight()
    return judge
