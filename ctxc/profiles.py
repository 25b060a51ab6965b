"""Model profiles: context window (input + output, without betas), output limit and tokenizer, as the
providers published them in early 2026. Claude and Gemini tokenizers are not public: o200k_base estimates
them (recorded usage, when a log has it, is the ground truth)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxc.errors import UsageError
from ctxc.live import thread_usage
from ctxc.model import Usage

#: The most tokens a window, target or budget may be: JSON reports carry it, and JSON readers
#: (JavaScript's numbers) keep integers exact up to here.
MAX_TOKENS = 2**53


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    provider: str
    window: int
    tokenizer: str
    max_output: int
    note: str = ""


_A, _O, _G = "anthropic", "openai", "google"
_ESTIMATE = "o200k_base"  # Claude/Gemini: o200k as the estimate (their tokenizers are not public)


def _family(
    provider: str, window: int, tokenizer: str, max_output: int, names: str, note: str = ""
) -> tuple[ModelProfile, ...]:
    """Profiles alike but for their names (space-separated)."""
    return tuple(ModelProfile(name, provider, window, tokenizer, max_output, note) for name in names.split())


PROFILES: tuple[ModelProfile, ...] = (
    ModelProfile("claude-opus-4-6", _A, 1_000_000, _ESTIMATE, 128_000),
    ModelProfile("claude-sonnet-4-6", _A, 1_000_000, _ESTIMATE, 64_000),
    ModelProfile("claude-opus-4-5", _A, 200_000, _ESTIMATE, 64_000),
    ModelProfile("claude-sonnet-4-5", _A, 200_000, _ESTIMATE, 64_000, "1M window with the context-1m beta"),
    ModelProfile("claude-haiku-4-5", _A, 200_000, _ESTIMATE, 64_000),
    *_family(_A, 200_000, _ESTIMATE, 32_000, "claude-opus-4-1 claude-opus-4"),
    ModelProfile("claude-sonnet-4", _A, 200_000, _ESTIMATE, 64_000, "1M window with the context-1m beta"),
    ModelProfile("claude-3-7-sonnet", _A, 200_000, _ESTIMATE, 64_000, "128k output with a beta header"),
    *_family(_A, 200_000, _ESTIMATE, 8_192, "claude-3-5-sonnet claude-3-5-haiku"),
    *_family(_A, 200_000, _ESTIMATE, 4_096, "claude-3-opus claude-3-haiku"),
    # GPT-5: a 400k window of which at most 272k input (128k reserved for output).
    *_family(
        _O,
        400_000,
        "o200k_base",
        128_000,
        "gpt-5 gpt-5-mini gpt-5-nano gpt-5-codex gpt-5.1 gpt-5.1-codex gpt-5.2 gpt-5.2-codex gpt-5.3-codex",
        "input at most 272k",
    ),
    ModelProfile("gpt-5.4", _O, 1_050_000, "o200k_base", 128_000, "input over 272k is billed at 2x"),
    *_family(_O, 1_047_576, "o200k_base", 32_768, "gpt-4.1 gpt-4.1-mini gpt-4.1-nano"),
    *_family(_O, 128_000, "o200k_base", 16_384, "gpt-4o gpt-4o-mini"),
    *_family(_O, 200_000, "o200k_base", 100_000, "o3 o3-mini o4-mini o1"),
    ModelProfile("gpt-4-turbo", _O, 128_000, "cl100k_base", 4_096),
    ModelProfile("gpt-4-32k", _O, 32_768, "cl100k_base", 32_768),
    ModelProfile("gpt-4", _O, 8_192, "cl100k_base", 8_192),
    ModelProfile("gpt-3.5-turbo", _O, 16_385, "cl100k_base", 4_096),
    *_family(_G, 1_048_576, _ESTIMATE, 65_536, "gemini-2.5-pro gemini-2.5-flash gemini-2.5-flash-lite"),
    ModelProfile("gemini-2.0-flash", _G, 1_048_576, _ESTIMATE, 8_192),
)

DEFAULT_MODEL = "claude-sonnet-4-5"

_BY_NAME = {p.name: p for p in PROFILES}
#: Provider aliases whose suffix is a version digit, which prefix matching deliberately refuses.
_ALIASES = {"claude-opus-4-0": "claude-opus-4", "claude-sonnet-4-0": "claude-sonnet-4"}

# Routing prefixes: "anthropic/claude-...", Gemini's "models/gemini-...", Bedrock's "us.anthropic.claude-...".
_PREFIX = re.compile(r"^(?:[\w.-]+/)+|^(?:(?:us|eu|apac|global)\.)?(?:anthropic|openai|google)\.")
# Version tails: dates (-20251101, -2024-08-06, @20251101), Bedrock's -v1:0, -latest, OpenAI's -0613.
_TAIL = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2}|-\d{4}|-v\d+(?::\d+)?|-latest)+$")
_ONE_M = "[1m]"  # Claude Code's marker for a session run with the 1M-token window


def _normalize(model: str) -> str:
    name = _PREFIX.sub("", model.strip().lower())
    if name.startswith("claude-"):
        name = name.replace(".", "-")  # OpenRouter writes claude-opus-4.5
    return _TAIL.sub("", name)


def _extends(name: str, candidate: str) -> bool:
    rest = name[len(candidate) :]
    return name.startswith(candidate) and len(rest) >= 2 and rest[0] == "-" and not rest[1].isdigit()


def find_profile(model: str) -> ModelProfile | None:
    """The profile of a model id as logs write it (dated, prefixed), or None; an id may extend a name with
    a dash and a non-digit ("gpt-4o-mini-tts"), but "claude-opus-4-7" is another model."""
    text = model.strip().lower()
    one_m = text.endswith(_ONE_M)
    if one_m:
        text = text[: -len(_ONE_M)]
    name = _normalize(text)
    name = _ALIASES.get(name, name)
    profile = _BY_NAME.get(name)
    if profile is None:
        longer = [c for c in _BY_NAME if _extends(name, c)]
        profile = _BY_NAME[max(longer, key=len)] if longer else None
    if profile is not None and one_m and profile.provider == _A and profile.window < 1_000_000:
        profile = dataclasses.replace(
            profile, name=profile.name + _ONE_M, window=1_000_000, note="1M window (context-1m beta)"
        )
    return profile


def get_profile(model: str | None = None) -> ModelProfile:
    """The profile of ``model`` (default :data:`DEFAULT_MODEL`); unknown -> UsageError naming close ones."""
    name = DEFAULT_MODEL if model is None else model
    if not isinstance(name, str):
        raise UsageError(f"a model is named by a string, got {name!r}")
    profile = find_profile(name)
    if profile is not None:
        return profile
    close = difflib.get_close_matches(_normalize(name), list(_BY_NAME), n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known models: {', '.join(_BY_NAME)}"
    raise UsageError(f"unknown model {name!r}; {hint}")


def resolve_window(*, model: str | None = None, window: int | None = None) -> tuple[int, str | None]:
    """The context window to measure against and its model: ``window`` if given (``model`` still checked),
    else the window of ``model`` or of :data:`DEFAULT_MODEL`."""
    number = isinstance(window, int | float) and not isinstance(window, bool)
    if window is not None and not (number and 0 < window <= MAX_TOKENS):
        raise UsageError(
            f"the context window must be a positive number of tokens up to 2**53, not {window!r}"
        )
    if model is None:
        return (window, None) if window is not None else (get_profile().window, DEFAULT_MODEL)
    profile = get_profile(model)
    return (window if window is not None else profile.window), profile.name


@dataclass(frozen=True, slots=True)
class WindowChoice:
    """The window a log is measured against, its model, and its source: ``flag``, ``log`` (recorded),
    ``log model`` (the recorded model's profile) or ``default``."""

    window: int
    model: str | None
    source: str


def window_for_log(
    *, model: str | None = None, window: int | None = None, usage: Sequence[Usage] = ()
) -> WindowChoice:
    """:func:`resolve_window`, but with neither flag given, the model and window the log records (its
    own thread's: an inline subagent run may use another model)."""
    if model is not None or window is not None:
        win, name = resolve_window(model=model, window=window)
        return WindowChoice(win, name, "flag")
    usage = thread_usage(usage)
    recorded_window = next((u.window for u in reversed(usage) if u.window), None)
    recorded_model = next((u.model for u in reversed(usage) if u.model), None)
    if recorded_window is not None:
        return WindowChoice(recorded_window, recorded_model, "log")
    profile = find_profile(recorded_model) if recorded_model else None
    if profile is not None:
        return WindowChoice(profile.window, recorded_model, "log model")
    win, name = resolve_window()
    return WindowChoice(win, name, "default")
