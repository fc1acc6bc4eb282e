"""The smoke picks every port PRIME-RL binds at once: blocks that never overlap each other or the inference port."""

from __future__ import annotations

import socket
from pathlib import Path

from composer_prime.local.launch import ENV_SERVER_PORTS
from composer_prime.process.ports import free_port_blocks
from composer_prime.smoke.run import launch_args


def test_port_blocks_are_free_and_never_overlap():
    for _ in range(50):
        zmq, env = free_port_blocks(2, ENV_SERVER_PORTS)
        ports = [zmq, zmq + 1, *range(env, env + ENV_SERVER_PORTS)]
        assert len(set(ports)) == len(ports)
        for port in ports:  # each can be bound now that the blocks were released
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))


def test_an_avoided_port_is_never_in_a_block():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        inference = held.getsockname()[1]
        for _ in range(50):
            for base, size in zip(free_port_blocks(2, 4, avoid=(inference,)), (2, 4), strict=True):
                assert not base <= inference < base + size


def test_launch_args_name_distinct_ports():
    args = launch_args(Path("/project"), [], 2, 8000)
    zmq = int(args[args.index("--rollout-transport.port") + 1])
    env = int(args[args.index("--orchestrator.env-server-base-port") + 1])
    assert len({8000, zmq, zmq + 1, *range(env, env + ENV_SERVER_PORTS)}) == 3 + ENV_SERVER_PORTS
