"""The jail (`composer_prime.process.jail`), run for real with `unshare --mount` as the launcher and the rollout's
namespace run it: what a program inside can read, write and undo, and that the host is untouched."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from composer_prime.grading.launch import Jail, jailed, launch_argv
from composer_prime.process.jail import host_sockets, jail_argv

pytestmark = pytest.mark.slow

CAN_JAIL = (
    subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode == 0
)
pytestmark = [pytestmark, pytest.mark.skipif(not CAN_JAIL, reason="the jail needs root (unshare --mount)")]


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp (the jail's /tmp is private, which would hide anything under it without a cover)."""
    root = Path.home() / ".cache" / f"composer-prime-jail-{secrets.token_hex(6)}"
    (root / "box").mkdir(parents=True)
    (root / "expected").mkdir()
    (root / "expected" / "answers.json").write_text('{"gold": 42}')
    (root / "tasks.jsonl").write_text('{"gold_patch": "secret"}\n')
    yield root
    shutil.rmtree(root, ignore_errors=True)


PROBE = r"""
cat "$1/tasks.jsonl" 2>&1; echo "tasks:$?"
ls "$1/expected" 2>&1; echo "expected:$?"
echo ok > "$1/box/written" && echo "box:0"
{ echo x > "$1/planted"; } 2>&1; echo "outside:$?"
{ echo x > /usr/local/bin/composer-jail-probe; } 2>&1; echo "usr:$?"
ls -A /tmp | wc -l
umount "$1/expected" 2>&1; echo "umount:$?"
mount -o remount,rw / 2>&1; echo "remount:$?"
grep CapBnd /proc/self/status
"""


def jailed_run(outside: Path, hidden: list[Path], script: str = PROBE) -> subprocess.CompletedProcess:
    argv = launch_argv(
        True,
        30,
        ["bash", "-c", script, "probe", str(outside)],
        jail=Jail((str(outside / "box"),), tuple(map(str, hidden))),
    )
    return subprocess.run(argv, cwd=outside / "box", capture_output=True, text=True, timeout=60)


def test_the_jail_covers_the_expected_side_and_keeps_the_host_read_only(outside: Path) -> None:
    marker = Path("/tmp") / f"composer-jail-host-{secrets.token_hex(4)}"
    marker.write_text("host")
    try:
        result = jailed_run(outside, [outside / "tasks.jsonl", outside / "expected"])
    finally:
        marker.unlink()
    out = result.stdout
    assert jailed(out), result.stderr
    assert "secret" not in out and "tasks:0" in out  # the file reads as /dev/null
    assert "answers.json" not in out and "Permission denied" in out and "expected:2" in out
    assert "box:0" in out and (outside / "box" / "written").read_text() == "ok\n"
    assert "Read-only file system" in out and "outside:1" in out and not (outside / "planted").exists()
    assert "usr:1" in out and not Path("/usr/local/bin/composer-jail-probe").exists()
    assert "\n0\n" in out  # a private, empty /tmp: the host's files there (other gradings' folders) are out of sight
    assert "umount:32" in out and "remount:32" in out
    assert "CapBnd:\t0000000000000000" in out
    # the host is as it was: covers and read-only mounts stayed in the jail's namespace
    assert "secret" in (outside / "tasks.jsonl").read_text() and os.access(outside, os.W_OK)
    assert (outside / "expected" / "answers.json").exists()


def test_without_the_cover_the_expected_side_is_readable(outside: Path) -> None:
    """The cover is what hides it: the same jail without `hidden` reads the gold."""
    out = jailed_run(outside, []).stdout
    assert jailed(out) and "secret" in out and "answers.json" in out


def test_the_jail_refuses_to_run_in_its_callers_mount_namespace(outside: Path) -> None:
    """Run without a mount namespace of its own, it would make the host read-only: it refuses and changes nothing."""
    argv = jail_argv([str(outside / "box")], [str(outside / "tasks.jsonl")], ["true"])
    env = {**os.environ, "COMPOSER_JAIL_OUTER": os.readlink("/proc/self/ns/mnt")}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 125 and "not in a mount namespace of its own" in result.stderr
    assert "secret" in (outside / "tasks.jsonl").read_text()
    assert os.access("/usr/local/bin", os.W_OK)


def test_a_writable_folder_under_tmp_is_put_back_writable(tmp_path: Path) -> None:
    """The private copy and the launcher's scratch live under /tmp, which the jail replaces by an empty tmpfs: they
    are carried over, writable, at their own paths."""
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "mod.py").write_text("X = 1\n")
    script = "cat mod.py && echo y > new.txt && pwd -P && ls /tmp | wc -l"
    argv = launch_argv(True, 30, ["bash", "-c", script], jail=Jail((str(tmp_path / "tree"),)))
    result = subprocess.run(argv, cwd=tmp_path / "tree", capture_output=True, text=True, timeout=60)
    assert jailed(result.stdout), result.stderr
    assert result.stdout.splitlines()[1:] == ["X = 1", str(tmp_path / "tree"), "1"]
    assert (tmp_path / "tree" / "new.txt").read_text() == "y\n"


LEAVE = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
key = int(sys.argv[1])
segment = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
keyring = libc.syscall(248, b"user", b"composer-jail-probe", b"held-out tests", 14, -4)  # add_key to @u
print(segment >= 0, keyring >= 0)
"""
FIND = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(int(sys.argv[1]), 0, 0)
keyring = libc.syscall(250, 10, -4, b"user", b"composer-jail-probe", 0)  # keyctl SEARCH @u
if segment >= 0:
    libc.shmctl(segment, 0, None)  # IPC_RMID: leave nothing behind
if keyring >= 0:
    libc.syscall(250, 21, keyring)  # KEYCTL_INVALIDATE
print(segment >= 0, keyring >= 0)
"""


def test_what_a_jailed_program_leaves_in_ipc_or_keyrings_does_not_reach_the_host(outside: Path) -> None:
    """System V IPC objects and root's keyrings are the host's in every mount namespace: a program could leave the
    held-out tests it read at grading there for a later rollout. The jail's IPC and user namespaces close both."""
    key = int.from_bytes(secrets.token_bytes(3), "big") + 1
    (outside / "box" / "leave.py").write_text(LEAVE)
    result = jailed_run(outside, [], f"python3 {outside}/box/leave.py {key}")
    assert result.stdout.splitlines()[1:] == ["True True"], result.stderr
    found = subprocess.run(["python3", "-c", FIND, str(key)], capture_output=True, text=True, timeout=30)
    assert found.stdout.split() == ["False", "False"], found.stdout
    # potent: the same program outside the jail leaves both where the host (and a later rollout) finds them
    subprocess.run(["python3", str(outside / "box" / "leave.py"), str(key)], check=True, timeout=30)
    found = subprocess.run(["python3", "-c", FIND, str(key)], capture_output=True, text=True, timeout=30)
    assert found.stdout.split() == ["True", "True"], found.stdout


def test_other_rollouts_boxes_and_host_sockets_are_out_of_sight(outside: Path) -> None:
    """The rollout's jail covers the folder of every rollout's boxes but its own box, and /run (the sockets of the
    host's daemons: a container engine's would be a way out)."""
    boxes = outside / "boxes"
    (boxes / "mine").mkdir(parents=True)
    (boxes / "theirs").mkdir()
    (boxes / "theirs" / "fixed.py").write_text("the other rollout's fix\n")
    script = 'ls -A "$1/boxes"; cat "$1/boxes/theirs/fixed.py"; ls -A /run | wc -l; echo ok > mine.txt && echo wrote'
    argv = launch_argv(
        True, 30, ["bash", "-c", script, "probe", str(outside)], jail=Jail((str(boxes / "mine"),), (str(boxes),))
    )
    result = subprocess.run(argv, cwd=boxes / "mine", capture_output=True, text=True, timeout=60)
    assert jailed(result.stdout), result.stderr
    assert result.stdout.splitlines()[1:] == ["mine", "0", "wrote"], (result.stdout, result.stderr)
    assert (boxes / "mine" / "mine.txt").read_text() == "ok\n"


def test_a_jailed_rollouts_holder_ends_once_its_box_is_gone() -> None:
    """A rollout that is never graded (refused at setup, cancelled) leaves its namespace's holder behind until the box
    is removed. In the jail the box is a mount whose folder outlives the host's `rmdir`, so the holder watches the
    mounted folder's link count: it ends within a poll of the box's removal, and no process of it is left."""
    import asyncio
    import time

    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime

    from composer_prime.process.pidns import Namespace, open_namespace

    async def opened() -> tuple[Namespace | str, Path]:
        runtime = make_runtime(vf.SubprocessConfig(), name=f"holder-{secrets.token_hex(4)}")
        await runtime.start()
        return await open_namespace(runtime, jail=True, network=True), Path(runtime.workdir)

    namespace, box = asyncio.run(opened())
    assert isinstance(namespace, Namespace) and namespace.jail == str(box), namespace
    assert Path(f"/proc/{namespace.holder}").exists()
    shutil.rmtree(box)
    deadline = time.monotonic() + 15
    while Path(f"/proc/{namespace.holder}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{namespace.holder}").exists(), "the holder outlived its box"


CONNECT = "import socket, sys; c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); print('connected')"


def test_a_host_unix_socket_outside_run_is_out_of_reach(outside: Path) -> None:
    """A daemon's unix socket in a state folder (outside /run and /tmp) is reached by its path from any network
    namespace, and a read-only mount does not stop `connect`: the jail covers every socket the host has bound."""
    import socket

    path = outside / "daemon.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    try:
        assert str(path) in host_sockets([])
        assert str(path) not in host_sockets([str(outside)])  # a socket in a writable folder is the box's own
        result = jailed_run(outside, [], f'python3 -c "{CONNECT}" "$1/daemon.sock" 2>&1 | tail -1')
        assert jailed(result.stdout), result.stderr
        assert "connected" not in result.stdout and "ConnectionRefusedError" in result.stdout, result.stdout
        # potent: a mount and a network namespace of its own, without the cover, reach it
        bare = ["unshare", "--mount", "--propagation", "private", "--net", "python3", "-c", CONNECT, str(path)]
        reached = subprocess.run(bare, capture_output=True, text=True, timeout=30)
        assert reached.stdout.strip() == "connected", reached.stderr
    finally:
        server.close()


KERNEL_PROBE = r"""
{ echo memo > /sys/fs/cgroup/composer-jail-probe; } 2>&1; echo "cgroup:$?"
{ cat /proc/sys/kernel/domainname > /proc/sys/kernel/domainname; } 2>&1; echo "domainname:$?"
{ cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern; } 2>&1; echo "core_pattern:$?"
{ hostname composer-jail-probe; } 2>&1; echo "hostname:$?"
echo "processes:$(ls /proc | grep -c '^[0-9]')"
"""


def test_the_kernels_settings_and_sys_are_read_only_in_the_jail(outside: Path) -> None:
    """Root (by uid) may write the kernel's settings from any namespace: the jail keeps `/sys` (the cgroup tmpfs, a
    memo that outlives the rollout) and `/proc/sys` (`core_pattern`: a program run as the host's root) read-only, has
    a host name of its own, and, as PID 1 of its own PID namespace, a `/proc` without the host's processes."""
    hostname = Path("/proc/sys/kernel/hostname").read_text()
    argv = launch_argv(
        True,
        30,
        ["bash", "-c", KERNEL_PROBE],
        own_pids=True,
        jail=Jail((str(outside / "box"),), ()),
    )
    result = subprocess.run(argv, cwd=outside / "box", capture_output=True, text=True, timeout=60)
    assert jailed(result.stdout), result.stderr
    seen = dict(line.rsplit(":", 1) for line in result.stdout.splitlines() if ":" in line and " " not in line)
    assert seen["cgroup"] != "0" and seen["domainname"] != "0" and seen["core_pattern"] != "0", result.stdout
    assert "Read-only file system" in result.stdout, result.stdout
    assert int(seen["processes"]) < 10, result.stdout  # the jail's own: bash, ls, grep
    assert Path("/proc/sys/kernel/hostname").read_text() == hostname
    assert not Path("/sys/fs/cgroup/composer-jail-probe").exists()
    # potent: a mount namespace of its own alone leaves them writable to root (each write puts back what was there)
    bare = ["unshare", "--mount", "--propagation", "private", "bash", "-c", KERNEL_PROBE.replace("hostname c", ": c")]
    reached = subprocess.run(bare, capture_output=True, text=True, timeout=60)
    try:
        assert "domainname:0" in reached.stdout and "core_pattern:0" in reached.stdout, reached.stdout
        if Path("/sys/fs/cgroup").stat().st_dev != Path("/sys").stat().st_dev:  # a tmpfs there, as on this host
            assert "cgroup:0" in reached.stdout or "Read-only" in reached.stdout, reached.stdout
    finally:
        Path("/sys/fs/cgroup/composer-jail-probe").unlink(missing_ok=True)
