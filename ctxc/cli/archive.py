"""``ctxc restore``, ``search`` and ``show``: an archived original back; what compaction removed, found
and printed."""

from __future__ import annotations

import os
import re
from pathlib import PurePath
from typing import Annotated, Any, Literal

import typer

from ctxc.cli import options as opt
from ctxc.errors import ArchiveError, InputError, UsageError
from ctxc.output import atomic_output, write_stdout
from ctxc.terminal import one_line, visible

SEARCH_EPILOG = opt.examples(
    "ctxc search 'ORDER-7731 refund'",
    "ctxc search 'why did we drop redis' --limit 5 --format json",
    "ctxc search 'migration error' --id 3f2a9c1b4d5e       # one original only",
    "ctxc search 'NEAR(auth token, 5)' --raw                # FTS5 query syntax",
    "ctxc search 'which database did we pick' --hybrid     # needs ctxc\\[embed]",
    "ctxc search --reindex                                  # rebuild the index",
    note="Every original the archive holds is searchable (the index, search.sqlite beside the archive, is "
    "updated as compaction archives them). Each hit names its message: print it with `ctxc show <ref>`.",
)

SHOW_EPILOG = opt.examples(
    "ctxc show 3f2a9c1b4d5e:42",
    "ctxc show 3f2a9c1b4d5e:3-17 --format json",
    "ctxc show 'ctxc archive 3f2a9c1b4d5e messages 3-17'     # a pasted citation",
    "ctxc show ctxc archive 3f2a9c1b4d5e messages 3-17       # unquoted works too",
    "ctxc show 3f2a9c1b4d5e:5 --format raw > lines.jsonl     # the records as is",
)


RESTORE_EPILOG = opt.examples(
    "ctxc restore 3f2a9c1b4d5e -o original.jsonl",
    "ctxc restore small.jsonl > original.jsonl     # a compacted file's original",
    "ctxc restore session.jsonl --in-place         # undo compact --in-place",
)


@opt.app.command("restore", epilog=RESTORE_EPILOG)
def restore_command(
    ref: Annotated[
        str,
        typer.Argument(
            help="An archive id (12+ hex characters), or a compacted file or session (- for stdin).",
            metavar="REF",
        ),
    ],
    output: opt.TranscriptOutputOpt = None,
    in_place: Annotated[
        bool,
        opt.flag("--in-place", "Write the original over REF, a compacted file, after archiving REF."),
    ] = False,
    archive: opt.ArchiveOpt = None,
) -> None:
    """Write an archived original back, byte for byte."""
    from ctxc.archive import Archive
    from ctxc.reader import read_all
    from ctxc.sessions import looks_like_reference, session_path

    # A compacted file (stdin, a pipe, a session) or an id; read_all says what is wrong with a folder.
    is_file = ref == "-" or os.path.exists(ref)
    if not is_file and looks_like_reference(ref) and not re.fullmatch(r"[0-9a-fA-F]{12,}", ref.strip()):
        try:
            ref, is_file = session_path(ref), True
        except InputError:
            if not re.fullmatch(r"[0-9a-fA-F]+", ref.strip()):
                raise  # a short hex string naming no session goes on to say what an archive id is
    if not is_file and not re.fullmatch(r"[0-9a-fA-F]+", ref.strip()):  # no id: a file name, mistyped
        raise InputError("no such file (nor an archive id: those are 12+ hex characters)", path=ref)
    if in_place and (not is_file or ref == "-" or output is not None):
        raise UsageError(
            "{in_place} writes over REF: give a compacted file or session, and no -o", options=("in_place",)
        )
    store = Archive.open(archive)
    output = ref if in_place else opt.transcript_output(output)
    store.refuse_output_inside(output)
    held = read_all(ref)[1] if is_file else b""
    ident = store.find_original(held) if is_file else store.resolve(ref)
    if ident is None:
        raise ArchiveError(f"no archived original found for this file in {store.root}", path=ref)
    data = store.read(ident)
    if not in_place:
        # The restored file is as private as the archived original (cp's rule, from the archive's object).
        inputs = (ref,) if is_file and ref != "-" else ()
        with atomic_output(output, inputs=inputs, like=str(store.object_path(ident))) as handle:
            handle.write(data)
        return
    if held == data:
        opt.note(f"ctxc: {ref} already holds its original; nothing to do")
        return
    kept = store.store(held)  # nothing is lost: what REF held comes back with `ctxc restore <id>`
    with atomic_output(ref, like=ref) as handle:  # REF keeps its mode
        handle.write(data)
    opt.note(f"ctxc: {ref} holds its original again; what it held is archived as {kept[:12]}")


def _render_hits(hits: list[Any], query: str) -> None:
    from rich.text import Text

    if not hits:
        opt.stdout_console().print(f"no hits for {query!r}", markup=False)
        return
    rows = []
    for h in hits:
        what = f"{h.role} {h.kind.replace('_', ' ')}" + (f"\n{h.tool}" if h.tool else "")
        if h.blob:
            what += f"\noffloaded to {h.blob[:12]}"
        cell = Text()
        for i, part in enumerate(h.snippet.split("**")):  # ``**`` marks the matches
            cell.append(visible(part), style="bold yellow" if i % 2 else None)
        cell.append("\n")
        cell.append(Text(one_line(h.context.split(". Request:", 1)[0]), style="dim"))  # the request: in json
        if h.also_in:
            cell.append(Text("\n" + _also_in(h.also_in), style="dim"))
        score = f"{h.score:.3g}" + (f"\nsim {h.similarity:.2f}" if h.similarity is not None else "")
        # The original's file names (their folders are in the JSON): which session the hit is from.
        files = "\n".join(dict.fromkeys(_file_name(s) for s in h.sources or (h.source,)))
        rows.append((f"{h.ref}\nline {h.line}", files, what, score, cell))
    opt.print_rows(("ref", "file", "what", "score", "snippet"), rows, show_lines=True, fold=("snippet",))


#: Other copies of a hit's message a table names; the JSON lists them all.
_ALSO_IN_SHOWN = 5


def _file_name(source: str) -> str:
    return one_line(PurePath(source).name or source)


def _also_in(copies: Any) -> str:
    """``also in 3f2a9c1b4d5e:1 (s.jsonl), …``: where else a hit's message is (refs ``ctxc show`` takes)."""
    named = [f"{c.ref} ({_file_name(c.sources[0])})" if c.sources else c.ref for c in copies[:_ALSO_IN_SHOWN]]
    more = (
        f" and {len(copies) - _ALSO_IN_SHOWN} more (--format json lists them)"
        if len(copies) > _ALSO_IN_SHOWN
        else ""
    )
    return "also in " + ", ".join(named) + more


@opt.app.command("search", epilog=SEARCH_EPILOG)
def search_command(
    query: Annotated[
        str | None,
        typer.Argument(help="Words to look for (any order; rarer words weigh more).", metavar="QUERY"),
    ] = None,
    archive: opt.ArchiveOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, max=1000, help="Hits to return.")] = 10,
    fmt: opt.TableOrJsonOpt = None,
    archive_id: Annotated[
        str | None, typer.Option("--id", help="Search only this original (an archive id or prefix).")
    ] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help='The query is FTS5 syntax (AND, OR, NEAR, "phrase", prefix*).')
    ] = False,
    hybrid: Annotated[
        bool,
        opt.flag(
            "--hybrid", "Rank by 0.4 BM25 + 0.6 embedding similarity (needs pip install 'ctxc\\[embed]')."
        ),
    ] = False,
    full: Annotated[bool, opt.flag("--full", "JSON: include each hit's whole chunk text.")] = False,
    reindex: Annotated[
        bool, opt.flag("--reindex", "Rebuild the index from the archive first (then search, if a query).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No notes on stderr.")] = False,
) -> None:
    """Full-text search (BM25) over every archived original message and offloaded tool output."""
    from ctxc.archive import Archive
    from ctxc.search import search
    from ctxc.search.background import indexer_running

    store = Archive.open(archive)
    if indexer_running(store.root) and not quiet:
        opt.note("ctxc: waiting for the background indexer to finish the search index")
    if reindex:
        _reindex(store, quiet)
        if query is None:
            return
    if query is None:
        raise UsageError("give a query (or --reindex)")
    hits = search(query, archive=store, limit=limit, hybrid=hybrid, archive_id=archive_id, raw=raw)
    if opt.table_on_terminal(fmt) == "json":
        ranking = "hybrid" if hybrid else "bm25"
        hits_json = [h.to_json(full=full) for h in hits]
        opt.print_json("search", query=query, archive=str(store.root), ranking=ranking, hits=hits_json)
    else:
        _render_hits(hits, query)


def _reindex(store: Any, quiet: bool) -> None:
    """Rebuild the search index from the archive, saying what it holds (and what it could not read)."""
    from ctxc.search import rebuild

    report = rebuild(store)
    if report.set_aside is not None:
        opt.note(f"ctxc: the search index was damaged; moved it to {report.set_aside}")
    for line in report.skipped:
        opt.note(f"ctxc: skipped {line}")
    if not quiet:
        opt.note(
            f"ctxc: indexed {report.originals} original(s), {report.texts} other text(s), "
            f"{report.blobs} offloaded output(s): {report.chunks:,} chunks in "
            f"{store.root / 'search.sqlite'}"
        )


@opt.app.command("show", epilog=SHOW_EPILOG)
def show_command(
    ref: Annotated[
        list[str],
        typer.Argument(
            help="<id12>:5, <id12>:3-17, an archive id, or a citation: ctxc archive <id12> messages 3-17.",
            metavar="REF...",
        ),
    ],
    archive: opt.ArchiveOpt = None,
    fmt: Annotated[
        Literal["table", "text", "json", "raw"] | None,
        typer.Option(
            "--format",
            "-f",
            help="table (default on a terminal), text (otherwise), json, or raw (the archived records).",
        ),
    ] = None,
) -> None:
    """Print original messages from the archive, by the reference summaries, placeholders and hits give."""
    from ctxc.archive import Archive
    from ctxc.search.show import plain, show, shown_json

    shown = show(" ".join(ref), archive=Archive.open(archive))
    out = opt.table_on_terminal(fmt, "text")
    if out == "raw":
        write_stdout(shown.raw_records())
    elif out == "json":
        opt.print_json("show", **shown_json(shown))
    elif shown.transcript is None:  # an offloaded output: its text is all there is (raw gives it as is)
        text = visible(shown.text or "")
        write_stdout(text if text.endswith("\n") else text + "\n")
    elif out == "text":
        write_stdout(visible(plain(shown.messages)) + "\n")
    else:
        _render_table(shown)


def _render_table(shown: Any) -> None:
    from rich.text import Text

    from ctxc.search.show import block_text

    src = f" ({one_line(shown.source)})" if shown.source else ""
    opt.stdout_console().print(
        f"archive {shown.archive_id[:12]}{src}, {shown.format}", markup=False, style="dim"
    )
    rows = []
    for m in shown.messages:
        cell = Text()
        for n, (label, text) in enumerate(block_text(b) for b in m.blocks):
            if n:
                cell.append("\n")
            cell.append(f"{visible(label)}\n", style="dim")
            cell.append(visible(text))
        rows.append((str(m.index), str(m.line), m.role, cell))
    opt.print_rows(("#", "line", "role", "content"), rows, show_lines=True, fold=("content",))
