"""What the writers of Claude Code logs and Codex rollouts share when they write compacted output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ctxc.model import Message, Record, Transcript


def output_messages(transcript: Transcript, outputs: Mapping[int, Sequence[Message]]) -> list[Message]:
    """Every conversation's output in order; a conversation the caller left out is unchanged, not dropped."""
    convs = sorted({m.conversation for m in transcript.messages} | set(outputs))
    return [m for c in convs for m in (outputs[c] if c in outputs else transcript.conversation(c))]


def replaces(message: Message) -> tuple[int, int] | None:
    """The span of message indexes a new message stands for (``meta["replaces"]``), if it names one."""
    span = message.meta.get("replaces")
    if isinstance(span, tuple | list) and len(span) == 2 and all(isinstance(x, int) for x in span):
        return int(span[0]), int(span[1])
    return None


def fix_eols(out: Sequence[Record], source: Sequence[Record], eol: bytes) -> tuple[Record, ...]:
    """Every line but the last ends with a newline; the last ends as the input's last line did (the rule
    of ``ctxc.compaction.write``, which the formats layer must not import)."""
    if not out:
        return ()
    final = source[-1].eol if source else b"\n"
    fixed = [r if r.eol else r.but(eol=eol) for r in out[:-1]]
    fixed.append(out[-1] if out[-1].eol == final else out[-1].but(eol=final))
    return tuple(fixed)
