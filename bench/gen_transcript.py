# ruff: noqa: E501
"""Write a large, realistic, tool-heavy agent transcript for benchmarks.

    python bench/gen_transcript.py OUT --mb 100 [--format claude-code|chat] [--seed N]

The session is a long run of coding tasks on a synthetic repository: file reads (real-looking Python modules and
tests), shell commands (pytest runs with failures, application logs with tracebacks, git output), greps, globs,
edits and writes, with thinking blocks and some Korean-speaking users. ``claude-code`` writes a Claude Code session
log (split assistant records, toolUseResult, progress records, usage, compaction boundaries when the context would
overflow); ``chat`` writes Anthropic-shape chat lines. Output is streamed (memory stays flat), deterministic for a
seed, and stops at the first task boundary past the requested size, so the file is a little over ``--mb``.
"""

from __future__ import annotations

import argparse
import base64
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import orjson

# ---------------------------------------------------------------------------------------------- vocabulary

NOUNS = [
    "order", "invoice", "customer", "session", "token", "payment", "shipment", "report", "account", "cart",
    "product", "inventory", "webhook", "job", "event", "metric", "profile", "review", "coupon", "refund",
    "subscription", "notification", "upload", "export", "schedule", "tenant", "address", "batch", "ledger", "quota",
]  # fmt: skip
NOUNS_KO = {
    "order": "주문", "invoice": "청구서", "customer": "고객", "session": "세션", "token": "토큰", "payment": "결제",
    "shipment": "배송", "report": "리포트", "account": "계정", "cart": "장바구니", "product": "상품", "inventory": "재고",
    "webhook": "웹훅", "job": "작업", "event": "이벤트", "metric": "지표", "profile": "프로필", "review": "리뷰",
    "coupon": "쿠폰", "refund": "환불", "subscription": "구독", "notification": "알림", "upload": "업로드",
    "export": "내보내기", "schedule": "일정", "tenant": "테넌트", "address": "주소", "batch": "배치", "ledger": "원장",
    "quota": "할당량",
}  # fmt: skip
VERBS = [
    "load", "save", "fetch", "build", "parse", "render", "validate", "normalize", "apply", "resolve", "compute",
    "merge", "sync", "dispatch", "refresh", "expire", "retry", "record", "format", "serialize", "collect", "prune",
]  # fmt: skip
FIELDS = [
    "id", "status", "created_at", "updated_at", "amount", "currency", "owner_id", "tenant_id", "expires_at", "name",
    "email", "quantity", "total", "priority", "attempts", "region", "kind", "version", "checksum", "deleted",
]  # fmt: skip
STATUSES = [
    "pending",
    "active",
    "paid",
    "failed",
    "expired",
    "cancelled",
    "archived",
    "queued",
    "running",
    "done",
]
EXCEPTIONS = ["TimeoutError", "ConnectionError", "KeyError", "ValueError", "PermissionError", "LookupError"]
KO_COMMENTS = [
    "캐시 만료 시간은 설정에서 읽는다",
    "동시 요청이 들어와도 한 번만 처리되도록 잠금",
    "상태가 바뀌면 알림을 보낸다",
    "레거시 API 호환용: 다음 메이저 버전에서 제거 예정",
    "시간은 항상 UTC로 저장하고 표시할 때만 변환",
    "재시도 횟수를 넘기면 실패로 기록한다",
    "금액은 Decimal로만 다룬다 (float 금지)",
    "삭제된 항목은 실제로 지우지 않고 deleted 플래그만 켠다",
    "테넌트가 다르면 조회되지 않아야 한다",
    "외부 API 응답이 느릴 때를 대비한 타임아웃",
]
PACKAGES = [
    "core",
    "billing",
    "shipping",
    "accounts",
    "notifications",
    "reports",
    "api",
    "jobs",
    "storage",
    "search",
]


def plural(noun: str) -> str:
    if noun.endswith("y"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch")) else "s")


def words(rng: random.Random) -> tuple[str, str]:
    return rng.choice(VERBS), rng.choice(NOUNS)


# ---------------------------------------------------------------------------------------------- repository


@dataclass
class SourceFile:
    path: str
    text: str
    functions: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)


class Repo:
    """A synthetic Python project whose files are generated once and then read, grepped and edited."""

    def __init__(self, rng: random.Random, name: str) -> None:
        self.rng, self.name = rng, name
        self.files: list[SourceFile] = []
        for pkg in PACKAGES:
            for _ in range(rng.randint(4, 9)):
                module = f"{rng.choice(NOUNS)}_{rng.choice(['service', 'models', 'store', 'client', 'rules', 'views', 'tasks', 'utils'])}"
                path = f"src/{name}/{pkg}/{module}.py"
                if any(f.path == path for f in self.files):
                    continue
                self.files.append(self._module(path))
                self.files.append(self._tests(f"tests/{pkg}/test_{module}.py", self.files[-1]))
        self.sources = [f for f in self.files if f.path.startswith("src/")]
        self.test_files = [f for f in self.files if f.path.startswith("tests/")]

    def _function(self, verb: str, noun: str, method: bool) -> list[str]:
        rng = self.rng
        arg = f"{plural(noun)}" if rng.random() < 0.5 else noun
        params = (["self"] if method else []) + [
            f"{arg}: {'Iterable[' + noun.title() + ']' if arg.endswith('s') else noun.title()}"
        ]
        if rng.random() < 0.5:
            params.append(
                f"*, {rng.choice(['limit', 'timeout', 'retries', 'batch_size'])}: int = {rng.choice([3, 10, 30, 100, 500])}"
            )
        ind = "        " if method else "    "
        head = f"{ind[:-4]}def {verb}_{noun}({', '.join(params)}) -> {rng.choice(['None', 'int', 'bool', noun.title(), f'list[{noun.title()}]', f'dict[str, {noun.title()}]'])}:"
        body = [
            head,
            f'{ind}"""{verb.title()} the {noun}{"s" if arg.endswith("s") else ""} {rng.choice(["for the current tenant", "and record the result", "in one transaction", "using the cached copy when fresh", "skipping deleted rows"])}."""',
        ]
        result = f"{noun}_{rng.choice(['ids', 'rows', 'out', 'result', 'seen'])}"
        for _ in range(rng.randint(2, 7)):
            k = rng.random()
            f1, f2 = rng.choice(FIELDS), rng.choice(FIELDS)
            if k < 0.15:
                body += [f"{ind}if {arg} is None:", f'{ind}    raise ValueError("{noun} is required")']
            elif k < 0.3:
                body += [
                    f"{ind}{result} = []",
                    f"{ind}for item in {arg if arg.endswith('s') else '[' + arg + ']'}:",
                    f"{ind}    if item.{f1} {rng.choice(['==', '!=', '>=', '<'])} {rng.choice(['None', '0', repr(rng.choice(STATUSES))])}:",
                    f"{ind}        continue",
                    f"{ind}    {result}.append(item.{f2})",
                ]
            elif k < 0.42:
                exc = rng.choice(EXCEPTIONS)
                body += [
                    f"{ind}try:",
                    f"{ind}    response = self._client.{verb}({arg}, timeout={rng.choice([2, 5, 10, 30])})"
                    if method
                    else f"{ind}    response = client.{verb}({arg})",
                    f"{ind}except {exc} as exc:",
                    f'{ind}    log.warning("{verb} {noun} failed: %s", exc)',
                    f"{ind}    return None" if rng.random() < 0.5 else f"{ind}    raise",
                ]
            elif k < 0.52:
                body.append(f"{ind}# {rng.choice(KO_COMMENTS)}")
            elif k < 0.64:
                body += [
                    f'{ind}log.debug("{verb} %d {noun}(s) for tenant %s", len({result}) if {result} else 0, {"self._tenant" if method else "tenant_id"})'
                ]
            elif k < 0.76:
                body += [
                    f"{ind}with {'self._lock' if method else 'transaction()'}:",
                    f"{ind}    {'self._' + noun + 's' if method else 'cache'}[{arg}.{f1}] = {arg}",
                ]
            elif k < 0.88:
                body += [
                    f"{ind}{f1} = {arg}.get({f1!r}, {rng.choice(['None', '0', repr(rng.choice(STATUSES)), '[]'])}) if isinstance({arg}, dict) else {arg}.{f1}"
                ]
            else:
                body += [
                    f"{ind}deadline = now() + timedelta(seconds={rng.choice([30, 60, 300, 900])})",
                    f"{ind}while now() < deadline and not self._stopped.is_set():"
                    if method
                    else f"{ind}while now() < deadline:",
                    f"{ind}    time.sleep({rng.choice(['0.5', '1', '2'])})",
                ]
        body.append(f"{ind}return {rng.choice([result, 'None', 'True', f'len({result})', arg])}")
        return body

    def _module(self, path: str) -> SourceFile:
        rng = self.rng
        noun = path.rsplit("/", 1)[1].split("_", 1)[0]
        lines = [
            f'"""{noun.title()} {path.rsplit("_", 1)[1][:-3]}: {rng.choice(["persistence and lookups", "business rules", "HTTP handlers", "background tasks", "helpers shared by the API and the workers"])}."""',
            "",
            "from __future__ import annotations",
            "",
            "import logging",
            "import time",
            "from collections.abc import Iterable",
            "from dataclasses import dataclass, field",
            "from datetime import datetime, timedelta",
            "from decimal import Decimal",
            "",
            f"from {self.name}.core.clock import now",
            f"from {self.name}.core.db import transaction",
            f"from {self.name}.{rng.choice(PACKAGES)}.models import {noun.title()}",
            "",
            "log = logging.getLogger(__name__)",
            "",
            f"DEFAULT_{rng.choice(['TIMEOUT', 'BATCH_SIZE', 'RETRIES', 'TTL'])} = {rng.choice([5, 30, 100, 3600])}",
            f"{noun.upper()}_STATUSES = ({', '.join(repr(s) for s in rng.sample(STATUSES, 4))})",
            "",
        ]
        functions: list[str] = []
        for _ in range(rng.randint(1, 3)):
            cls = f"{noun.title()}{rng.choice(['Service', 'Repository', 'Policy', 'Worker', 'Client'])}"
            lines += [
                "",
                f"class {cls}:",
                f'    """{rng.choice(["Owns", "Coordinates", "Caches", "Validates"])} {plural(noun)} {rng.choice(["for one tenant", "across shards", "for the API layer"])}."""',
                "",
                "    def __init__(self, client, *, tenant: str) -> None:",
                "        self._client = client",
                "        self._tenant = tenant",
                f"        self._{plural(noun)}: dict[str, {noun.title()}] = {{}}",
                "",
            ]
            for _ in range(rng.randint(2, 6)):
                verb, n = words(rng)
                lines += [*self._function(verb, n, True), ""]
                functions.append(f"{verb}_{n}")
        for _ in range(rng.randint(2, 8)):
            verb, n = words(rng)
            lines += ["", *self._function(verb, n, False), ""]
            functions.append(f"{verb}_{n}")
        return SourceFile(path, "\n".join(lines).rstrip("\n") + "\n", functions)

    def _tests(self, path: str, module: SourceFile) -> SourceFile:
        rng = self.rng
        mod = module.path[4:-3].replace("/", ".")
        lines = ["import pytest", "", f"from {mod} import {', '.join(module.functions[:4])}", ""]
        tests = []
        for fn in module.functions:
            for case in rng.sample(
                [
                    "returns_empty_for_no_input",
                    "skips_deleted",
                    "respects_limit",
                    "raises_on_missing",
                    "is_idempotent",
                    "handles_timeout",
                    "korean_names",
                    "utc_dates",
                ],
                rng.randint(1, 3),
            ):
                name = f"test_{fn}_{case}"
                tests.append(name)
                lines += [
                    "",
                    f"def {name}(db, tenant):",
                    f"    result = {fn}({rng.choice(['[]', 'make_batch(3)', 'None', 'sample()'])})",
                    f"    assert result {rng.choice(['== []', 'is not None', '== 3', 'is True'])}",
                    "",
                ]
        return SourceFile(path, "\n".join(lines), [], tests)


# ---------------------------------------------------------------------------------------------- tool outputs


@dataclass
class Call:
    name: str
    input: dict[str, Any]
    id: str = ""


@dataclass
class Result:
    content: str
    is_error: bool
    structured: Any


class Tools:
    """Produces the tool calls of a task and what each returns."""

    def __init__(self, rng: random.Random, repo: Repo, cwd: str) -> None:
        self.rng, self.repo, self.cwd = rng, repo, cwd
        self.clock = datetime(2026, 3, 2, 9, 0, 0)

    def read(self, f: SourceFile) -> tuple[Call, Result]:
        lines = f.text.rstrip("\n").split("\n")
        inp: dict[str, Any] = {"file_path": f"{self.cwd}/{f.path}"}
        start, chunk = 1, lines
        if len(lines) > 220 and self.rng.random() < 0.4:
            start = self.rng.randint(1, len(lines) - 100)
            chunk = lines[start - 1 : start + 149]
            inp.update(offset=start, limit=150)
        content = "\n".join(f"{n:>6}→{line}" for n, line in enumerate(chunk, start))
        body = "\n".join(chunk)
        return Call("Read", inp), Result(
            content,
            False,
            {
                "type": "text",
                "file": {
                    "filePath": inp["file_path"],
                    "content": body,
                    "numLines": len(chunk),
                    "startLine": start,
                    "totalLines": len(lines),
                },
            },
        )

    def pytest(self, target: SourceFile | None, failing: int) -> tuple[Call, Result]:
        rng = self.rng
        files = (
            [target]
            if target
            else rng.sample(self.repo.test_files, min(len(self.repo.test_files), rng.randint(8, 30)))
        )
        verbose = target is not None or rng.random() < 0.3
        nodes = [(f"{f.path}::{t}", True) for f in files for t in f.tests]
        fails = set(rng.sample(range(len(nodes)), min(failing, len(nodes))))
        nodes = [(n, i not in fails) for i, (n, _) in enumerate(nodes)]
        out: list[str] = []
        if verbose:
            out += [
                "============================= test session starts ==============================",
                "platform linux -- Python 3.12.4, pytest-8.3.3, pluggy-1.5.0",
                f"rootdir: {self.cwd}",
                "configfile: pyproject.toml",
                f"collected {len(nodes)} items",
                "",
            ]
            for i, (n, ok) in enumerate(nodes, 1):
                left, pct = f"{n} {'PASSED' if ok else 'FAILED'}", f"[{i * 100 // len(nodes):3d}%]"
                out.append(left + " " * max(1, 80 - len(left) - len(pct)) + pct)
        else:
            marks = "".join("." if ok else "F" for _, ok in nodes)
            for s in range(0, len(marks), 73):
                out.append(f"{marks[s : s + 73]:<73} [{min(s + 73, len(marks)) * 100 // len(marks):3d}%]")
        failed = [n for n, ok in nodes if not ok]
        if failed:
            out += ["", "=================================== FAILURES ==================================="]
            for n in failed:
                path, test = n.split("::")
                src = rng.choice(self.repo.sources)
                fn = rng.choice(src.functions)
                exc = rng.choice([*EXCEPTIONS, "AssertionError"])
                out += [
                    f"{'_' * 20} {test} {'_' * 20}",
                    "",
                    f"db = <tests.conftest.FakeDB object at 0x7f{rng.getrandbits(40):010x}>, tenant = 't-{rng.randint(1, 9999):04d}'",
                    "",
                    f"    def {test}(db, tenant):",
                    f">       result = {fn}(sample())",
                    "",
                    f"{path}:{rng.randint(8, 200)}: ",
                    "_ " * 40,
                    f"{src.path}:{rng.randint(20, 300)}: in {fn}",
                    f"    {rng.choice(FIELDS)} = item.{rng.choice(FIELDS)}",
                    f"E   {exc}: {rng.choice(['expected 3, got 2', repr(rng.choice(FIELDS)), 'tenant mismatch', 'deadline exceeded after 30s', '주문 상태가 올바르지 않습니다'])}",
                    "",
                ]
            out.append("=========================== short test summary info ============================")
            out += [f"FAILED {n}" for n in failed]
        summary = (
            f"{len(failed)} failed, " if failed else ""
        ) + f"{len(nodes) - len(failed)} passed in {rng.uniform(0.3, 40):.2f}s"
        out.append(f"{'=' * 20} {summary} {'=' * 20}" if verbose else summary)
        text = "\n".join(out)
        cmd = f"python -m pytest {'-v ' if verbose else '-q '}{target.path if target else 'tests/'}"
        if failed:
            return Call("Bash", {"command": cmd, "description": "Run the tests"}), Result(
                "Exit code 1\n" + text, True, "Error: Exit code 1\n" + text
            )
        return Call("Bash", {"command": cmd, "description": "Run the tests"}), Result(
            text, False, {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
        )

    def logs(self, noun: str) -> tuple[Call, Result]:
        rng = self.rng
        n = rng.randint(80, 700)
        out = []
        t = self.clock
        for _ in range(n):
            t += timedelta(milliseconds=rng.randint(5, 4000))
            stamp = f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"
            k = rng.random()
            if k < 0.55:
                out.append(
                    f"{stamp} INFO  [{rng.choice(['worker-1', 'worker-2', 'api', 'scheduler'])}] {self.repo.name}.{rng.choice(PACKAGES)}: {rng.choice(VERBS)} {noun} id={rng.randint(10000, 999999)} status={rng.choice(STATUSES)} in {rng.randint(1, 2500)} ms"
                )
            elif k < 0.8:
                out.append(
                    f'{stamp} INFO  [api] uvicorn.access: 10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)} - "{rng.choice(["GET", "POST", "PATCH"])} /api/v2/{plural(noun)}/{rng.randint(1, 99999)} HTTP/1.1" {rng.choice([200, 200, 200, 201, 204, 404, 409])}'
                )
            elif k < 0.93:
                out.append(
                    f"{stamp} WARNING [{rng.choice(['worker-1', 'worker-2'])}] {self.repo.name}.jobs: retrying {noun} {rng.randint(10000, 99999)} (attempt {rng.randint(2, 5)}/5): {rng.choice(EXCEPTIONS)}"
                )
            else:
                src = rng.choice(self.repo.sources)
                fn = rng.choice(src.functions)
                out += [
                    f"{stamp} ERROR [worker-{rng.randint(1, 2)}] {self.repo.name}.jobs: {noun} job failed",
                    "Traceback (most recent call last):",
                    f'  File "/srv/app/{src.path}", line {rng.randint(20, 300)}, in {fn}',
                    f"    response = self._client.{fn.split('_')[0]}({noun}, timeout=10)",
                    f'  File "/srv/app/.venv/lib/python3.12/site-packages/httpx/_client.py", line {rng.randint(800, 1700)}, in send',
                    "    raise exc",
                    f"{rng.choice(EXCEPTIONS)}: {rng.choice(['timed out', 'connection reset by peer', repr(rng.choice(FIELDS)), '요청 한도를 초과했습니다'])}",
                ]
        self.clock = t
        text = "\n".join(out)
        cmd = rng.choice(
            [
                f"tail -n {n} logs/app.log",
                f"grep -n '{noun}' logs/worker.log | tail -n {n}",
                f"journalctl -u {self.repo.name}-worker --no-pager -n {n}",
            ]
        )
        return Call("Bash", {"command": cmd, "description": f"Show recent {noun} log lines"}), Result(
            text, False, {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
        )

    def grep(self, ident: str) -> tuple[Call, Result]:
        hits = []
        for f in self.rng.sample(self.repo.files, min(60, len(self.repo.files))):
            for n, line in enumerate(f.text.split("\n"), 1):
                if ident in line:
                    hits.append(f"{f.path}:{n}:{line}")
        text = "\n".join(hits) if hits else "No matches found"
        return Call(
            "Grep", {"pattern": ident, "path": self.cwd, "output_mode": "content", "-n": True}
        ), Result(
            text,
            False,
            {"mode": "content", "numFiles": 0, "filenames": [], "content": text, "numLines": len(hits)},
        )

    def glob(self, pkg: str) -> tuple[Call, Result]:
        names = [f.path for f in self.repo.files if f"/{pkg}/" in f.path]
        text = "\n".join(f"{self.cwd}/{p}" for p in names)
        return Call("Glob", {"pattern": f"**/{pkg}/**/*.py"}), Result(
            text,
            False,
            {
                "filenames": [f"{self.cwd}/{p}" for p in names],
                "durationMs": self.rng.randint(3, 60),
                "numFiles": len(names),
                "truncated": False,
            },
        )

    def edit(self, f: SourceFile) -> tuple[Call, Result]:
        rng = self.rng
        lines = f.text.split("\n")
        candidates = [i for i, ln in enumerate(lines) if ln.strip().startswith(("return", "raise", "log."))]
        i = rng.choice(candidates) if candidates else len(lines) // 2
        old = lines[i]
        indent = old[: len(old) - len(old.lstrip())]
        changed = (
            old.replace("return None", "return []")
            .replace("log.debug(", "log.info(")
            .replace("timeout=", "timeout=2 * ")
        )
        k = rng.random()
        if k < 0.4:
            new_lines = [f"{indent}# {rng.choice(KO_COMMENTS)}", changed]
        elif k < 0.7:
            new_lines = [f"{indent}if {rng.choice(FIELDS)} is None:", f"{indent}    return None", old]
        else:
            new_lines = [
                f'{indent}log.debug("{rng.choice(VERBS)} took %.1f ms", (time.monotonic() - started) * 1000)',
                changed,
            ]
        new = "\n".join(new_lines)
        path = f"{self.cwd}/{f.path}"
        if rng.random() < 0.08:  # the model quotes a line that is not there
            bad = old.replace("return", "return self", 1) if "return" in old else old + " "
            err = f"String to replace not found in file.\nString: {bad}"
            return Call(
                "Edit", {"file_path": path, "old_string": bad, "new_string": new, "replace_all": False}
            ), Result(f"<tool_use_error>{err}</tool_use_error>", True, f"Error: {err}")
        original = f.text
        lines[i : i + 1] = new_lines
        f.text = "\n".join(lines)
        lo = max(0, i - 3)
        ctx_old = original.split("\n")[lo : i + 4]
        ctx_new = lines[lo : i + 3 + len(new_lines)]
        patch = [
            {
                "oldStart": lo + 1,
                "oldLines": len(ctx_old),
                "newStart": lo + 1,
                "newLines": len(ctx_new),
                "lines": [" " + x for x in ctx_old[: i - lo]]
                + ["-" + old]
                + ["+" + x for x in new_lines]
                + [" " + x for x in ctx_old[i - lo + 1 :]],
            }
        ]
        snippet = "\n".join(
            f"{n:>6}→{ln}" for n, ln in enumerate(lines[max(0, i - 4) : i + 6], max(0, i - 4) + 1)
        )
        content = f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}"
        return Call(
            "Edit", {"file_path": path, "old_string": old, "new_string": new, "replace_all": False}
        ), Result(
            content,
            False,
            {
                "filePath": path,
                "oldString": old,
                "newString": new,
                "originalFile": original,
                "structuredPatch": patch,
                "userModified": False,
                "replaceAll": False,
            },
        )

    def write(self, f: SourceFile) -> tuple[Call, Result]:
        path = f"{self.cwd}/{f.path.replace('/test_', '/test_regression_')}"
        fn = self.rng.choice(f.tests) if f.tests else "test_smoke"
        text = f"import pytest\n\n\n@pytest.mark.regression\ndef {fn}_regression(db, tenant):\n    # 재현: 운영에서 보고된 케이스\n    assert sample() is not None\n"
        return Call("Write", {"file_path": path, "content": text}), Result(
            f"File created successfully at: {path}",
            False,
            {"type": "create", "filePath": path, "content": text, "structuredPatch": []},
        )

    def git(self) -> tuple[Call, Result]:
        rng = self.rng
        files = rng.sample(self.repo.files, rng.randint(1, 6))
        text = "\n".join(f" M {f.path}" for f in files)
        text += "\n" + "\n".join(
            f"{rng.getrandbits(28):07x} {rng.choice(['Fix', 'Add', 'Refactor', 'Handle', 'Speed up'])} {rng.choice(VERBS)} {rng.choice(NOUNS)} {rng.choice(['edge case', 'retries', 'timeouts', 'validation', 'logging'])}"
            for _ in range(rng.randint(3, 12))
        )
        return Call(
            "Bash",
            {"command": "git status --short && git log --oneline -n 12", "description": "Show repo state"},
        ), Result(text, False, {"stdout": text, "stderr": "", "interrupted": False, "isImage": False})


# ---------------------------------------------------------------------------------------------- tasks

PROMPTS_EN = [
    "{test} in {tfile} has been failing since yesterday. Can you find out why and fix it?",
    "Add retries with exponential backoff to `{fn}` in {path}; it fails on transient network errors.",
    "Why is `{fn}` so slow for large {noun} lists? Profile it and make it faster if you can.",
    "The {noun} worker keeps logging errors. Check the logs and fix the root cause.",
    "Refactor {path} so the {noun} validation is not duplicated, and keep the tests green.",
    "Please review `{fn}` for tenant isolation bugs.",
]
PROMPTS_KO = [
    "{tfile} 의 {test} 가 어제부터 계속 실패해요. 원인 찾아서 고쳐 주세요.",
    "{path} 의 `{fn}` 에 재시도(지수 백오프) 로직을 추가해 주세요. 네트워크 오류가 잠깐씩 나면 실패합니다.",
    "{noun_ko} 목록이 클 때 `{fn}` 가 너무 느려요. 원인 확인하고 개선해 주세요.",
    "{noun_ko} 워커 로그에 에러가 계속 찍힙니다. 로그 보고 근본 원인 고쳐 주세요.",
    "{path} 에 {noun_ko} 검증 로직이 중복돼 있어요. 테스트 깨지지 않게 정리해 주세요.",
]
STEP_EN = [
    "Let me look at `{path}` to see how `{fn}` handles {nouns}.",
    "I'll run the relevant tests first to see the current failure.",
    "Searching for other callers of `{fn}` before changing its behaviour.",
    "The logs should show which {noun} triggers this; checking them.",
    "Updating `{fn}` now.",
]
STEP_KO = [
    "`{path}` 파일을 열어서 `{fn}` 가 {noun_ko}를 어떻게 처리하는지 확인하겠습니다.",
    "먼저 관련 테스트를 돌려서 현재 실패 내용을 보겠습니다.",
    "`{fn}` 동작을 바꾸기 전에 다른 호출부를 찾아보겠습니다.",
    "어떤 {noun_ko}에서 문제가 나는지 로그를 확인하겠습니다.",
    "`{fn}` 를 수정하겠습니다.",
]
THINK = [
    "The failure mentions {exc}, which `{fn}` only raises when the {noun} has no {field}.",
    "{path} wraps the client call in a try block but returns None on timeout, so callers see an empty result instead of an error.",
    "There are two code paths that touch {field}; only one of them filters deleted rows.",
    "Before editing I want to know every caller of `{fn}`, otherwise changing the return type could break the API layer.",
    "The test fixture creates {nouns} for a single tenant, so a tenant-isolation bug would not show up here.",
    "Retrying inside the transaction would hold the lock for the whole backoff; the retry has to wrap the transaction instead.",
    "The log shows the same {noun} id retried five times within a second: the backoff is not being applied.",
    "A quadratic loop over {nouns} explains the slowdown: each iteration rebuilds the lookup dict.",
]
DONE_EN = (
    "Done. `{fn}` in `{path}` now {fix}. I ran the tests for the module again and they pass ({n} tests)."
)
DONE_KO = (
    "수정했습니다. `{path}` 의 `{fn}` 가 이제 {fix_ko}. 모듈 테스트를 다시 돌렸고 모두 통과합니다 ({n}개)."
)
FIXES = [
    ("skips deleted rows before computing the result", "삭제된 행을 먼저 걸러낸 뒤 계산합니다"),
    (
        "retries transient errors with exponential backoff (3 attempts)",
        "일시적인 오류를 지수 백오프로 최대 3번 재시도합니다",
    ),
    (
        "builds the lookup once instead of per item, so it is linear",
        "조회용 딕셔너리를 한 번만 만들어서 선형 시간에 동작합니다",
    ),
    ("filters by tenant before reading the cache", "캐시를 읽기 전에 테넌트로 먼저 필터링합니다"),
    ("raises instead of returning None on timeouts", "타임아웃 때 None 대신 예외를 올립니다"),
]


@dataclass
class Assistant:
    blocks: list[dict[str, Any]]
    stop: str


@dataclass
class Results:
    pairs: list[tuple[Call, Result]]


@dataclass
class Prompt:
    text: str


Event = Prompt | Assistant | Results


class Session:
    """Yields the abstract events of an endless sequence of coding tasks."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.repo = Repo(self.rng, self.rng.choice(["tidewater", "larkspur", "quillon", "mosaic", "harbor"]))
        self.cwd = f"/home/dev/{self.repo.name}"
        self.tools = Tools(self.rng, self.repo, self.cwd)
        self.ids = 0

    def tool_id(self) -> str:
        return "toolu_01" + base64.b64encode(self.rng.randbytes(17)).decode()[:22].replace("+", "a").replace(
            "/", "b"
        )

    def thinking(self, ctx: dict[str, str]) -> dict[str, Any]:
        text = " ".join(t.format(**ctx) for t in self.rng.sample(THINK, self.rng.randint(2, 4)))
        sig = base64.b64encode(b"\x12" + self.rng.randbytes(self.rng.randint(180, 480))).decode()
        return {"type": "thinking", "thinking": text, "signature": sig}

    def task(self) -> Iterator[Event]:
        rng = self.rng
        src = rng.choice(self.repo.sources)
        tfile = (
            self.repo.test_files[self.repo.files.index(src) // 2]
            if rng.random() < 0.8
            else rng.choice(self.repo.test_files)
        )
        fn = rng.choice(src.functions)
        noun = fn.split("_", 1)[1]
        korean = rng.random() < 0.3
        ctx = {
            "path": src.path,
            "fn": fn,
            "noun": noun,
            "nouns": plural(noun),
            "noun_ko": NOUNS_KO.get(noun, noun),
            "tfile": tfile.path,
            "test": rng.choice(tfile.tests) if tfile.tests else "test_smoke",
            "exc": rng.choice(EXCEPTIONS),
            "field": rng.choice(FIELDS),
        }
        yield Prompt(rng.choice(PROMPTS_KO if korean else PROMPTS_EN).format(**ctx))
        steps = rng.randint(3, 12)
        for step in range(steps):
            calls = self.pick(step, src, tfile, ctx)
            blocks: list[dict[str, Any]] = []
            if rng.random() < 0.55:
                blocks.append(self.thinking(ctx))
            if rng.random() < 0.6:
                blocks.append(
                    {"type": "text", "text": rng.choice(STEP_KO if korean else STEP_EN).format(**ctx)}
                )
            for call, _ in calls:
                call.id = self.tool_id()
                blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
            yield Assistant(blocks, "tool_use")
            yield Results(calls)
        fix, fix_ko = rng.choice(FIXES)
        text = (DONE_KO if korean else DONE_EN).format(fix=fix, fix_ko=fix_ko, n=len(tfile.tests), **ctx)
        yield Assistant([{"type": "text", "text": text}], "end_turn")

    def pick(
        self, step: int, src: SourceFile, tfile: SourceFile, ctx: dict[str, str]
    ) -> list[tuple[Call, Result]]:
        rng, t = self.rng, self.tools
        if step == 0:
            return (
                [t.read(src), t.pytest(tfile, rng.choice([0, 1, 1, 2]))]
                if rng.random() < 0.5
                else [t.read(src)]
            )
        k = rng.random()
        if k < 0.22:
            return [t.read(rng.choice(self.repo.files))]
        if k < 0.32:
            return [t.read(rng.choice(self.repo.files)), t.read(rng.choice(self.repo.files))]
        if k < 0.45:
            return [t.pytest(rng.choice([tfile, None]), rng.choice([0, 0, 1, 3]))]
        if k < 0.55:
            return [t.logs(ctx["noun"])]
        if k < 0.67:
            return [t.grep(rng.choice([ctx["fn"], ctx["noun"], rng.choice(FIELDS)]))]
        if k < 0.72:
            return [t.glob(rng.choice(PACKAGES))]
        if k < 0.9:
            return [t.edit(src)]
        if k < 0.94:
            return [t.write(tfile)]
        return [t.git()]


# ---------------------------------------------------------------------------------------------- writers


class Writer:
    def __init__(self, out: IO[bytes], rng: random.Random) -> None:
        self.out, self.rng = out, rng
        self.bytes = 0
        self.t = datetime(2026, 3, 2, 9, 0, 0)

    def emit(self, record: dict[str, Any]) -> None:
        line = orjson.dumps(record) + b"\n"
        self.out.write(line)
        self.bytes += len(line)

    def stamp(self, lo: float, hi: float) -> str:
        self.t += timedelta(seconds=self.rng.uniform(lo, hi))
        return self.t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.t.microsecond // 1000:03d}Z"

    def uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-{h[20:]}"


def approx_tokens(n_bytes: int) -> int:
    return max(1, n_bytes * 10 // 36)


class ChatWriter(Writer):
    """Anthropic-shape chat lines: one message per line, parallel calls grouped in one message."""

    def start(self, session: Session) -> None:
        self.emit(
            {
                "role": "system",
                "content": f"You are a coding agent working in {session.cwd}. Use the tools to read, search, run and edit; keep changes minimal and run the tests.",
            }
        )

    def event(self, ev: Event) -> None:
        if isinstance(ev, Prompt):
            self.emit({"role": "user", "content": ev.text})
        elif isinstance(ev, Assistant):
            self.emit({"role": "assistant", "content": ev.blocks})
        else:
            blocks = []
            for call, res in ev.pairs:
                b: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": res.content}
                if res.is_error:
                    b["is_error"] = True
                blocks.append(b)
            self.emit({"role": "user", "content": blocks})


class ClaudeCodeWriter(Writer):
    """Claude Code session log records, with usage and auto-compaction boundaries."""

    WINDOW = 160_000

    def start(self, session: Session) -> None:
        self.session = session
        self.session_id = self.uuid()
        self.last: str | None = None
        self.cache_read, self.pending = 15_268, 2_954
        self.env = {
            "isSidechain": False,
            "userType": "external",
            "cwd": session.cwd,
            "sessionId": self.session_id,
            "version": "2.1.42",
            "gitBranch": "main",
            "slug": "steady-busy-heron",
        }
        self.tasks: list[str] = []

    def rec(self, type_: str, parent: str | None, **fields: Any) -> str:
        uid = self.uuid()
        stamp = fields.pop("timestamp", None) or self.stamp(0.05, 0.8)
        self.emit(
            {"parentUuid": parent, **self.env, "type": type_, **fields, "uuid": uid, "timestamp": stamp}
        )
        return uid

    def compact(self) -> None:
        pre = self.cache_read + self.pending
        boundary = self.uuid()
        self.emit(
            {
                "parentUuid": None,
                "logicalParentUuid": self.last,
                **self.env,
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "isMeta": False,
                "timestamp": self.stamp(20, 60),
                "uuid": boundary,
                "level": "info",
                "compactMetadata": {"trigger": "auto", "preTokens": pre},
            }
        )
        summary = (
            "This session is being continued from a previous conversation that ran out of context. The summary below "
            "covers the earlier portion of the conversation.\n\nAnalysis:\nThe user asked for a series of fixes in "
            f"{self.session.cwd}. Work so far, in order:\n"
            + "\n".join(f"{i + 1}. {t}" for i, t in enumerate(self.tasks[-40:]))
            + "\n\nSummary:\n1. Primary Request and Intent: keep fixing the reported issues one at a time, run the tests "
            "after every change.\n2. Files and Code Sections: the files named above were read and edited.\n3. Pending "
            "Tasks: none beyond the current request.\n\nPlease continue the conversation from where we left it off "
            "without asking the user any further questions. Continue with the last task that you were asked to work on."
        )
        self.last = self.rec(
            "user",
            boundary,
            message={"role": "user", "content": summary},
            isVisibleInTranscriptOnly=True,
            isCompactSummary=True,
        )
        self.cache_read, self.pending = 13_000, approx_tokens(len(summary.encode()))

    def event(self, ev: Event) -> None:
        if isinstance(ev, Prompt):
            self.tasks.append(ev.text)
            if self.cache_read + self.pending > self.WINDOW:
                self.compact()
            mid = self.uuid()
            self.emit(
                {
                    "type": "file-history-snapshot",
                    "messageId": mid,
                    "snapshot": {"messageId": mid, "trackedFileBackups": {}, "timestamp": self.stamp(5, 90)},
                    "isSnapshotUpdate": False,
                }
            )
            self.emit(
                {
                    "parentUuid": self.last,
                    **self.env,
                    "type": "user",
                    "message": {"role": "user", "content": ev.text},
                    "uuid": mid,
                    "timestamp": self.stamp(0.01, 0.05),
                    "thinkingMetadata": {"maxThinkingTokens": 31999},
                    "todos": [],
                    "permissionMode": "acceptEdits",
                }
            )
            self.last = mid
            self.pending += approx_tokens(len(ev.text.encode()))
        elif isinstance(ev, Assistant):
            out_tokens = sum(approx_tokens(len(orjson.dumps(b))) for b in ev.blocks)
            usage = {
                "input_tokens": self.rng.randint(1, 8),
                "cache_creation_input_tokens": self.pending,
                "cache_read_input_tokens": self.cache_read,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": self.pending},
                "output_tokens": out_tokens,
                "service_tier": "standard",
                "inference_geo": "not_available",
            }
            self.cache_read += self.pending
            self.pending = out_tokens
            msg_id = "msg_01" + base64.b64encode(self.rng.randbytes(17)).decode()[:22].replace(
                "+", "c"
            ).replace("/", "d")
            req_id = "req_011C" + base64.b64encode(self.rng.randbytes(15)).decode()[:20].replace(
                "+", "e"
            ).replace("/", "f")
            self.stamp(1, 6)
            self.uses: dict[str, str] = {}
            for n, original in enumerate(ev.blocks):
                block = (
                    {**original, "caller": {"type": "direct"}} if original["type"] == "tool_use" else original
                )
                message = {
                    "model": "claude-sonnet-4-5-20250929",
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "content": [block],
                    "stop_reason": ev.stop if n == len(ev.blocks) - 1 else None,
                    "stop_sequence": None,
                    "usage": usage,
                }
                uid = self.uuid()
                self.emit(
                    {
                        "parentUuid": self.last,
                        **self.env,
                        "message": message,
                        "requestId": req_id,
                        "type": "assistant",
                        "uuid": uid,
                        "timestamp": self.stamp(0.2, 1.5),
                    }
                )
                self.last = uid
                if block["type"] == "tool_use":
                    self.uses[block["id"]] = uid
            if ev.stop == "end_turn" and self.rng.random() < 0.5:
                self.last = self.rec(
                    "system",
                    self.last,
                    subtype="turn_duration",
                    durationMs=self.rng.randint(8_000, 400_000),
                    isMeta=False,
                )
        else:
            for call, res in ev.pairs:
                source = self.uses[call.id]
                parent = source
                if call.name == "Bash" and self.rng.random() < 0.5:
                    data = {
                        "type": "hook_progress",
                        "hookEvent": "PreToolUse",
                        "hookName": "PreToolUse:Bash",
                        "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/guard.sh",
                    }
                    parent = self.rec(
                        "progress", source, data=data, toolUseID=call.id, parentToolUseID=call.id
                    )
                content = {
                    "tool_use_id": call.id,
                    "type": "tool_result",
                    "content": res.content,
                    "is_error": res.is_error,
                }
                self.last = self.rec(
                    "user",
                    parent,
                    message={"role": "user", "content": [content]},
                    timestamp=self.stamp(0.1, 8),
                    toolUseResult=res.structured,
                    sourceToolAssistantUUID=source,
                )
                self.pending += approx_tokens(len(res.content.encode()))


def generate(out_path: Path, mb: float, fmt: str, seed: int) -> int:
    target = int(mb * 1024 * 1024)
    session = Session(seed)
    with out_path.open("wb", buffering=1 << 20) as f:
        writer: ChatWriter | ClaudeCodeWriter = (
            ClaudeCodeWriter(f, session.rng) if fmt == "claude-code" else ChatWriter(f, session.rng)
        )
        writer.start(session)
        while writer.bytes < target:
            for ev in session.task():
                writer.event(ev)
        return writer.bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="file to write")
    ap.add_argument("--mb", type=float, default=100.0, help="approximate size in MiB (default 100)")
    ap.add_argument("--format", choices=["claude-code", "chat"], default="claude-code")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    size = generate(args.out, args.mb, args.format, args.seed)
    print(
        f"wrote {args.out} ({size / 1048576:.1f} MiB, {args.format}, seed {args.seed}) in {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
