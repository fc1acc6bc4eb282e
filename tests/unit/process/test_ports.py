"""Ports on 127.0.0.1: blocks free and never overlapping, outside the kernel's ephemeral range, and reserved across
processes until the picking process exits (real processes holding real reservations)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

from composer_prime.local.launch import ENV_SERVER_PORTS
from composer_prime.process import ports
from composer_prime.process.ports import ephemeral_range, free_port, free_port_blocks, reserve, reserved_by_another

HOLDER = textwrap.dedent(
    """
    import sys
    from composer_prime.process.ports import free_port_blocks
    zmq, env = free_port_blocks(2, 4)
    print(zmq, env, flush=True)
    sys.stdin.read()  # holds its reservations (and binds nothing) until the test closes stdin or kills it
    """
)


def _holder() -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    zmq, env = map(int, proc.stdout.readline().split())
    return proc, [zmq, zmq + 1, *range(env, env + 4)]


def test_port_blocks_are_free_and_never_overlap():
    for _ in range(50):
        zmq, env = free_port_blocks(2, ENV_SERVER_PORTS)
        picked = [zmq, zmq + 1, *range(env, env + ENV_SERVER_PORTS)]
        assert len(set(picked)) == len(picked)
        for port in picked:  # reserved, not bound: each can be bound by the server it is for
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))


def test_an_avoided_port_is_never_in_a_block():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        inference = held.getsockname()[1]
        for _ in range(50):
            for base, size in zip(free_port_blocks(2, 4, avoid=(inference,)), (2, 4), strict=True):
                assert not base <= inference < base + size


def test_ports_come_from_outside_the_kernels_ephemeral_range():
    # bind(0) anywhere on the machine (vLLM's and torchrun's own picks, client sockets) draws from that range only
    low, high = ephemeral_range()
    for _ in range(20):
        for base in free_port_blocks(2, 4):
            assert not (low <= base <= high or low <= base + 3 <= high)
        with socket.socket() as kernel:
            kernel.bind(("127.0.0.1", 0))
            assert low <= kernel.getsockname()[1] <= high


def test_a_port_another_process_reserved_is_never_handed_out_until_it_exits():
    holder, held = _holder()
    try:
        for port in held:
            assert ports.port_free(port)  # nothing listens there: only the reservation keeps it
            assert reserved_by_another(port)
            assert not reserve(port)
    finally:
        holder.send_signal(signal.SIGKILL)  # however it ends, the kernel drops its locks
        holder.wait(timeout=10)
    for port in held:
        assert not reserved_by_another(port)
        assert reserve(port)


def test_a_process_never_hands_out_one_port_twice():
    first = free_port()
    blocks = [free_port_blocks(3)[0] for _ in range(30)]
    assert all(not base <= first < base + 3 for base in blocks)
    picked = [base + k for base in blocks for k in range(3)]
    assert len(set(picked)) == len(picked)
    assert reserve(first)  # this process holds it already


def test_the_reservations_folder_is_shared_by_every_user():
    free_port()
    folder = ports.RESERVATIONS.stat()
    if folder.st_uid == os.getuid():  # made (or fixed) by this user: writable for all, like /tmp
        assert folder.st_mode & 0o1777 == 0o1777
