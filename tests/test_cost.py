"""What a message costs: framing, text parts, tool calls as compact JSON, and images."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxc.model import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    dumps_compact,
)
from ctxc.tokens import get_tokenizer
from ctxc.tokens.base import Tokenizer
from ctxc.tokens.cache import CachedCounter, TokenCache
from ctxc.tokens.cost import (
    IMAGE_UNKNOWN_TOKENS,
    MESSAGE_OVERHEAD,
    count_messages,
    image_tokens,
    message_images,
    message_texts,
    tool_tokens,
)

O200K = get_tokenizer("o200k_base")


def messages_tokens(
    messages: list[Message], tokenizer: Tokenizer, cache: TokenCache | None = None
) -> list[int]:
    return count_messages(messages, CachedCounter(tokenizer, cache))


def message_tokens(message: Message, tokenizer: Tokenizer, cache: TokenCache | None = None) -> int:
    return messages_tokens([message], tokenizer, cache)[0]


def test_overhead_is_four() -> None:
    assert MESSAGE_OVERHEAD == 4
    m = Message(role="user", blocks=(TextBlock("hello world"),))
    assert message_tokens(m, O200K) == 4 + 2
    # A message with no content at all is a client bookkeeping record that is never sent.
    assert message_tokens(Message(role="system", blocks=()), O200K) == 0
    assert message_tokens(Message(role="assistant", blocks=(TextBlock(""),)), O200K) == MESSAGE_OVERHEAD


def test_message_texts_per_block_kind() -> None:
    m = Message(
        role="assistant",
        blocks=(
            ThinkingBlock("let me look"),
            TextBlock("Running it."),
            ToolUseBlock(id="toolu_1", name="Bash", input={"command": "ls -la", "timeout": 5}),
            ToolUseBlock(id="call_2", name="broken", input="{not json"),
            ToolResultBlock(tool_use_id="toolu_1", text="total 0\n"),
            UnknownBlock(raw={"type": "server_tool_use"}, text="web_search q"),
            ImageBlock(width=10, height=10),
            TextBlock(""),
            ThinkingBlock(""),  # redacted thinking: nothing to count
        ),
    )
    assert message_texts(m) == [
        "let me look",
        "Running it.",
        "Bash",
        '{"command":"ls -la","timeout":5}',  # compact JSON, as on the wire
        "broken",
        "{not json",  # arguments that were not JSON count as the raw string
        "total 0\n",
        "web_search q",
    ]


def test_message_tokens_adds_parts_and_images() -> None:
    shot = ImageBlock(media_type="image/png", width=1000, height=1000)
    m = Message(
        role="tool",
        blocks=(
            ToolResultBlock(tool_use_id="t", text="see screenshot", images=(shot,)),
            ImageBlock(),  # size unknown
        ),
    )
    assert message_images(m) == [shot, ImageBlock()]
    expected = MESSAGE_OVERHEAD + O200K.count("see screenshot") + 1334 + IMAGE_UNKNOWN_TOKENS
    assert message_tokens(m, O200K) == expected


@pytest.mark.parametrize(
    ("w", "h", "tokens"),
    [
        (200, 200, 54),  # ceil(40000 / 750)
        (1000, 1000, 1334),
        (1092, 1092, 1590),  # Anthropic's documented 1:1 maximum, ~1,600 tokens
        (1568, 400, 837),  # long edge exactly at the limit: not scaled
        (3136, 800, 837),  # long edge 2x over: halved to 1568x400
        (2000, 2000, 1600),  # scaled to the ~1,600 token cap
        (4000, 1000, 820),  # 1568x392 after the edge limit, under the token cap
        (1, 1, 1),
    ],
)
def test_image_tokens(w: int, h: int, tokens: int) -> None:
    assert image_tokens(ImageBlock(width=w, height=h)) == tokens


def test_image_tokens_unknown_size() -> None:
    assert IMAGE_UNKNOWN_TOKENS == 1600
    assert image_tokens(ImageBlock()) == IMAGE_UNKNOWN_TOKENS
    assert image_tokens(ImageBlock(width=100)) == IMAGE_UNKNOWN_TOKENS
    assert image_tokens(ImageBlock(width=0, height=0)) == IMAGE_UNKNOWN_TOKENS


def test_tokenizer_choice_matters() -> None:
    m = Message(role="user", blocks=(TextBlock("서울특별시 강남구 테헤란로에서 회의가 있습니다." * 5),))
    cl100k = message_tokens(m, get_tokenizer("cl100k_base"))
    o200k = message_tokens(m, O200K)
    assert cl100k > o200k  # cl100k is much less efficient on Korean
    approx = message_tokens(m, get_tokenizer("approx"))
    assert abs(approx - o200k) / o200k < 0.25


def test_batch_equals_single_and_cache_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXC_NO_CACHE", raising=False)
    monkeypatch.setattr("ctxc.system._warned", set())
    long = "def handler(event, context):\n    return {'statusCode': 200}\n" * 5
    messages = [
        Message(role="user", blocks=(TextBlock("fix the handler"),)),
        Message(
            role="assistant",
            blocks=(ToolUseBlock(id="a", name="Read", input={"file_path": "/srv/app/handler.py"}),),
        ),
        Message(role="tool", blocks=(ToolResultBlock(tool_use_id="a", text=long),)),
        Message(role="tool", blocks=(ToolResultBlock(tool_use_id="b", text=long),)),
    ]
    single = [message_tokens(m, O200K) for m in messages]
    assert messages_tokens(messages, O200K) == single
    cache = TokenCache(tmp_path / "tokens.sqlite3")
    assert messages_tokens(messages, O200K, cache) == single
    # Every distinct text is cached (short ones too, so a warm run never builds the encoding):
    # "fix the handler", "Read", the input's JSON, and the long text once.
    assert cache.size() == 4
    assert messages_tokens(messages, O200K, cache) == single
    assert message_tokens(messages[2], O200K, cache) == single[2]
    assert messages_tokens([], O200K) == []


_TEXT = st.text(max_size=4)
_NAME = st.sampled_from(["Read", "Grep", ""])
_SIZE = st.one_of(st.none(), st.integers(1, 3000))
_IMAGE = st.builds(ImageBlock, width=_SIZE, height=_SIZE)
_BLOCK = st.one_of(
    st.builds(TextBlock, _TEXT),
    st.builds(ThinkingBlock, _TEXT),
    st.builds(UnknownBlock, raw=st.none(), text=_TEXT),
    _IMAGE,
    st.builds(
        ToolUseBlock,
        id=st.just("t"),
        name=_NAME,
        input=st.one_of(_TEXT, st.none(), st.dictionaries(_TEXT, st.integers(-99, 99), max_size=2)),
    ),
    st.builds(
        ToolResultBlock,
        tool_use_id=st.just("t"),
        text=_TEXT,
        name=st.one_of(st.none(), _NAME),
        images=st.lists(_IMAGE, max_size=2).map(tuple),
    ),
)


@given(st.lists(_BLOCK, max_size=8))
def test_tool_tokens_attributes_each_part_to_its_block(blocks: list[Block]) -> None:
    """Each tool's share is its own blocks' parts, read from the message's part counts in order: a
    part count of its length (+1, so an empty part misplaced shows) makes any misalignment visible."""
    m = Message(role="assistant", blocks=tuple(blocks))
    counts = [len(t) + 1 for t in message_texts(m)]
    expected: dict[str, int] = {}
    for b in blocks:
        if isinstance(b, ToolUseBlock) and b.name:
            args = b.input if isinstance(b.input, str) else dumps_compact(b.input)
            own = len(b.name) + 1 + (len(args) + 1 if args else 0)
        elif isinstance(b, ToolResultBlock) and b.name:
            own = (len(b.text) + 1 if b.text else 0) + sum(image_tokens(i) for i in b.images)
        else:
            continue
        expected[b.name] = expected.get(b.name, 0) + own
    assert tool_tokens(m, counts) == expected
