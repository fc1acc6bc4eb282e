"""composer-agent through verifiers' eval CLI, served by env-server workers (the path PRIME-RL's env servers take):
the workers resolve the harness by id in their own processes and run the loop there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted_server import Reply, ScriptedModelServer, tool

REPO = Path(__file__).resolve().parents[3]
EVAL = "import sys; from verifiers.v1.cli.eval.main import main; sys.argv[0] = 'eval'; sys.exit(main())"


def answer(request: dict[str, Any]) -> Reply:
    """Both tasks at once: write the requested word to its file, then finish."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return tool("finish")
    task = next(m["content"] for m in messages if m["role"] == "user")
    word = re.search(r"`(\w+)`", task).group(1)
    return tool("create", path=f"{word}.txt", content=f"{word}\n")


@pytest.mark.slow
def test_eval_cli_runs_the_harness_in_served_workers(tmp_path: Path) -> None:
    with ScriptedModelServer(answer) as server:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "fixtures"), str(REPO)]),
            COMPOSER_AGENT_TEST_KEY="scripted",
        )
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                EVAL,
                "composer-agent-fixture",
                "-m",
                server.model,
                "--client.base-url",
                server.base_url,
                "--client.api-key-var",
                "COMPOSER_AGENT_TEST_KEY",
                "--env.agent.runtime.type",
                "subprocess",
                "--env.agent.harness.id",
                "composer-agent",
                "--no-push",
                "--no-rich",
                "-n",
                "2",
                "-r",
                "1",
                "-o",
                str(tmp_path),
            ],
            check=False,
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(server.requests) == 4

    (traces_file,) = tmp_path.glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines()]
    traces = [trace for episode in episodes for trace in episode["traces"]]
    assert len(traces) == 2
    for trace in traces:
        assert trace["ok"], trace["errors"]
        assert trace["rewards"]["file_written"]["score"] == 1.0
        assert trace["metrics"]["composer/agent/turns"] == 2
        assert trace["info"]["composer_agent"]["finish_reason"] == "finish"
