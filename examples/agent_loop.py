"""An agent loop that uses ctxc's ContextManager every turn, with a fake model and fake tools.

Run it::

    python examples/agent_loop.py                    # Anthropic-shaped messages
    python examples/agent_loop.py --shape openai     # OpenAI-shaped messages
    python examples/agent_loop.py --turns 80 --window 20000

Each turn the loop (1) measures the context, (2) compacts it when the manager says so, (3) injects
the reminders that are due, (4) calls the model with the composed system prompt, and (5) runs the
tools the model asked for. The fake model reads files (large outputs that fill the window quickly),
runs commands, and says "DONE" now and then; swap :class:`FakeModel` for a real SDK call and the
loop is the same. Nothing here touches the network.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxc.agent import ContextManager
from ctxc.composer import EXAMPLES, ROLE, SAFETY, TASK, PromptComposer, Section
from ctxc.reminders import ReminderRule

Shape = Literal["anthropic", "openai"]

TASK_TEXT = "Fix the failing test in tests/test_parser.py without changing the public API."

RULES = (
    ReminderRule(id="api", after_compaction=True, message=f"The task is still: {TASK_TEXT}"),
    ReminderRule(id="tests", every_n_turns=8, message="Run the test suite before claiming success."),
    ReminderRule(
        id="careful-shell", tool_call="bash", message="Check a command's side effects first.", max_repeats=2
    ),
    ReminderRule(id="verify-done", keyword_in_response="DONE", message="Show the passing test output."),
)

COMPOSER = PromptComposer(
    (
        Section("safety", "Never modify files outside the repository.", SAFETY, required=True),
        Section("role", "You are a careful Python engineer.", ROLE),
        Section("task", TASK_TEXT, TASK),
        Section(
            "examples", "Example: run the test, read the traceback, make the smallest fix. " * 20, EXAMPLES
        ),
    )
)


@dataclass
class FakeModel:
    """A scripted model: reads a file, runs a command, and sometimes reports DONE, in a cycle."""

    shape: Shape
    calls: int = 0
    seen_system: list[str] = field(default_factory=list)

    def respond(self, system: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.seen_system.append(system)
        self.calls += 1
        n = self.calls
        step = n % 3
        if step == 0:
            return self._text(f"Step {n}: the parser test passes now. DONE")
        name, arguments = (
            ("read_file", {"path": f"src/module_{n}.py"}) if step == 1 else ("bash", {"cmd": "pytest -q"})
        )
        return self._call(f"call_{n}", name, arguments, f"Step {n}: calling {name}.")

    def _text(self, text: str) -> dict[str, Any]:
        if self.shape == "anthropic":
            return {"role": "assistant", "content": [{"type": "text", "text": text}]}
        return {"role": "assistant", "content": text}

    def _call(self, call_id: str, name: str, arguments: dict[str, Any], text: str) -> dict[str, Any]:
        if self.shape == "anthropic":
            return {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": call_id, "name": name, "input": arguments},
                ],
            }
        return {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    """Fake tools: a file read returns 60 numbered lines, a command a short test report."""
    if name == "read_file":
        path = arguments["path"]
        return "\n".join(
            f"{i:4} | def function_{i}(value): return parse(value, strict={i % 2 == 0})  # {path}"
            for i in range(60)
        )
    return "collected 42 items\n\n41 passed, 1 failed in 0.73s\nFAILED tests/test_parser.py::test_nested"


def tool_results(reply: dict[str, Any], shape: Shape) -> list[dict[str, Any]]:
    """The messages answering the reply's tool calls, in the loop's shape."""
    if shape == "anthropic":
        uses = [b for b in reply["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not uses:
            return []
        blocks = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": run_tool(b["name"], b["input"])}
            for b in uses
        ]
        return [{"role": "user", "content": blocks}]
    return [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": run_tool(call["function"]["name"], json.loads(call["function"]["arguments"])),
        }
        for call in reply.get("tool_calls", [])
    ]


@dataclass
class TurnLog:
    turn: int
    tokens: int
    compacted: bool
    tokens_after: int
    reminders: tuple[str, ...]


def run(
    *, turns: int = 40, window: int = 12_000, shape: Shape = "anthropic"
) -> tuple[list[dict[str, Any]], list[TurnLog]]:
    """Run the loop; return the final message list and what happened each turn."""
    # Compact at 70% of the window down to 40%: each compaction also costs the provider's prompt cache.
    manager = ContextManager(
        window=window,
        reminders=RULES,
        composer=COMPOSER,
        keep_last=4,
        shape=shape,
        trigger=0.7,
        target_ratio=0.4,
    )
    system = manager.system_prompt(budget=200)  # the examples section is dropped to fit the budget
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK_TEXT}]
    model = FakeModel(shape)
    log: list[TurnLog] = []
    for turn in range(turns):
        state = manager.turn_state(messages, turn=turn)  # what the turn starts with
        compacted = False
        if manager.needs_compaction(messages, system=system):  # the system prompt is off the window
            messages = manager.compact(messages, system=system)  # same shape, tool calls still paired
            compacted = manager.last_compaction is not None and manager.last_compaction.changed
            state = dataclasses.replace(state, compacted=compacted)
        due = manager.reminders_due(state)
        if due:
            messages.append(manager.reminder_message(due))
        log.append(
            TurnLog(turn, state.tokens, compacted, manager.count(messages), tuple(r.rule for r in due))
        )
        reply = model.respond(system, messages)
        messages.append(reply)
        messages.extend(tool_results(reply, shape))
    return messages, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--window", type=int, default=12_000)
    parser.add_argument("--shape", choices=("anthropic", "openai"), default="anthropic")
    args = parser.parse_args()
    messages, log = run(turns=args.turns, window=args.window, shape=args.shape)
    for entry in log:
        what = f"compacted to {entry.tokens_after:,}" if entry.compacted else ""
        fired = f"reminders: {', '.join(entry.reminders)}" if entry.reminders else ""
        print(f"turn {entry.turn:3}  context {entry.tokens:6,}  {what:22} {fired}".rstrip())
    compactions = sum(e.compacted for e in log)
    print(f"{len(log)} turns, {compactions} compaction(s), {len(messages)} messages at the end")


if __name__ == "__main__":
    main()
