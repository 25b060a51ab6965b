"""Model profiles: the table's figures, id normalisation, and unknown names."""

from __future__ import annotations

import pytest

from ctxc.errors import UsageError
from ctxc.profiles import DEFAULT_MODEL, PROFILES, ModelProfile, find_profile, get_profile
from ctxc.tokens import TOKENIZERS


def test_table_is_consistent() -> None:
    names = [p.name for p in PROFILES]
    assert len(names) == len(set(names))
    for p in PROFILES:
        assert p.tokenizer in TOKENIZERS
        assert p.provider in ("anthropic", "openai", "google")
        assert 0 < p.max_output <= p.window
    with pytest.raises(AttributeError):
        PROFILES[0].window = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "window", "max_output", "tokenizer"),
    [
        ("claude-sonnet-4-5", 200_000, 64_000, "o200k_base"),
        ("claude-opus-4-5", 200_000, 64_000, "o200k_base"),
        ("claude-haiku-4-5", 200_000, 64_000, "o200k_base"),
        ("claude-opus-4-1", 200_000, 32_000, "o200k_base"),
        ("claude-sonnet-4", 200_000, 64_000, "o200k_base"),
        ("claude-3-7-sonnet", 200_000, 64_000, "o200k_base"),
        ("gpt-5", 400_000, 128_000, "o200k_base"),
        ("gpt-5-mini", 400_000, 128_000, "o200k_base"),
        ("gpt-4.1", 1_047_576, 32_768, "o200k_base"),
        ("gpt-4o", 128_000, 16_384, "o200k_base"),
        ("o3", 200_000, 100_000, "o200k_base"),
        ("o4-mini", 200_000, 100_000, "o200k_base"),
        ("gpt-4", 8_192, 8_192, "cl100k_base"),
        ("gpt-3.5-turbo", 16_385, 4_096, "cl100k_base"),
        ("gemini-2.5-pro", 1_048_576, 65_536, "o200k_base"),
        ("gemini-2.5-flash", 1_048_576, 65_536, "o200k_base"),
    ],
)
def test_published_figures(name: str, window: int, max_output: int, tokenizer: str) -> None:
    p = get_profile(name)
    assert (p.name, p.window, p.max_output, p.tokenizer) == (name, window, max_output, tokenizer)


def test_default() -> None:
    assert DEFAULT_MODEL == "claude-sonnet-4-5"
    assert get_profile() == get_profile(DEFAULT_MODEL)
    assert isinstance(get_profile(), ModelProfile)


@pytest.mark.parametrize(
    ("model_id", "name"),
    [
        # ids as the corpus's logs write them
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-opus-4-6", "claude-opus-4-6"),
        ("gpt-5.3-codex", "gpt-5.3-codex"),
        ("gpt-5.1-codex", "gpt-5.1-codex"),
        ("gpt-5.2", "gpt-5.2"),
        # provider spellings
        ("Claude-Opus-4-5", "claude-opus-4-5"),
        ("anthropic/claude-opus-4.5", "claude-opus-4-5"),
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
        ("anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet"),
        ("claude-haiku-4-5@20251001", "claude-haiku-4-5"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("claude-sonnet-4-0", "claude-sonnet-4"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("gpt-4-0613", "gpt-4"),
        ("openai/gpt-5-mini", "gpt-5-mini"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("gemini-2.5-pro-preview-06-05", "gemini-2.5-pro"),
        ("o4-mini-2025-04-16", "o4-mini"),
    ],
)
def test_ids_resolve(model_id: str, name: str) -> None:
    assert get_profile(model_id).name == name


@pytest.mark.parametrize(
    "model_id",
    [
        "claude-opus-4-7",  # a newer version is not the older one with a suffix
        "gpt-5.5",
        "gpt-4-1106-preview",
        "meta-llama/llama-4-maverick",
        "<synthetic>",
        "",
    ],
)
def test_unknown_ids_are_not_guessed(model_id: str) -> None:
    assert find_profile(model_id) is None


def test_claude_code_1m_marker() -> None:
    p = get_profile("claude-sonnet-4-5[1m]")
    assert p.window == 1_000_000
    assert p.max_output == 64_000
    assert get_profile("claude-sonnet-4-5").window == 200_000


def test_unknown_lists_close_names() -> None:
    with pytest.raises(UsageError) as err:
        get_profile("claude-sonet-4-5")
    assert "claude-sonnet-4-5" in str(err.value)
    with pytest.raises(UsageError) as err:
        get_profile("mystery")
    assert "gpt-4o" in str(err.value)  # nothing close: the known names are listed


def test_resolve_window() -> None:
    from ctxc.profiles import resolve_window

    assert resolve_window() == (200_000, "claude-sonnet-4-5")
    assert resolve_window(window=50_000) == (50_000, None)
    assert resolve_window(model="gpt-4.1-2025-04-14") == (1_047_576, "gpt-4.1")
    assert resolve_window(model="gpt-4o", window=64_000) == (64_000, "gpt-4o")
    with pytest.raises(UsageError):
        resolve_window(model="nope-1")
    with pytest.raises(UsageError):
        resolve_window(window=0)
