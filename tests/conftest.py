"""Shared fixtures: the real-transcript corpus beside the checkout, and the bundled samples."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The fake Anthropic API (a real HTTP server on 127.0.0.1) and its autouse ``no_internet`` guard: no
# test may open a connection anywhere but loopback.
pytest_plugins = ["fake_anthropic"]

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CORPUS = Path(os.environ.get("CTXC_CORPUS", ROOT.parent / "shared" / "corpus"))


def corpus_files(pattern: str = "**/*") -> list[Path]:
    """Every data file of the corpus (not its .md notes). Empty when the corpus is not beside the checkout."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.glob(pattern) if p.is_file() and p.suffix in (".jsonl", ".json"))


def sample_files() -> list[Path]:
    return sorted(p for p in SAMPLES.glob("*.jsonl") if p.is_file())


@pytest.fixture(scope="session", autouse=True)
def _corpus_present_in_ci() -> None:
    # CI always has ../shared; a fresh machine may not, where the corpus tests are skipped instead.
    if os.environ.get("CI") and not CORPUS.is_dir():
        pytest.fail(f"CI=true but the corpus is missing at {CORPUS}")


def corpus_params(pattern: str = "**/*") -> list[object]:
    files = corpus_files(pattern)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no corpus at {CORPUS}"))]
    return [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in files]


@pytest.fixture(scope="session", autouse=True)
def _private_cache_and_archive(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Tests never touch the user's ~/.cache/ctxc or a ./.ctxc archive in the checkout.
    os.environ.setdefault("CTXC_CACHE_DIR", str(tmp_path_factory.mktemp("ctxc-cache")))
    os.environ.setdefault("CTXC_ARCHIVE", str(tmp_path_factory.mktemp("ctxc-archive")))
    # Nor the developer's own Claude Code and Codex sessions (session ids, ``latest``, ``ctxc sessions``).
    os.environ.setdefault("CLAUDE_CONFIG_DIR", str(tmp_path_factory.mktemp("claude-home")))
    os.environ.setdefault("CODEX_HOME", str(tmp_path_factory.mktemp("codex-home")))


@pytest.fixture
def lax_umask() -> Iterator[None]:
    """The common umask 022, under which a file made without a mode is readable by everyone."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``ctxc ARGS`` in this process: its exit code, stdout and stderr."""
    from ctxc.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out, err
