"""The trusted pytest launcher the grader copies into a box: stdlib and pytest only, nothing of the box imported.

Run as `python -I -S -B bootstrap.py SPEC` from a directory outside the work tree. `-I` keeps the current
directory, `PYTHON*` variables and user site-packages off `sys.path` (a `./pytest.py` shim is never imported);
`-S` skips `site`, so no `sitecustomize`, `usercustomize` or `.pth` `import` line runs. This script adds the
interpreter's site-packages itself, honouring only the path lines of `.pth` files, and only then imports pytest.
The code under test reaches `sys.path` through the trusted ini's `pythonpath` (the spec's `-c`), not the
environment. Plugin autoload is off and `PYTEST_ADDOPTS`/`PYTEST_PLUGINS` are dropped, so the only plugins are
pytest's own, the recorder below and those the spec names.

The recorder streams the collected ids, then one JSON object per test as each test finishes (its reports counted by
kind), down a duplicate of stdout taken before any code under test is imported (fd 1 then points at stderr); the
grader reads them from the run's stdout (`stream.read_stream`) and `composer_prime.pytest_outcomes` folds them into
outcomes. The spec file, which holds the nonce that marks the recorder's lines, is deleted as soon as it is read,
before pytest or any code under test is imported: the nonce is in no file, argument or variable the code under test
can read. The spec's `first` lists test files (the canaries) whose tests run before every other test, in that
order, each file's tests in their own order (`order_plugin`). Inside a network namespace (`COMPOSER_PRIME_NETNS=isolated`) loopback is brought up first, so socket tests
still work.
"""

import fcntl
import json
import os
import socket
import struct
import sys

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up():
    """Set `lo` up (a fresh network namespace starts with it down). Needs CAP_NET_ADMIN in the namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def site_prefixes():
    """The prefixes whose site-packages the interpreter would use. Under `-S` a venv's interpreter still has the base
    interpreter's `sys.prefix` (pyvenv.cfg is `site`'s business), so the venv is found here as `site.venv` finds it:
    a `pyvenv.cfg` beside the executable or one folder up; its base joins only with include-system-site-packages."""
    here = os.path.dirname(os.path.abspath(sys.executable))  # a venv's python is a link: not resolved
    for candidate in (os.path.join(here, "pyvenv.cfg"), os.path.join(os.path.dirname(here), "pyvenv.cfg")):
        if not os.path.isfile(candidate):
            continue
        system_site = "true"
        with open(candidate, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep and key.strip().lower() == "include-system-site-packages":
                    system_site = value.strip().lower()
        venv = os.path.dirname(candidate)
        return [venv, sys.prefix] if system_site == "true" else [venv]
    return [sys.prefix]


def add_site_packages():
    """Put the interpreter's site-packages on sys.path with the path lines of their `.pth` files, no code."""
    import site  # under -S importing site runs nothing

    for directory in site.getsitepackages(site_prefixes()):
        if not os.path.isdir(directory) or directory in sys.path:
            continue
        sys.path.append(directory)
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".pth"):
                continue
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    line = line.rstrip()
                    if not line or line.startswith(("#", "import ", "import\t")):
                        continue
                    path = os.path.join(directory, line)
                    if os.path.isdir(path) and path not in sys.path:
                        sys.path.append(path)


class Recorder:
    """Sends one line `<nonce> <json>` per test down a private duplicate of stdout when the test finishes, and one per
    failed collection as it fails: nothing written can be taken back, and a second record for one test voids the
    grade. A test's record holds every report pytest made for it (setup, call, teardown and each `subTest` block),
    counted by kind: `{"id", "reports": [{"when", "outcome", "xfail", "sub", "n"}, ...]}`. Only the running test's
    reports are held, and only until its `pytest_runtest_logfinish`: no buffer outlives a test (a suite with 20,000
    `subTest` blocks sends one line per test, not per block)."""

    def __init__(self, stream, nonce):
        self.stream, self.nonce = stream, nonce
        self.running = {}  # node id -> {(when, outcome, xfail, sub): count}, of the tests not yet finished

    def _write(self, record):
        self.stream.write(self.nonce + " " + json.dumps(record) + "\n")
        self.stream.flush()

    def _finish(self):
        running, self.running = self.running, {}
        for nodeid, counts in running.items():
            reports = [
                {"when": when, "outcome": outcome, "xfail": xfail, "sub": sub, "n": n}
                for (when, outcome, xfail, sub), n in counts.items()
            ]
            self._write({"id": nodeid, "reports": reports})

    def pytest_runtest_logreport(self, report):
        sub = type(report).__name__ in ("SubtestReport", "SubTestReport")  # one per `subTest` block
        key = (str(report.when), str(report.outcome), hasattr(report, "wasxfail"), sub)
        counts = self.running.setdefault(str(report.nodeid), {})
        counts[key] = counts.get(key, 0) + 1

    def pytest_runtest_logfinish(self, nodeid, location):
        self._finish()

    def pytest_collection_finish(self, session):
        self._write({"collected": [str(item.nodeid) for item in session.items]})

    def pytest_collectreport(self, report):
        if report.failed:
            self._write({"id": report.nodeid, "when": "collect", "outcome": "failed", "xfail": False})

    def pytest_sessionfinish(self, session, exitstatus):
        self._finish()
        self._write({"exit": int(exitstatus)})


def order_plugin(pytest, first):
    """A plugin that puts the tests of the files in `first` before all others, file by file in that order, each file's
    tests in their collected order (a module's fixtures and a class's stay together); the rest keep theirs. It runs
    after every other ordering hook, so none can move a canary behind its original."""
    rank = {path: index for index, path in enumerate(first)}

    def path(item):
        return str(item.nodeid).split("::", 1)[0]

    class Order:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, items):
            head = sorted((item for item in items if path(item) in rank), key=lambda item: rank[path(item)])
            items[:] = head + [item for item in items if path(item) not in rank]

    return Order()


def read_spec(path):
    """The spec, read once and deleted: what it holds (the nonce) is then in no file the code under test can open."""
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    os.unlink(path)
    return spec


def main(spec_path):
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the outcome stream; the run's own output goes to stderr
    os.dup2(2, 1)
    spec = read_spec(spec_path)
    if os.environ.get("COMPOSER_PRIME_NETNS") == "isolated":
        loopback_up()
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "PYTHONINSPECT"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    # Subprocesses a test starts find the code under test the same way.
    os.environ["PYTHONPATH"] = os.pathsep.join(spec["pythonpath"])
    add_site_packages()
    sys.path[:0] = spec.get("plugin_dirs", [])
    recorder = Recorder(stream, spec["nonce"])
    import pytest

    plugins = [recorder, order_plugin(pytest, spec["first"])] if spec.get("first") else [recorder]
    code = pytest.main(spec["args"], plugins=plugins)
    stream.close()
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
