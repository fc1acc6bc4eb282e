"""Free ports on 127.0.0.1 in blocks: every block free, none overlapping another or an avoided port."""

from __future__ import annotations

import socket

from composer_prime.local.launch import ENV_SERVER_PORTS
from composer_prime.process.ports import free_port_blocks


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
