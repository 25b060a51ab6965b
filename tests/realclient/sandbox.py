"""Run one client against the fake API, both inside the caller's fresh network namespace.

Started as ``unshare -n -- python sandbox.py SPEC.json``: brings up ``lo`` (the only interface there, so
nothing but 127.0.0.1 is reachable), serves the fake API on the spec's loopback port (the namespace is new,
so the port is free), runs the client with a timeout (killing its whole process group when it expires),
and writes what happened, with every request the fake received, to the spec's ``result`` path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

OUTPUT_LIMIT = 20_000  # characters of the client's stdout/stderr kept in the result


def main(spec_path: str) -> int:
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fake_anthropic
    from fake_anthropic import FakeAnthropic

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
    server = FakeAnthropic(api_key=spec["api_key"], models=None, port=spec["port"]).start()
    timed_out = False
    try:
        proc = subprocess.Popen(
            spec["argv"],
            cwd=spec["cwd"],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=spec["timeout"])
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=10)
    finally:
        server.stop()
    result = {
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "stdout": out.decode(errors="replace")[-OUTPUT_LIMIT:],
        "stderr": err.decode(errors="replace")[-OUTPUT_LIMIT:],
        "requests": [
            {"method": r.method, "path": r.path, "headers": r.headers, "body": r.body}
            for r in server.requests
        ],
    }
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
