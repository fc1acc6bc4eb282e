"""The smoke picks every port PRIME-RL binds at once: blocks that never overlap each other or the inference port."""

from __future__ import annotations

from pathlib import Path

from composer_prime.local.launch import ENV_SERVER_PORTS
from composer_prime.smoke.run import launch_args


def test_launch_args_name_distinct_ports():
    args = launch_args(Path("/project"), [], 2, 8000)
    zmq = int(args[args.index("--rollout-transport.port") + 1])
    env = int(args[args.index("--orchestrator.env-server-base-port") + 1])
    assert len({8000, zmq, zmq + 1, *range(env, env + ENV_SERVER_PORTS)}) == 3 + ENV_SERVER_PORTS
