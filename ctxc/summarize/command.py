"""``--summarizer command --summary-command 'CMD'``: summaries written by any program.

For local models and other CLIs (``ollama run llama3``, ``llm -m ...``, ``claude -p``): the command
runs through the shell, gets the summarization prompt on stdin (the same prompt the Anthropic
summarizer sends, :func:`ctxc.summarize.prompt.build_prompt`, system and user parts joined by a
blank line) and writes the summary to stdout. It also finds ``CTXC_SUMMARY_BUDGET`` (tokens) and
``CTXC_SUMMARY_CITATION`` in its environment, for wrappers that want them outside the prompt.

Failures are handled like API failures:

* A non-zero exit (the message quotes the first line of its stderr) or a run past ``timeout``
  seconds is retried ``max_retries`` times with a short backoff, then is a :class:`SummarizerError`.
  On a timeout the command's whole process group is killed, so a pipeline cannot linger.
* An empty answer, or one missing a required ``## `` section, is asked for once more (with a note
  saying what was wrong), then is a :class:`SummarizerError`. An answer over its budget is asked for
  once more, shorter; the shorter one is returned and the strategy measures the rest.
* A summary without the archive citation gets it as its first line, so details stay recoverable.

Summaries are cached in the Anthropic summarizer's on-disk cache
(:class:`ctxc.summarize.cache.SummaryCache`), keyed by the SHA-256 of the command string and the
prompt: the same command on the same input is not run twice. ``use_cache=False`` bypasses it.

Size: each tool result is cut to :data:`ctxc.summarize.prompt.RESULT_CHARS` characters (head and tail,
with a note that the rest is archived) and each text to ``TEXT_CHARS``, as for the API. The span is
not split further: the strategies hand over spans of their own chunk size, and ctxc cannot know a
command's window.

A dry run never starts the command: each call is recorded with its input tokens (by the run's
counter) and the extractive summarizer stands in for the answer so the plan proceeds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import orjson

from ctxc.errors import SummarizerError, UsageError
from ctxc.summarize import SummarizerOptions, SummaryRequest, register
from ctxc.summarize.cache import LazySummaryCache, SummaryCache
from ctxc.summarize.prompt import Prompt, Validation, build_prompt

#: Seconds before the first retry of a failed command; doubled for each further retry, at most MAX.
BACKOFF = 0.5
BACKOFF_MAX = 8.0


def cache_key(command: str, prompt: Prompt) -> bytes:
    return hashlib.sha256(orjson.dumps(["command", command, prompt.system, prompt.user])).digest()


def _first_line(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            flat = " ".join(line.split())
            return flat if len(flat) <= 200 else flat[:199] + "…"
    return ""


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
            raise UsageError("--summarizer command needs --summary-command")
        self.command = command
        self._cache = LazySummaryCache(self.options.use_cache, cache)
        self._calls = 0
        self._runs = 0
        self._input_tokens = 0
        self._output_tokens = 0
        self._cache_hits = 0

    # ------------------------------------------------------------------------------------ reporting

    def usage(self) -> dict[str, Any]:
        """Summaries asked for and their tokens, by the run's counter (a command reports no usage, so
        these are always estimates; ``runs`` counts every start of the command, retries included)."""
        return {
            "model": "command",
            "calls": self._calls,
            "runs": self._runs,
            "input_tokens": self._input_tokens,
            "output_tokens": self._output_tokens,
            "cache_hits": self._cache_hits,
            "estimated": True,
        }

    @property
    def cache(self) -> SummaryCache | None:
        return self._cache.get()

    # ------------------------------------------------------------------------------------- running

    def run(self, prompt_text: str, request: SummaryRequest) -> str:
        """One run of the command on ``prompt_text``: its stdout, or :class:`CommandFailed`."""
        env = dict(os.environ)
        env["CTXC_SUMMARY_BUDGET"] = str(request.budget)
        env["CTXC_SUMMARY_CITATION"] = request.citation
        self._runs += 1
        # A session of its own: on a timeout the whole pipeline (`sh -c 'a | b'`) is killed, not just the
        # shell, whose children would otherwise keep the pipes open and hang communicate().
        proc = subprocess.Popen(
            self.command,
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
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
            why = _first_line(err)
            status = f"exit status {proc.returncode}" if proc.returncode > 0 else f"signal {-proc.returncode}"
            raise CommandFailed(
                f"the summary command failed with {status}"
                + (f": {why}" if why else "")
                + f" ({self.command})"
            )
        return out.decode("utf-8", "replace")

    def _run_retrying(self, prompt_text: str, request: SummaryRequest) -> str:
        retries = max(0, self.options.max_retries)
        for attempt in range(retries + 1):
            try:
                return self.run(prompt_text, request)
            except CommandFailed as exc:
                if attempt == retries:
                    if retries:
                        raise SummarizerError(
                            f"{exc.message}, after {retries} retr{'y' if retries == 1 else 'ies'}"
                        ) from None
                    raise SummarizerError(exc.message) from None
                time.sleep(min(BACKOFF_MAX, BACKOFF * 2**attempt))
        raise AssertionError("unreachable")

    # ----------------------------------------------------------------------------------- summarize

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        prompt = build_prompt(request)
        key = cache_key(self.command, prompt)
        cache = self.cache
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                self._cache_hits += 1
                return hit
        input_tokens = count(prompt.text)
        self._calls += 1
        self._input_tokens += input_tokens
        if self.options.dry_run:
            from ctxc.summarize.extractive import ExtractiveSummarizer

            self._output_tokens += request.budget
            return ExtractiveSummarizer().summarize(request, count)
        text = self._validated(request, prompt, count)
        size = count(text)
        self._output_tokens += size
        if cache is not None:
            cache.put(key, f"command:{self.command}", text, input_tokens, size)
        return text

    def _validated(self, request: SummaryRequest, prompt: Prompt, count: Callable[[str], int]) -> str:
        """A summary with every section: asked once more when empty, sectionless, or over budget."""
        check = Validation(request, count, who=f"command: {self.command}")
        while True:
            summary = check.offer(self._run_retrying(check.extend(prompt.text), request))
            if summary is not None:
                return summary


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows has no process groups of this kind
            proc.kill()


register("command", CommandSummarizer)
