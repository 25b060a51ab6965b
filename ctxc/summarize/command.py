"""``--summarizer command --summary-command 'CMD'``: summaries by any program, run through the shell
with the prompt on stdin and ``CTXC_SUMMARY_BUDGET`` and ``CTXC_SUMMARY_CITATION`` in its environment."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from subprocess import PIPE
from typing import Any

from ctxc.errors import SummarizerError, UsageError
from ctxc.summarize import SummarizerOptions, SummaryRequest, register
from ctxc.summarize.cache import Spent, SummaryCache, summary_cache
from ctxc.summarize.facts import plural
from ctxc.summarize.prompt import Validation, build_prompt, one_line

#: Seconds before the first retry, doubled for each further one, at most BACKOFF_MAX.
BACKOFF = 0.5
BACKOFF_MAX = 8.0


class CommandFailed(SummarizerError):
    """One run of the command failed (non-zero exit or timeout); retried before it is reported."""


class CommandSummarizer:
    name = "command"

    def __init__(
        self, options: SummarizerOptions | None = None, *, cache: SummaryCache | None = None
    ) -> None:
        self.options = options or SummarizerOptions()
        command = (self.options.command or "").strip()
        if not command:
            raise UsageError(
                "{summarizer} command needs {summarizer_options.command}",
                options=("summarizer", "summarizer_options.command"),
            )
        self.command = command
        self.spent = Spent()
        self._cache = summary_cache(self.options.use_cache, cache)
        self._runs = 0

    def usage(self) -> dict[str, Any]:
        """Estimates by the run's counter (a command reports no usage); ``runs`` counts retries too."""
        spent = asdict(self.spent)  # its "calls" keeps the place it has here, before "runs"
        return {"model": "command", "calls": spent["calls"], "runs": self._runs, **spent, "estimated": True}

    def run(self, prompt_text: str, request: SummaryRequest) -> str:
        """One run of the command on ``prompt_text``: its stdout, or :class:`CommandFailed`."""
        env = {
            **os.environ,
            "CTXC_SUMMARY_BUDGET": str(request.budget),
            "CTXC_SUMMARY_CITATION": request.citation,
        }
        self._runs += 1
        # A session of its own: a timeout kills the whole pipeline, whose children would hang communicate().
        proc = subprocess.Popen(
            self.command, shell=True, stdin=PIPE, stdout=PIPE, stderr=PIPE, env=env, start_new_session=True
        )
        try:
            out, err = proc.communicate(
                prompt_text.encode("utf-8", "surrogatepass"), timeout=self.options.timeout
            )
        except subprocess.TimeoutExpired:
            _kill(proc)
            proc.communicate()
            raise CommandFailed(
                f"the summary command did not finish within {self.options.timeout:g}s: {self.command}"
            ) from None
        except BaseException:  # Ctrl-C: leave nothing running
            _kill(proc)
            with contextlib.suppress(Exception):
                proc.communicate(timeout=5)
            raise
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").splitlines()
            why = one_line(next((ln for ln in lines if ln.strip()), ""), 200)
            status = f"exit status {proc.returncode}" if proc.returncode > 0 else f"signal {-proc.returncode}"
            raise CommandFailed(
                f"the summary command failed with {status}{f': {why}' if why else ''} ({self.command})"
            )
        return out.decode("utf-8", "replace")

    def _run_retrying(self, prompt_text: str, request: SummaryRequest) -> str:
        retries = max(0, self.options.max_retries)
        for attempt in range(retries + 1):
            try:
                return self.run(prompt_text, request)
            except CommandFailed as exc:
                if attempt == retries:
                    after = f", after {plural(retries, 'retry', 'retries')}" if retries else ""
                    raise SummarizerError(exc.message + after) from None
                time.sleep(min(BACKOFF_MAX, BACKOFF * 2**attempt))
        raise AssertionError("unreachable")

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        prompt = build_prompt(request)
        key = SummaryCache.key("command", self.command, prompt.system, prompt.user)
        if (hit := self._cache.lookup(key, self.spent)) is not None:
            return hit
        input_tokens = count(prompt.text)
        if self.options.dry_run:
            return self.spent.stand_in(request, count, input_tokens)
        self.spent.calls += 1
        self.spent.input_tokens += input_tokens
        check = Validation(request, count, who=f"command: {self.command}")
        text = None
        while text is None:
            text = check.offer(self._run_retrying(check.extend(prompt.text), request))
        size = count(text)
        self.spent.output_tokens += size
        self._cache.put(key, f"command:{self.command}", text, input_tokens, size)
        return text


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):  # the group may be gone already
        os.killpg(proc.pid, signal.SIGKILL)


register("command", CommandSummarizer)
