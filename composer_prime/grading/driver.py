"""The grading driver: one process in the box that runs a list of grading steps in order, so that a grading costs a
few runtime calls instead of one per step (on a docker or podman box each call is a `podman exec`, 0.1-0.3 s).

Run as `python -I -S -B -c <this source> <plan.json>` in the graded tree (`batch.Batch.execute` writes the plan and
runs it); self-contained, standard library only, since it runs in a grader box from the task's image. It reads the
plan and deletes it before any step runs, marks itself not dumpable (its memory, which holds the later steps' files
and nonces, and its descriptors, the runtime's pipes, stay closed through `/proc/<pid>` to processes without
CAP_SYS_PTRACE), then runs each step and writes one line per step to its stdout: `<token> <json>`, the token drawn
by the host for this plan. A step's bytes (files read, a launched program's stdout and stderr) travel base64-encoded,
so nothing in them can break a line.

Steps (`op`): `run` (argv, its exit and output), `write` (a file, its folders made), `read` (at most `max` bytes;
`write`, `read` and `changed` open files without following any symbolic link, `open_here`),
`launch` (a grading process under `launch.LAUNCH`, in a session of its own, killed with every process under it
past `wait` seconds: the launch's own `timeout` ends it first; a launch whose output's capping trailer says stdout bytes
were dropped comes back as its first line and that trailer only, since such a stream is judged void whole), `changed`
(after a `run` of `tree.LIST_FILES`: the size, and the bytes up to `max`, of every listed regular file whose digest
differs from the manifest the host sent, within a total of `budget` bytes; the rest marked `skipped`). A step with
`unless_own_pids` runs only when that launch's header says it had no PID namespace of its own (the reaper after a
replay). A step with `check` that fails (an exception, a non-zero exit) stops the plan: every later step is skipped
but those marked `always` (clean-ups).
"""

import base64
import json
import os
import signal
import stat
import subprocess
import sys

try:  # not dumpable: /proc/<this pid>/mem, environ and fd closed to processes without CAP_SYS_PTRACE
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass

TRAILER = b"composer-prime-cap stdout "


def b64(data):
    return base64.b64encode(data).decode("ascii")


def trimmed(stdout):
    """A launch's stdout, or its first line and its capping trailer when the trailer says stdout was dropped."""
    at = stdout.rfind(b"\n" + TRAILER)
    if at < 0:
        return stdout
    words = stdout[at + 1 :].split()
    if len(words) >= 4 and words[3] != b"0":
        return stdout.split(b"\n", 1)[0] + b"\n[composer-prime-driver: stdout dropped]" + stdout[at:]
    return stdout


def run(step):
    done = subprocess.run(step["argv"], stdin=subprocess.DEVNULL, capture_output=True, check=False)
    return {"exit": done.returncode, "stdout": b64(done.stdout), "stderr": b64(done.stderr[-65536:])}


def open_here(path, flags, make=False, replace=False):
    """A descriptor for `path` that no symbolic link redirects: a path inside the tree (relative: the driver runs in
    it) is walked folder by folder from the tree with `O_NOFOLLOW`, so a link the code under test left at any of its
    components (`tests` pointed at a host folder) is refused rather than followed out of the tree; an absolute path
    (the launcher's fresh scratch folder) has its last component opened with `O_NOFOLLOW`. With `make`, missing
    folders are made. With `replace`, whatever file stands at the path is unlinked and a new one created (`O_EXCL`):
    a write never lands in an inode the tree shares with a file elsewhere (a hard link). Only regular files are
    opened (`O_NONBLOCK`: a FIFO left there cannot hold the driver)."""
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if replace else 0)
    if os.path.isabs(path):
        if make and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        if replace:
            unlink_file(path)
        fd = os.open(path, flags, 0o644)
    else:
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if not parts or ".." in parts:
            raise ValueError(f"{path!r} is not a path inside the tree")
        folder = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                try:
                    inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
                except FileNotFoundError:
                    if not make:
                        raise
                    os.mkdir(part, 0o755, dir_fd=folder)
                    inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
                os.close(folder)
                folder = inner
            if replace:
                unlink_file(parts[-1], folder)
            fd = os.open(parts[-1], flags, 0o644, dir_fd=folder)
        finally:
            os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path!r} is not a regular file")
    return fd


def unlink_file(name, folder=None):
    """Remove the file `name` (in the folder descriptor `folder`) unless it is missing; a symbolic link or a folder
    there is refused, as `open_here` refuses them."""
    try:
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode) or stat.S_ISDIR(mode):
        raise OSError(f"{name!r} is a {'symbolic link' if stat.S_ISLNK(mode) else 'folder'}, not a file")
    os.unlink(name, dir_fd=folder)


def write(step):
    with os.fdopen(open_here(step["path"], os.O_WRONLY, make=True, replace=True), "wb") as out:
        out.write(base64.b64decode(step["data"]))
    return {"exit": 0}


def read(step):
    with os.fdopen(open_here(step["path"], os.O_RDONLY), "rb") as source:
        return {"exit": 0, "data": b64(source.read(step["max"]))}


def descendants(root):
    """`root` and every process under it, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def launch(step):
    child = subprocess.Popen(
        step["argv"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        stdout, stderr = child.communicate(timeout=step["wait"])
    except subprocess.TimeoutExpired:
        for _ in range(3):  # `timeout` moves to a process group of its own: every process under the launch, frozen
            tree = descendants(child.pid)
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in tree:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
        child.kill()
        child.wait()
        return {"exit": None, "timed_out": True}
    return {"exit": child.returncode, "stdout": b64(trimmed(stdout)), "stderr": b64(stderr)}


def changed(step, results):
    listing = base64.b64decode(results[step["listing"]].get("stdout", ""))
    manifest, left, files = step["manifest"], step["budget"], {}
    for entry in listing.split(b"\0"):
        if b"  " not in entry or entry[:2] in (b"b ", b"l ", b"d ", b"o ", b"e "):
            continue
        digest, raw = entry.split(b"  ", 1)
        path = raw.decode("utf-8", "replace")
        path = path[2:] if path.startswith("./") else path
        if digest.decode("ascii", "replace").startswith(manifest.get(path, "-")):
            continue
        try:
            with os.fdopen(open_here(path, os.O_RDONLY), "rb") as source:
                size = os.fstat(source.fileno()).st_size
                if size > step["max"]:
                    files[path] = {"size": size}
                elif size > left:
                    files[path] = {"size": size, "skipped": True}
                else:
                    data = source.read(step["max"] + 1)
                    left -= len(data)
                    files[path] = {"size": size, "data": b64(data)}
        except (OSError, ValueError) as exc:
            files[path] = {"error": str(exc)[:200]}
    return {"exit": 0, "files": files}


def own_pids(result):
    stdout = base64.b64decode(result.get("stdout", ""))
    words = stdout.split(b"\n", 1)[0].split()
    return len(words) == 4 and words[2] == b"pids=own"


def main(plan_path):
    with open(plan_path, "rb") as source:
        plan = json.loads(source.read())
    os.unlink(plan_path)
    token, results, failed = plan["token"], [], False
    out = sys.stdout.buffer
    for index, step in enumerate(plan["steps"]):
        if failed and not step.get("always"):
            result = {"skipped": True}
        elif "unless_own_pids" in step and own_pids(results[step["unless_own_pids"]]):
            result = {"skipped": True}
        else:
            op = step["op"]
            try:
                if op == "changed":
                    result = changed(step, results)
                else:
                    result = {"run": run, "write": write, "read": read, "launch": launch}[op](step)
            except Exception as exc:
                result = {"exit": None, "error": f"{type(exc).__name__}: {exc}"[:500]}
            if step.get("check") and result.get("exit") != 0:
                failed = True
        results.append(result if step["op"] in ("run", "launch") else {"exit": result.get("exit")})
        out.write(token.encode() + b" " + json.dumps({"i": index, **result}).encode() + b"\n")
        out.flush()


main(sys.argv[1])
