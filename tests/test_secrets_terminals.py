"""Secrets stay private and terminals stay safe: archive modes under a lax umask, control characters
shown visibly in every human-readable output and kept byte-exact in machine output.

Each test here holds one promise of docs/reliability.md, "Secrets, terminals and odd inputs".
"""

from __future__ import annotations

import io
import stat
from pathlib import Path

import orjson
import pytest
from conftest import run
from rich.table import Table
from rich.text import Text

from ctxc.archive import Archive
from ctxc.search.index import SearchIndex
from ctxc.terminal import one_line, visible, visible_console

SECRET = "sk-ant-api03-PRIVATEKEY0123456789"


def modes(root: Path) -> dict[str, int]:
    found = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}
    found["."] = stat.S_IMODE(root.stat().st_mode)
    return found


def too_open(root: Path) -> dict[str, str]:
    """Archive entries anyone but the owner may read: directories not 0700, files not 0600."""
    return {
        name: oct(mode)
        for name, mode in modes(root).items()
        if mode != (0o700 if (root / name).is_dir() else 0o600)
    }


def test_archive_private_under_umask_022(
    lax_umask: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(
        f'{{"role":"user","content":"my key is {SECRET}"}}\n{{"role":"assistant","content":"noted"}}\n'
    )
    src.chmod(0o600)
    root = tmp_path / "new" / "archive"
    monkeypatch.setenv("CTXC_ARCHIVE", str(root))
    code, _, err = run(capsys, "compact", str(src), "-s", "mask", "-o", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    code, out, err = run(capsys, "search", "PRIVATEKEY0123456789", "-f", "json")
    assert code == 0, err
    assert "PRIVATEKEY0123456789" in out
    # With a connection open SQLite keeps its -wal and -shm files: those hold the key too.
    with SearchIndex.for_archive(root) as index:
        assert index.has(next(iter(a.name for a in (root / "objects").rglob("*") if a.is_file())))
        assert (root / "search.sqlite-wal").exists()
        assert too_open(root) == {}
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700  # created by ctxc for the archive


def test_the_cache_is_private_under_umask_022(
    lax_umask: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache holds counts and scans by content hash, and the names of the files analyzed.
    root = tmp_path / "new" / "cache"
    monkeypatch.setenv("CTXC_CACHE_DIR", str(root))
    src = tmp_path / "t.jsonl"
    src.write_text(f'{{"role":"user","content":"my key is {SECRET}"}}\n')
    code, _, err = run(capsys, "analyze", str(src), "-f", "json")
    assert code == 0, err
    assert any(p.is_file() for p in root.rglob("*"))
    assert too_open(root) == {}


def test_archive_left_open_by_an_older_ctxc_is_tightened(
    lax_umask: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "archive"
    (root / "objects" / "ab").mkdir(parents=True, mode=0o755)
    (root / "objects").chmod(0o755)
    (root / "manifest.jsonl").write_bytes(b"")
    (root / "search.sqlite").write_bytes(b"")
    (root / "manifest.jsonl").chmod(0o644)
    (root / "search.sqlite").chmod(0o644)
    src = tmp_path / "t.jsonl"
    src.write_text(f'{{"role":"user","content":"{SECRET}"}}\n{{"role":"assistant","content":"ok"}}\n')
    monkeypatch.setenv("CTXC_ARCHIVE", str(root))
    code, _, err = run(capsys, "compact", str(src), "-s", "mask", "-o", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    found = modes(root)
    assert found["objects"] == 0o700  # nobody else can reach any object below it
    assert found["manifest.jsonl"] == 0o600
    assert found["search.sqlite"] == 0o600


#: Window title, clear screen, a clipboard write (OSC 52), an 8-bit CSI, and a RIGHT-TO-LEFT OVERRIDE and
#: an isolate that would show what follows reordered ("Trojan Source").
PAYLOAD = "\x1b]0;TITLE\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07\x9b31m\u202etxt.exe\u2067RLI\u2069"
SHOWN = "\\x1b]0;TITLE\\x07\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07\\x9b31m\\u202etxt.exe\\u2067RLI\\u2069"
#: The bidirectional formatting characters: embeddings and overrides, then isolates.
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _hostile(tmp_path: Path) -> Path:
    """A chat transcript with the payload in user text, a tool name, a tool input and result, and in
    its own file name."""
    lines = [
        {"role": "user", "content": "hello " + PAYLOAD},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "sh" + PAYLOAD,
                        "arguments": orjson.dumps({"cmd": PAYLOAD}).decode(),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out " + PAYLOAD},
        {"role": "assistant", "content": "done " + PAYLOAD},
    ]
    src = tmp_path / f"evil{PAYLOAD}.jsonl"
    src.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return src


def _assert_inert(text: str, what: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in text if c in "\x1b\x07" + BIDI or "\x80" <= c <= "\x9f"})
    assert not bad, f"{what} printed control characters {bad}: {text[:400]!r}"


def test_control_characters_are_shown_not_obeyed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "archive"))
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that table cells are not cut
    src = _hostile(tmp_path)
    original = src.read_bytes()
    code, _, err = run(capsys, "compact", str(src), "-s", "mask", "-o", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    _assert_inert(err, "compact")
    ident = Archive(tmp_path / "archive").object_id(original)[:12]
    human = [
        ("analyze", str(src), "-f", "table", "--messages"),
        ("validate", str(src)),
        ("check", str(src), "--max-tokens", "10"),
        ("check", str(src), "--max-tokens", "10", "-f", "github"),
        ("repair", str(src), "-o", str(tmp_path / "repaired.jsonl")),
        ("search", "TITLE", "-f", "table"),
        ("show", f"{ident}:0-3", "-f", "table"),
        ("show", f"{ident}:0-3", "-f", "text"),
        ("analyze", str(tmp_path / f"missing{PAYLOAD}.jsonl")),  # an error naming such a file
        ("analyze", str(tmp_path / "out.jsonl"), str(src), "-f", "table"),
    ]
    seen = ""
    for args in human:
        _, out, err = run(capsys, *args)
        _assert_inert(out, f"ctxc {args[0]} (stdout)")
        _assert_inert(err, f"ctxc {args[0]} (stderr)")
        seen += out + err
    assert "evil" + SHOWN in seen  # the file name, shown
    assert "hello " + SHOWN in seen  # the text, shown
    assert "out " + SHOWN in seen  # the tool result, shown
    assert "sh" + SHOWN in seen  # the tool name, shown
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # the consoles write as to a terminal: styles and all
    styled = ""
    for args in human:
        _, out, err = run(capsys, *args)
        assert not set(BIDI) & set(out + err), (args, out + err)
        styled += out + err
    assert "\x1b[1m" in styled  # bold: what a terminal is sent
    monkeypatch.delenv("TTY_COMPATIBLE")

    # Machine outputs keep every byte.
    code, out, _ = run(capsys, "show", f"{ident}:0-3", "-f", "json")
    assert code == 0
    texts = [b["text"] for m in orjson.loads(out)["messages"] for b in m["blocks"]]
    assert "hello " + PAYLOAD in texts
    assert "out " + PAYLOAD in texts
    code, out, _ = run(capsys, "analyze", str(src), "-f", "json")
    assert code == 0
    doc = orjson.loads(out)
    assert doc["files"][0]["path"] == str(src)
    assert "sh" + PAYLOAD in doc["files"][0]["by_tool"]
    code, out, _ = run(capsys, "search", "TITLE", "-f", "json", "--full")
    assert code == 0
    assert any(PAYLOAD in h["text"] for h in orjson.loads(out)["hits"])
    assert (tmp_path / "out.jsonl").read_bytes() == original
    code, _, err = run(capsys, "restore", ident, "-o", str(tmp_path / "restored.jsonl"))
    assert code == 0, err
    assert (tmp_path / "restored.jsonl").read_bytes() == original


def test_visible_escapes_every_control_but_newline_and_tab() -> None:
    every = "".join(map(chr, range(0xA0)))
    shown = visible(every)
    assert all(not ("\x00" <= c < " " and c not in "\n\t") and not ("\x7f" <= c <= "\x9f") for c in shown)
    for escape in ("\\x1b", "\\x9b", "\\x0d"):  # a lone CR could hide what precedes it: shown too
        assert escape in shown
    assert visible("a\r\nb\n\tc") == "a\r\nb\n\tc"  # CRLF line ends and layout stay
    assert visible("plain text, ünïcode, 한국어") == "plain text, ünïcode, 한국어"


def test_bidi_controls_are_escaped_on_a_terminal_and_in_one_line() -> None:
    assert visible(BIDI) == "".join(f"\\u{ord(c):04x}" for c in BIDI)
    assert visible("abc\u202edef\x1b") == "abc\\u202edef\\x1b"  # \u for a code point over 0xFF
    assert one_line(f"evil{BIDI}\n.jsonl") == f"evil{visible(BIDI)}\\x0a.jsonl"
    assert visible("שלום, مرحبا") == "שלום, مرحبا"  # right-to-left text itself is shown as it is
    # A terminal console escapes them too, whether printed as a string or in a table cell.
    shown = io.StringIO()
    console = visible_console(file=shown, force_terminal=True, width=80, color_system=None)
    console.print("name \u202egnp.exe")
    table = Table("tool")
    table.add_row(Text("sh\u2066x\u2069"))
    console.print(table)
    assert not set(BIDI) & set(shown.getvalue())
    assert "name \\u202egnp.exe" in shown.getvalue()
    assert "sh\\u2066x\\u2069" in shown.getvalue()
