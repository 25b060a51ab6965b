"""Synthetic coding-agent sessions for ``ctxc eval`` with no paths, deterministic from a seed, as chat
JSONL alternating the Anthropic and OpenAI dialects (both go through the ``chat`` adapter)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

_PACKAGES = ("billing", "ledger", "courier", "atlas", "harbor", "quill", "orbit", "tundra")
_MODULES = ("client", "models", "service", "views", "tasks", "utils", "schema", "cache", "auth", "export")
_NOUNS = (
    "invoice", "payment", "shipment", "account", "session", "token", "report", "order", "customer",
    "refund", "ticket", "batch", "record", "profile", "quota", "webhook",
)  # fmt: skip
_VERBS = ("load", "save", "build", "parse", "validate", "render", "sync", "fetch", "apply", "compute")
_TASKS = (
    "Add retry with exponential backoff to {path}; transient 503s from the upstream API should not fail "
    "the whole batch. Keep the existing tests green.",
    "The {noun} export in {path} drops rows when the {noun} has no {other}. Find out why and fix it, "
    "with a regression test.",
    "Refactor {path} so that {verb}_{noun} no longer hits the database once per {other}; it times out "
    "on large accounts.",
    "Tests in tests/test_{module}.py started failing after the last dependency bump. Please investigate "
    "and fix {path} without pinning the dependency back.",
)
_FOLLOW_UPS = (
    "Also make sure the log messages in {path} don't include customer emails.",
    "Can you check whether {path} has the same problem?",
    "Looks good so far. Please keep the public function signatures unchanged.",
    "Before you continue: the CI runs on Python 3.11, so avoid newer syntax.",
)
_DECISIONS = (
    "I'll use a bounded retry loop with jitter instead of the tenacity dependency, since the project "
    "avoids new runtime dependencies.",
    "We decided to batch the {noun} lookups with a single IN query rather than caching them, because "
    "the cache would go stale between requests.",
    "Let's go with a dataclass for the {noun} payload instead of a plain dict, so mypy catches the "
    "missing {other} field.",
    "I chose to fix the bug in {path} rather than in the caller, because three other callers rely on "
    "the same behaviour.",
)
_ERRORS = (
    "AssertionError: assert {a} == {b}",
    "KeyError: '{other}_id'",
    "TypeError: {verb}_{noun}() got an unexpected keyword argument 'timeout'",
    "AttributeError: 'NoneType' object has no attribute '{other}'",
)


@dataclass(frozen=True, slots=True)
class Source:
    """A transcript to evaluate: its name and bytes."""

    name: str
    data: bytes


class _Session:
    def __init__(self, rng: random.Random, dialect: str) -> None:
        self.rng = rng
        self.dialect = dialect
        self.lines: list[dict[str, Any]] = []
        self.calls = 0
        pkg = rng.choice(_PACKAGES)
        self.files = [f"{pkg}/{m}.py" for m in rng.sample(_MODULES, 6)]
        self.tests = [f"tests/test_{p.rsplit('/', 1)[1]}" for p in self.files[:3]]

    def fill(self, template: str) -> str:
        r = self.rng
        nouns = r.sample(_NOUNS, 2)
        return template.format(
            path=r.choice(self.files),
            noun=nouns[0],
            other=nouns[1],
            verb=r.choice(_VERBS),
            module=r.choice(self.files).rsplit("/", 1)[1].removesuffix(".py"),
            a=r.randint(10, 999),
            b=r.randint(10, 999),
        )

    def say(self, role: str, text: str) -> None:
        blocks = role == "user" and self.dialect == "anthropic"
        self.lines.append({"role": role, "content": [{"type": "text", "text": text}] if blocks else text})

    def tool(self, text: str, name: str, args: dict[str, Any], result: str, *, error: bool = False) -> None:
        self.calls += 1
        ident = f"call_{self.calls:04d}_{self.rng.randrange(16**6):06x}"
        if self.dialect == "anthropic":
            use = {"type": "tool_use", "id": ident, "name": name, "input": args}
            outcome = {"type": "tool_result", "tool_use_id": ident, "content": result}
            self.lines.append({"role": "assistant", "content": [{"type": "text", "text": text}, use]})
            self.lines.append({"role": "user", "content": [outcome | ({"is_error": True} if error else {})]})
        else:
            function = {"name": name, "arguments": orjson.dumps(args).decode()}
            call = {"id": ident, "type": "function", "function": function}
            self.lines.append({"role": "assistant", "content": text, "tool_calls": [call]})
            self.lines.append({"role": "tool", "tool_call_id": ident, "content": result})

    def code(self, path: str, lines: int) -> str:
        r = self.rng
        out = [f'"""{path}: {r.choice(_NOUNS)} handling."""', "", "from __future__ import annotations", ""]
        while len(out) < lines:
            noun, other = r.sample(_NOUNS, 2)
            verb = r.choice(_VERBS)
            out += [
                f"def {verb}_{noun}({other}_id: int, *, limit: int = {r.randint(10, 500)}) -> dict:",
                f'    """{verb.capitalize()} the {noun} of one {other}."""',
                f"    rows = db.query({noun.capitalize()}).filter_by({other}_id={other}_id).limit(limit)",
                "    if not rows:",
                f"        raise LookupError(f'no {noun} for {other} {{{other}_id}}')",
                f"    return {{'{noun}': [r.to_dict() for r in rows], 'count': len(rows)}}",
                "",
            ]
        return "\n".join(f"{i + 1:>5}\t{line}" for i, line in enumerate(out[:lines]))

    def read(self, path: str) -> None:
        code = self.code(path, self.rng.randint(60, 160))
        self.tool(f"Let me read {path}.", "Read", {"file_path": path}, code)

    def grep(self) -> None:
        r = self.rng
        word = f"{r.choice(_VERBS)}_{r.choice(_NOUNS)}"
        hits = [
            f"{r.choice(self.files)}:{r.randint(1, 300)}:    result = {word}(item_id, limit=50)"
            for _ in range(r.randint(3, 12))
        ]
        self.tool(
            f"Searching for callers of {word}.", "Grep", {"pattern": word, "path": "."}, "\n".join(hits)
        )

    def pytest(self, *, failing: bool) -> None:
        r = self.rng
        test_file = r.choice(self.tests)
        bar = "=" * 24
        noun = r.choice(_NOUNS)
        lines = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
            f"collected {r.randint(20, 80)} items",
            "",
        ]
        for t in self.tests:
            lines.append(f"{t} {'.' * r.randint(5, 20)}{'F' if failing and t == test_file else ''}")
        if failing:
            name = f"test_{r.choice(_VERBS)}_{r.choice(_NOUNS)}"
            err = self.fill(r.choice(_ERRORS))
            lines += [
                "",
                "=================================== FAILURES ===================================",
                f"_____________________________ {name} _____________________________",
                "",
                "Traceback (most recent call last):",
                f'  File "{test_file}", line {r.randint(10, 200)}, in {name}',
                f"    result = {r.choice(_VERBS)}_{r.choice(_NOUNS)}(42)",
                f'  File "{r.choice(self.files)}", line {r.randint(10, 300)}, in {r.choice(_VERBS)}_{noun}',
                f"    return rows[0]['{r.choice(_NOUNS)}']",
                err,
                "=========================== short test summary info ============================",
                f"FAILED {test_file}::{name} - {err}",
                f"{bar} 1 failed, {r.randint(20, 80)} passed in {r.uniform(0.5, 9):.2f}s {bar}",
            ]
        else:
            lines.append(f"{bar} {r.randint(20, 80)} passed in {r.uniform(0.5, 9):.2f}s {bar}")
        self.tool(
            "Running the tests.",
            "Bash",
            {"command": f"python -m pytest -q {test_file}"},
            "\n".join(lines),
            error=failing,
        )

    def edit(self, path: str) -> None:
        r = self.rng
        noun = r.choice(_NOUNS)
        old = f"    rows = db.query({noun.capitalize()}).limit(limit)"
        new = f"    rows = db.query({noun.capitalize()}).filter_by(active=True).limit(limit)"
        self.tool(
            f"Fixing the query in {path}.",
            "Edit",
            {"file_path": path, "old_string": old, "new_string": new},
            f"The file {path} has been updated.",
        )


def generate_session(seed: int, number: int = 0) -> Source:
    """One session, deterministic in ``(seed, number)``."""
    rng = random.Random(f"ctxc-eval/{seed}/{number}")
    dialect = "anthropic" if number % 2 == 0 else "openai"
    turns = 36  # tool calls, about 500 tokens each
    s = _Session(rng, dialect)
    s.say(
        "system",
        "You are a coding agent working in a Python repository. Use the tools to read files, search and "
        "run commands. Keep changes minimal and run the tests after every change.",
    )
    s.say("user", s.fill(rng.choice(_TASKS)))
    follow_ups = sorted(rng.sample(range(4, turns - 2), 3))
    decisions = sorted(rng.sample(range(2, turns - 1), 3))
    for turn in range(turns):
        if turn in follow_ups:
            s.say("user", s.fill(rng.choice(_FOLLOW_UPS)))
        if turn in decisions:
            s.say("assistant", s.fill(rng.choice(_DECISIONS)))
        action = rng.random()
        if turn < 3 or action < 0.35:
            s.read(rng.choice(s.files))
        elif action < 0.55:
            s.grep()
        elif action < 0.8:
            s.pytest(failing=rng.random() < 0.4)
        else:
            s.edit(rng.choice(s.files[:4]))
    s.pytest(failing=False)
    s.say(
        "assistant",
        f"Done: the change is in {s.files[0]} and the tests pass. Next I would add a test for the empty "
        f"{rng.choice(_NOUNS)} case.",
    )
    data = b"".join(orjson.dumps(line) + b"\n" for line in s.lines)
    return Source(f"generated-{seed}-{number}-{dialect}.jsonl", data)


def generate(seed: int, count: int = 3) -> list[Source]:
    return [generate_session(seed, n) for n in range(count)]
