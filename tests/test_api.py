"""The library API an agent loop or script uses, without the CLI."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SAMPLES

import ctxc
from ctxc.archive import Archive
from ctxc.compaction.run import CompactOptions
from ctxc.errors import UsageError


def test_all_matches_lazy_exports() -> None:
    assert sorted(ctxc.__all__) == sorted([*ctxc._EXPORTS, "__version__"])
    for name in ctxc.__all__:
        assert getattr(ctxc, name) is not None
    with pytest.raises(AttributeError):
        _ = ctxc.no_such_name  # type: ignore[attr-defined]


def test_import_is_cheap() -> None:
    # Startup time is a feature: importing ctxc must not pull in the tokenizer, rich, or the Anthropic SDK.
    heavy = "('tiktoken', 'anthropic', 'rich', 'typer')"
    code = f"import sys, ctxc; print(','.join(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_analyze_never_imports_anthropic(tmp_path: Path) -> None:
    code = (
        "import sys; from ctxc.cli import main\n"
        "try:\n    main(['analyze', sys.argv[1], '--format', 'json'])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('anthropic' in sys.modules and 'LOADED' or 'absent')"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(SAMPLES / "codex.jsonl")], capture_output=True, text=True, check=True
    )
    assert res.stderr.endswith("absent")


def test_load_dump_analyze_count() -> None:
    path = SAMPLES / "chat-anthropic.jsonl"
    t = ctxc.load(path)
    buf = io.BytesIO()
    ctxc.dump(t, buf)
    assert buf.getvalue() == path.read_bytes()
    a = ctxc.analyze(path, use_cache=False)
    assert a.total_tokens == ctxc.count_tokens(t)
    assert sum(ctxc.count_tokens(m) for m in t.messages) == a.total_tokens
    assert ctxc.count_tokens("hello world") == 2
    assert ctxc.count_tokens("안녕하세요, 세계", tokenizer="cl100k_base") > 0


def test_load_analyze_and_dump_take_binary_streams_and_say_so(tmp_path: Path) -> None:
    # A text stream, a transcript or bytes were a TypeError or AttributeError from inside the reader.
    path = SAMPLES / "chat-openai.jsonl"
    t = ctxc.load(path)
    with path.open() as text:
        for wrong in (text, path.read_bytes(), t, None):
            with pytest.raises(UsageError, match="binary stream"):
                ctxc.load(wrong)  # type: ignore[arg-type]
            with pytest.raises(UsageError, match="binary stream"):
                ctxc.analyze(wrong, use_cache=False)  # type: ignore[arg-type]
    with (tmp_path / "out.jsonl").open("w") as text:
        for wrong in (text, io.StringIO(), str(tmp_path / "out.jsonl")):
            with pytest.raises(UsageError, match="binary stream"):
                ctxc.dump(t, wrong)  # type: ignore[arg-type]


def test_compact_from_the_library(tmp_path: Path) -> None:
    t = ctxc.load(SAMPLES / "claude-code.jsonl")
    target = ctxc.count_tokens(t) // 3
    result = ctxc.compact(t, CompactOptions(strategy="fifo", target_tokens=target), archive=Archive(tmp_path))
    assert result.tokens_after <= target < result.tokens_before
    assert Archive(tmp_path).read(result.archive_id) == (SAMPLES / "claude-code.jsonl").read_bytes()


def test_compact_names_what_it_takes(tmp_path: Path) -> None:
    # A path or dict options were an AttributeError from inside; an archive folder is taken, as elsewhere.
    t = ctxc.load(SAMPLES / "chat-openai.jsonl")
    with pytest.raises(UsageError, match="Transcript"):
        ctxc.compact(SAMPLES / "chat-openai.jsonl")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="CompactOptions"):
        ctxc.compact(t, {"strategy": "fifo"})  # type: ignore[arg-type]
    result = ctxc.compact(t, CompactOptions(target_tokens=3000), archive=str(tmp_path / "archive"))
    assert (
        Archive.open(tmp_path / "archive").read(result.archive_id)
        == (SAMPLES / "chat-openai.jsonl").read_bytes()
    )


def test_a_window_that_is_no_number_is_a_usage_error() -> None:
    # A string was a TypeError from the range check, True a 1-token window, and compact_messages took 0
    # for "not given".
    for window in ("200000", True):
        with pytest.raises(UsageError, match="context window"):
            ctxc.analyze(SAMPLES / "chat-openai.jsonl", window=window, use_cache=False)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="context window"):
            ctxc.ContextManager(window=window)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="context window"):
        ctxc.compact_messages([{"role": "user", "content": "hi"}], max_tokens=100, window=0)


USER_FILE = """
from collections.abc import Sequence
from typing import Any

import ctxc
from ctxc.errors import CtxcError


class Quarter:
    name = "quarter"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t) // 4 for t in texts]


def shrink(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    try:
        return ctxc.compact_messages(messages, max_tokens=8000, token_counter=Quarter())
    except CtxcError:
        return messages


manager = ctxc.ContextManager(window=100_000)
tokens: int = manager.count([{"role": "user", "content": "hi"}])
"""


def test_a_users_file_type_checks_against_the_installed_package(tmp_path: Path) -> None:
    # Installed (here: a venv whose .pth points at the checkout), ctxc's hints count only with py.typed.
    pytest.importorskip("mypy")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True, timeout=120
    )
    (site,) = (tmp_path / "venv" / "lib").glob("python*/site-packages")
    (site / "ctxc_checkout.pth").write_text(str(ROOT) + "\n")
    (tmp_path / "user.py").write_text(USER_FILE)
    # The docs' examples are users' files too (``messages`` stands for the caller's list).
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "library.md").read_text(), re.S)
    for n, block in enumerate(blocks):
        (tmp_path / f"doc_{n}.py").write_text(
            f"from typing import Any\nmessages: list[dict[str, Any]] = []\n{block}"
        )
    python = tmp_path / "venv" / "bin" / "python"
    files = ["user.py", *(f"doc_{n}.py" for n in range(len(blocks)))]
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python), *files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")},
    )
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("doc", ["library.md", "ray.md"])
def test_the_docs_python_examples_run(doc: str, tmp_path: Path) -> None:
    # Each block as written, in a folder holding the files it names; a block without its data gets the
    # sample list as ``messages``. Ray's block needs Ray.
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / doc).read_text(), re.S)
    assert blocks
    shutil.copy(SAMPLES / "claude-code.jsonl", tmp_path / "session.jsonl")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(SAMPLES / "dataset.jsonl", tmp_path / "dataset.jsonl")
    messages = [json.loads(line) for line in (SAMPLES / "chat-openai.jsonl").read_text().splitlines()]
    env = {**os.environ, "CTXC_ARCHIVE": str(tmp_path / "archive"), "PYTHONPATH": str(ROOT)}
    for block in blocks:
        if "ray.data" in block and importlib.util.find_spec("ray") is None:
            continue
        res = subprocess.run(
            [sys.executable, "-c", f"messages = {messages!r}\n{block}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert res.returncode == 0, block + res.stderr


@pytest.mark.parametrize(
    "obj", [[{"role": "user", "content": "hello"}], {"role": "user", "content": "hello"}, ["hello"], None, 5]
)
def test_count_tokens_names_what_it_counts(obj: Any) -> None:
    # Message dicts are counted by ContextManager.count; here they are a usage error, not an AttributeError.
    with pytest.raises(UsageError, match="ContextManager"):
        ctxc.count_tokens(obj)
