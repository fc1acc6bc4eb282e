"""Services live as long as the process that started them, from whichever thread it started them, and no
longer: a real parent process starts a real HTTP server (`python -m http.server` on 127.0.0.1) through
`children.Service` from a thread that then ends; the server must still answer, and must stop once the parent is
SIGKILLed (the kernel's death signal, nothing the parent runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from composer_prime.process import ports

PARENT = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from composer_prime.process import children

    port, log = int(sys.argv[1]), Path(sys.argv[2])
    started = {}

    def start():
        argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        started["svc"] = children.Service("http", argv, log, f"http://127.0.0.1:{port}", "/", timeout_s=60)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()  # the thread that asked for the server has ended
    print(started["svc"].proc.pid, flush=True)
    time.sleep(600)
    """
)


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_service_started_from_a_short_lived_thread_outlives_the_thread_and_dies_with_the_process(tmp_path: Path):
    port = ports.free_port()
    repo = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(port), str(tmp_path / "http.log")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    child = 0
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        assert line.strip().isdigit(), f"the parent did not start the server: {line!r}"
        child = int(line)
        time.sleep(2.0)  # the death signal, were it tied to the thread, would have come by now
        assert _answers(port), (
            f"the server died with the thread that started it:\n{(tmp_path / 'http.log').read_text()}"
        )

        parent.send_signal(signal.SIGKILL)  # nothing in the parent runs any more: only the kernel can end the child
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while _answers(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _answers(port), "the server outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
        if child:
            try:
                os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
