"""Planting facts ("needles"): a sentence nobody could guess, appended to an early message compaction may
remove, written by the format's adapter and read back, so every needle reported is in the file."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxc.compaction.write import write_transcript
from ctxc.errors import CtxcError
from ctxc.formats import get_adapter, load
from ctxc.live import live_context
from ctxc.model import Message, TextBlock, ToolResultBlock, Transcript
from ctxc.reader import named_bytes

#: Needles are planted among the first this share of a conversation's messages.
EARLY_SHARE = 0.3

_CODE_SUBJECTS = (
    "vault rotation passphrase", "canary rollout token", "warehouse gate passcode", "incident bridge PIN",
    "license activation serial", "sandbox tenant identifier", "escrow release voucher",
    "telemetry ingest secret", "partner onboarding ticket", "cold storage retrieval code",
    "firmware signing nonce", "dispute arbitration reference",
)  # fmt: skip
_NAME_SUBJECTS = (
    "on-call reviewer for the settlement service", "contact person at the acquiring bank",
    "owner of the flaky nightly reconciliation job", "auditor who signed off the ledger migration",
    "liaison for the Lisbon data centre move", "maintainer of the forked geohash library",
    "approver of the quarterly firewall exceptions", "translator of the Icelandic storefront",
)  # fmt: skip
_NUMBER_SUBJECTS = (
    "row count of the legacy ledger table", "monthly quota of the geocoding provider",
    "latency budget of the checkout saga in milliseconds",
    "number of orphaned attachments found in the bucket",
    "peak throughput of the tariff importer per hour", "size of the quarantine backlog in kilobytes",
    "count of dormant loyalty accounts purged", "expected yearly egress of the mirror in gigabytes",
)  # fmt: skip
_DECISION_SUBJECTS = (
    ("message broker for the notification fan-out", ("NATS", "RabbitMQ", "Kafka", "Redis Streams")),
    ("serialization format of the audit trail", ("CBOR", "Avro", "MessagePack", "Protobuf")),
    ("scheduler for the nightly reconciliation", ("Temporal", "Airflow", "cron", "Celery beat")),
    ("object store for the invoice archive", ("MinIO", "Ceph", "SeaweedFS", "Garage")),
    ("feature flag service of the mobile app", ("Unleash", "Flagsmith", "GrowthBook", "flipt")),
    ("geocoder behind the address autocomplete", ("Pelias", "Nominatim", "Photon", "libpostal")),
)
_FIRST = ("Marisol", "Tobiah", "Ingrid", "Oluwaseun", "Radomir", "Henrike", "Caoimhe", "Yevgenia", "Baptiste")
_LAST = ("Quennell", "Okonkwo-Baird", "Vasquez-Lind", "Thorvaldsen", "Abernathy", "Szczepanik", "Delacroix")
#: Each transcript's needles are about one project: the name keeps two transcripts' facts apart.
_PROJECTS = (
    "Halcyon", "Basalt", "Juniper", "Marlin", "Quartzite", "Tamarind", "Vireo", "Obsidian", "Larkspur",
    "Cobalt", "Saffron", "Wolfram", "Heron", "Talus", "Zephyrine", "Peregrine", "Cinnabar", "Alder",
    "Nimbus", "Fjord", "Garnet", "Ibex", "Kestrel", "Lichen", "Mistral", "Nacre", "Ocelot", "Pumice",
    "Quokka", "Rowan", "Sorrel", "Tupelo", "Umber", "Verdigris", "Wapiti", "Yarrow", "Zircon", "Bramble",
)  # fmt: skip
_RULES = (
    "never run the database migrations against the production replica",
    "always keep the public API of the client module backwards compatible",
    "do not add new runtime dependencies without asking first",
)
_CODE_WORDS = ("OSPREY", "MAGPIE", "KESTREL", "PLOVER", "SISKIN", "BITTERN", "WRYNECK")


#: Per kind: the subject, the sentence stating the fact, the question asking for it.
_PHRASES = {
    "code": ("{pick} of {project}", "For the record, the {subject} is {value}.", "What is the {subject}?"),
    "name": ("{pick} in {project}", "Note that the {subject} is {value}.", "Who is the {subject}?"),
    "number": ("{pick} in {project}", "FYI the {subject} is {value}.", "What is the {subject}?"),
    "decision": (
        "{pick} of {project}",
        "Decision: for the {subject} we go with {value} instead of {rejected}.",
        "What was chosen for the {subject}?",
    ),
}


@dataclass(frozen=True, slots=True)
class Needle:
    """One planted fact: the sentence, what it answers, and what finds it."""

    kind: str  # code | name | number | decision
    subject: str
    value: str
    sentence: str
    question: str
    query: str  # words one would search for: the subject, not the answer
    message: int = -1  # the message it was planted in


def make_needles(rng: random.Random, count: int = 4) -> list[Needle]:
    """``count`` needles of rotating kinds, their subjects and values drawn from ``rng``."""
    project = f"the {rng.choice(_PROJECTS)} project"
    pools: dict[str, Sequence[Any]] = {
        "code": _CODE_SUBJECTS,
        "name": _NAME_SUBJECTS,
        "number": _NUMBER_SUBJECTS,
        "decision": range(len(_DECISION_SUBJECTS)),
    }
    subjects = {kind: rng.sample(pool, len(pool)) for kind, pool in pools.items()}  # one order per kind
    kinds = list(subjects)
    out: list[Needle] = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        pick = subjects[kind][(i // len(kinds)) % len(subjects[kind])]
        rejected = ""
        if kind == "code":
            prefix = "".join(rng.choice("BCDFGHJKLMNPQRSTVWXZ") for _ in range(2))
            value = f"{prefix}-{rng.randint(1000, 9999)}-{rng.choice(_CODE_WORDS)}"
        elif kind == "name":
            value = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        elif kind == "number":
            value = f"{rng.randint(1_000_000, 9_999_999):,}"
        else:
            pick, options = _DECISION_SUBJECTS[int(pick)]
            value, rejected = rng.sample(options, 2)
        subject_form, sentence, question = _PHRASES[kind]
        subject = subject_form.format(pick=pick, project=project)
        said = {"subject": subject, "value": value, "rejected": rejected}
        out.append(
            Needle(kind, subject, value, sentence.format(**said), question.format(**said), query=subject)
        )
    return out


def make_instruction(rng: random.Random) -> str:
    """A standing instruction with a unique tag, planted and pinned to check that pins survive."""
    tag = f"R-{rng.randint(100, 999)}"
    return f"Standing rule {tag}: {rng.choice(_RULES)}."


@dataclass(frozen=True, slots=True)
class Planted:
    """A transcript with needles in it, as bytes and as read back."""

    transcript: Transcript
    data: bytes
    needles: tuple[Needle, ...]
    instruction: str | None
    pin: str | None  # the regular expression that pins the instruction's message
    conversation: int  # the one needles were planted in


def _candidates(messages: Sequence[Message], keep_last: int) -> tuple[list[Message], list[Message]]:
    """(early, later) removable messages, tool results and user text first; never the first request, system or
    critical messages or the kept tail. Later ones serve a conversation with too few early ones."""
    n = len(messages)
    early = max(1, int(n * EARLY_SHARE))
    tail = n - max(keep_last, 1)
    first_request = next((m.index for m in messages if m.is_request), None)
    usual: list[tuple[int, Message]] = []
    other: list[tuple[int, Message]] = []
    for pos, m in enumerate(messages[: max(0, tail)]):
        if m.index == first_request or m.role == "system" or m.importance == "critical" or _target(m) is None:
            continue
        if any(isinstance(b, ToolResultBlock) for b in m.blocks) or m.role == "user":
            usual.append((pos, m))
        else:
            other.append((pos, m))
    ranked = usual + other  # tool results and user text first, then assistant text
    return [m for pos, m in ranked if pos < early], [m for pos, m in ranked if pos >= early]


def _target(m: Message) -> int | None:
    """The block a sentence goes into: the last tool result, else the last non-empty text block."""
    last_first = list(enumerate(m.blocks))[::-1]
    results = (i for i, b in last_first if isinstance(b, ToolResultBlock))
    texts = (i for i, b in last_first if isinstance(b, TextBlock) and b.text.strip())
    return next(results, next(texts, None))


def _with_sentence(m: Message, sentence: str) -> Message | None:
    if (i := _target(m)) is None or not isinstance(b := m.blocks[i], ToolResultBlock | TextBlock):
        return None
    sep = "\n" if isinstance(b, ToolResultBlock) else "\n\n"
    return replace(
        m, blocks=(*m.blocks[:i], replace(b, text=f"{b.text.rstrip()}{sep}{sentence}"), *m.blocks[i + 1 :])
    )


def _planted_copy(t: Transcript, conv: int, m: Message, sentence: str) -> Transcript | None:
    """``t`` with ``sentence`` appended to ``m``, written by the adapter and read back; None when it cannot
    be written there, the reread message lacks it, or the shape changed (not a faithful plant)."""
    changed = _with_sentence(m, sentence)
    if changed is None:
        return None
    messages = tuple(changed if x.index == m.index else x for x in t.conversation(conv))
    try:
        written = write_transcript(t, {conv: messages}, get_adapter(t.format), archive_id="")
        reread = load(named_bytes(t.source, written.to_bytes()), input_format=t.format)
    except (CtxcError, ValueError):  # adapters raise ValueError for a message they cannot encode
        return None
    found = next((x for x in reread.messages if x.index == m.index), None)
    if found is None or sentence not in found.text or len(reread.messages) != len(t.messages):
        return None
    return replace(reread, source=t.source)  # a name "" would read back as "-"


def _live_part(t: Transcript, conv: int) -> tuple[Message, ...]:
    """What the client sends of a conversation: needles go where compaction must deal with them."""
    return live_context(t.boundaries, t.messages).split(t.conversation(conv))[1]


def _roomiest_conversation(t: Transcript, keep_last: int) -> int:
    """The conversation with the most messages to plant in (then the largest); datasets have several."""
    convs = sorted({m.conversation for m in t.messages} - live_context(t.boundaries, t.messages).side)
    if len(convs) <= 1:
        return convs[0] if convs else 0

    def room(conv: int) -> tuple[int, int, int]:
        msgs = _live_part(t, conv)
        early, later = _candidates(msgs, keep_last)
        return len(early) + len(later), sum(len(m.text) for m in msgs), -conv

    return max(convs, key=room)


def plant(
    transcript: Transcript, needles: Sequence[Needle], *, instruction: str | None = None, keep_last: int = 4
) -> Planted:
    """``transcript`` with each needle in its own early message; those that find none are left out."""
    conv = _roomiest_conversation(transcript, keep_last)
    current = transcript
    planted: list[Needle] = []
    used: set[int] = set()
    for needle in needles:
        messages = _live_part(current, conv)
        early, later = (
            [m for m in group if m.index not in used] for group in _candidates(messages, keep_last)
        )
        # Spread the needles over the early span: the k-th of n goes about k/n of the way in.
        cut = (len(planted) * len(early)) // max(1, len(needles))
        for m in early[cut:] + early[:cut] + later:
            candidate = _planted_copy(current, conv, m, needle.sentence)
            if candidate is None:
                continue
            current = candidate
            used.add(m.index)
            planted.append(replace(needle, message=m.index))
            break
    pin: str | None = None
    if instruction is not None:
        current, pin = _plant_instruction(current, conv, instruction, used, keep_last)
    return Planted(current, current.to_bytes(), tuple(planted), instruction if pin else None, pin, conv)


def _plant_instruction(
    t: Transcript, conv: int, instruction: str, used: set[int], keep_last: int
) -> tuple[Transcript, str | None]:
    """Append ``instruction`` to a user message in the first half (the first request if none other)."""
    messages = _live_part(t, conv)
    half = messages[: max(1, len(messages) // 2)]
    users = [m for m in half if m.role == "user" and _target(m) is not None and m.index not in used]
    texts = [m for m in users if any(isinstance(b, TextBlock) and b.text.strip() for b in m.blocks)]
    first = next((m for m in messages if m.is_request), None)
    order = [m for m in texts if first is None or m.index != first.index] + ([first] if first else []) + users
    for m in order:
        candidate = _planted_copy(t, conv, m, instruction)
        if candidate is not None:
            return candidate, re.escape(instruction)
    return t, None
