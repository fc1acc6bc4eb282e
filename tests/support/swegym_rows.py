"""SWE-Gym-shaped rows from small pure-Python projects, each with a real bug-fix commit, for measuring which rows get a
usable oracle (`swe_gym.oracle`) and why the rest do not.

Each project is a git repository with two commits: the base (the package with its bug and the tests it had) and the
fix (the gold change to the package plus the tests that show it). The row is derived as SWE-Gym's are: `patch` = the
fix's diff outside `tests/`, `test_patch` = its diff of `tests/`, FAIL_TO_PASS / PASS_TO_PASS from two real pytest
runs (the fix's tests against the base code, then against the fixed code). The kinds of fix are the common ones of
SWE-Gym's repositories: a pure function's result, a raised error on bad input, a method on a class with private state,
a file written, an id drawn at random, a generator, callbacks a registry holds, a command-line entry point tested
through a subprocess. `expected` is the oracle reason each should get (`usable` or a key of `oracle.REASONS`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer_prime.pytest_outcomes import parse_outcomes
from tests.support.swegym_repo import git


@dataclass(frozen=True)
class Project:
    name: str
    base: dict[str, str]
    """Every file at the base commit (package and its existing tests)."""
    fix: dict[str, str]
    """Files the fix commit writes (the gold change and the new tests)."""
    problem: str
    expected: str
    extra: dict[str, Any] = field(default_factory=dict)


SLUG = Project(
    "textkit",
    {
        "textkit/__init__.py": "",
        "textkit/slug.py": "import re\n\n\ndef slugify(text):\n"
        '    words = re.sub(r"[^a-z0-9]+", "-", text.lower())\n    return words.strip("-")\n',
        "tests/test_slug.py": "from textkit.slug import slugify\n\n\ndef test_plain():\n"
        '    assert slugify("Hello World") == "hello-world"\n',
    },
    {
        "textkit/slug.py": 'import re\n\n\ndef slugify(text, keep=""):\n'
        '    words = re.sub(r"[^a-z0-9" + re.escape(keep) + r"]+", "-", text.lower())\n    return words.strip("-")\n',
        "tests/test_slug.py": "from textkit.slug import slugify\n\n\ndef test_plain():\n"
        '    assert slugify("Hello World") == "hello-world"\n\n\ndef test_keep():\n'
        '    assert slugify("v1.2 notes", keep=".") == "v1.2-notes"\n    assert slugify("a_b c", keep="_") == "a_b-c"\n',
    },
    "slugify() has no way to keep characters such as '.' in version numbers.",
    "usable",
)
PORT = Project(
    "netaddr",
    {
        "netaddr/__init__.py": "",
        "netaddr/ports.py": "def parse_port(text):\n    return int(text)\n",
        "tests/test_ports.py": "from netaddr.ports import parse_port\n\n\ndef test_parse():\n"
        '    assert parse_port("80") == 80\n',
    },
    {
        "netaddr/ports.py": "def parse_port(text):\n    port = int(text)\n    if not 0 < port < 65536:\n"
        '        raise ValueError(f"port out of range: {port}")\n    return port\n',
        "tests/test_ports.py": "import pytest\n\nfrom netaddr.ports import parse_port\n\n\ndef test_parse():\n"
        '    assert parse_port("80") == 80\n\n\n@pytest.mark.parametrize("text", ["0", "70000", "-1"])\n'
        "def test_out_of_range(text):\n    with pytest.raises(ValueError):\n        parse_port(text)\n",
    },
    "parse_port('70000') returns 70000 instead of refusing a port out of range.",
    "usable",  # blind to a crafted stub (every call raises ValueError), kept: the starting code returns instead
)
INTERVAL = Project(
    "spans",
    {
        "spans/__init__.py": "",
        "spans/interval.py": "from dataclasses import dataclass\n\n\n@dataclass\nclass Interval:\n    start: int\n"
        "    end: int\n\n\ndef merge(intervals):\n    out = []\n"
        "    for item in sorted(intervals, key=lambda i: i.start):\n"
        "        if out and item.start < out[-1].end:\n            out[-1] = Interval(out[-1].start, max(out[-1].end, item.end))\n"
        "        else:\n            out.append(Interval(item.start, item.end))\n    return out\n",
        "tests/test_interval.py": "from spans.interval import Interval, merge\n\n\ndef test_overlap():\n"
        "    assert merge([Interval(1, 3), Interval(2, 5)]) == [Interval(1, 5)]\n",
    },
    {
        "spans/interval.py": "from dataclasses import dataclass\n\n\n@dataclass\nclass Interval:\n    start: int\n"
        "    end: int\n\n\ndef merge(intervals):\n    out = []\n"
        "    for item in sorted(intervals, key=lambda i: i.start):\n"
        "        if out and item.start <= out[-1].end:\n            out[-1] = Interval(out[-1].start, max(out[-1].end, item.end))\n"
        "        else:\n            out.append(Interval(item.start, item.end))\n    return out\n",
        "tests/test_interval.py": "from spans.interval import Interval, merge\n\n\ndef test_overlap():\n"
        "    assert merge([Interval(1, 3), Interval(2, 5)]) == [Interval(1, 5)]\n\n\ndef test_touching():\n"
        "    assert merge([Interval(4, 6), Interval(1, 4)]) == [Interval(1, 6)]\n",
    },
    "merge() keeps touching intervals such as [1, 4] and [4, 6] apart.",
    "usable",
)
LRU = Project(
    "lrukit",
    {
        "lrukit/__init__.py": "",
        "lrukit/cache.py": "class LRUCache:\n    def __init__(self, size):\n        self.size = size\n"
        "        self._data = {}\n        self._order = []\n\n    def get(self, key):\n"
        "        return self._data.get(key)\n\n    def put(self, key, value):\n"
        "        if key not in self._data:\n            self._order.append(key)\n        self._data[key] = value\n"
        "        if len(self._order) > self.size:\n            del self._data[self._order.pop(0)]\n",
        "tests/test_cache.py": "from lrukit.cache import LRUCache\n\n\ndef test_put_get():\n    c = LRUCache(2)\n"
        '    c.put("a", 1)\n    assert c.get("a") == 1\n',
    },
    {
        "lrukit/cache.py": "class LRUCache:\n    def __init__(self, size):\n        self.size = size\n"
        "        self._data = {}\n        self._order = []\n\n    def get(self, key):\n"
        "        if key in self._data:\n            self._order.remove(key)\n            self._order.append(key)\n"
        "        return self._data.get(key)\n\n    def put(self, key, value):\n"
        "        if key not in self._data:\n            self._order.append(key)\n        self._data[key] = value\n"
        "        if len(self._order) > self.size:\n            del self._data[self._order.pop(0)]\n",
        "tests/test_cache.py": "from lrukit.cache import LRUCache\n\n\ndef test_put_get():\n    c = LRUCache(2)\n"
        '    c.put("a", 1)\n    assert c.get("a") == 1\n\n\ndef test_get_refreshes():\n    c = LRUCache(2)\n'
        '    c.put("a", 1)\n    c.put("b", 2)\n    c.get("a")\n    c.put("c", 3)\n'
        '    assert c.get("b") is None and c.get("a") == 1\n',
    },
    "LRUCache.get() does not mark the key as recently used, so it is evicted first.",
    "base answers as the gold",
)
CONFIG = Project(
    "cfgfile",
    {
        "cfgfile/__init__.py": "",
        "cfgfile/store.py": "def save(path, data):\n    with open(path, 'w') as f:\n"
        "        for key, value in data.items():\n            f.write(f'{key}={value}\\n')\n",
        "tests/test_store.py": "from cfgfile.store import save\n\n\ndef test_save(tmp_path):\n"
        "    save(tmp_path / 'a.cfg', {'x': 1})\n    assert (tmp_path / 'a.cfg').read_text() == 'x=1\\n'\n",
    },
    {
        "cfgfile/store.py": "def save(path, data):\n    with open(path, 'w') as f:\n"
        "        for key in sorted(data):\n            f.write(f'{key}={data[key]}\\n')\n",
        "tests/test_store.py": "from cfgfile.store import save\n\n\ndef test_save(tmp_path):\n"
        "    save(tmp_path / 'a.cfg', {'x': 1})\n    assert (tmp_path / 'a.cfg').read_text() == 'x=1\\n'\n\n\n"
        "def test_sorted(tmp_path):\n    save(tmp_path / 'b.cfg', {'b': 2, 'a': 1})\n"
        "    assert (tmp_path / 'b.cfg').read_text() == 'a=1\\nb=2\\n'\n",
    },
    "save() writes keys in insertion order, so the file changes whenever a dict is built differently.",
    "no strict form",
)
IDS = Project(
    "jobids",
    {
        "jobids/__init__.py": "",
        "jobids/ids.py": "import uuid\n\n\ndef new_id(prefix):\n    return prefix + uuid.uuid4().hex[:8]\n",
        "tests/test_ids.py": "from jobids.ids import new_id\n\n\ndef test_unique():\n"
        '    assert new_id("job") != new_id("job")\n',
    },
    {
        "jobids/ids.py": "import uuid\n\n\ndef new_id(prefix):\n    return prefix + '-' + uuid.uuid4().hex[:8]\n",
        "tests/test_ids.py": "from jobids.ids import new_id\n\n\ndef test_unique():\n"
        '    assert new_id("job") != new_id("job")\n\n\ndef test_separator():\n'
        '    assert new_id("job").startswith("job-")\n',
    },
    "new_id('job') gives 'job1f3a...', with no separator between the prefix and the id.",
    "not reproducible",
)
CHUNKS = Project(
    "seqtools",
    {
        "seqtools/__init__.py": "",
        "seqtools/chunks.py": "def chunked(items, size):\n    for start in range(0, len(items) - size + 1, size):\n"
        "        yield list(items[start : start + size])\n",
        "tests/test_chunks.py": "from seqtools.chunks import chunked\n\n\ndef test_even():\n"
        "    assert list(chunked([1, 2, 3, 4], 2)) == [[1, 2], [3, 4]]\n",
    },
    {
        "seqtools/chunks.py": "def chunked(items, size):\n    for start in range(0, len(items), size):\n"
        "        yield list(items[start : start + size])\n",
        "tests/test_chunks.py": "from seqtools.chunks import chunked\n\n\ndef test_even():\n"
        "    assert list(chunked([1, 2, 3, 4], 2)) == [[1, 2], [3, 4]]\n\n\ndef test_tail():\n"
        "    assert list(chunked([1, 2, 3, 4, 5], 2)) == [[1, 2], [3, 4], [5]]\n",
    },
    "chunked() drops the last, shorter chunk.",
    "usable",  # the generator, drained by a lone replay of the gold
)
BUS_TESTS_HEAD = (
    "import pytest\n\nfrom signals import bus\nfrom signals.bus import emit, on\n\n\n"
    "@pytest.fixture(autouse=True)\ndef no_handlers():\n    bus._handlers.clear()\n\n\n"
    "def double(x):\n    return 2 * x\n\n\n"
)
EVENTS = Project(
    "signals",
    {
        "signals/__init__.py": "",
        "signals/bus.py": "_handlers = {}\n\n\ndef on(name, handler):\n    _handlers[name] = [handler]\n\n\n"
        "def emit(name, payload):\n    return [handler(payload) for handler in _handlers.get(name, [])]\n",
        "tests/test_bus.py": BUS_TESTS_HEAD + "def test_emit():\n    on('a', double)\n    assert emit('a', 2) == [4]\n",
    },
    {
        "signals/bus.py": "_handlers = {}\n\n\ndef on(name, handler):\n    _handlers.setdefault(name, []).append(handler)\n\n\n"
        "def emit(name, payload):\n    return [handler(payload) for handler in _handlers.get(name, [])]\n",
        "tests/test_bus.py": BUS_TESTS_HEAD
        + "def negate(x):\n    return -x\n\n\ndef test_emit():\n    on('a', double)\n    assert emit('a', 2) == [4]\n\n\n"
        "def test_two_handlers():\n    on('b', double)\n    on('b', negate)\n    assert emit('b', 3) == [6, -3]\n",
    },
    "on() replaces the handlers of an event instead of adding one.",
    "not reproducible",
)
CLI = Project(
    "greet",
    {
        "greet/__init__.py": "",
        "greet/__main__.py": "import sys\n\n\ndef main(argv):\n    print('hello ' + argv[-1])\n\n\n"
        "main(sys.argv[1:])\n",
        "tests/test_cli.py": "import os\nimport subprocess\nimport sys\n\nROOT = os.path.dirname(os.path.dirname("
        "os.path.abspath(__file__)))\n\n\ndef run(*args):\n    env = {**os.environ, 'PYTHONPATH': ROOT}\n"
        "    return subprocess.run([sys.executable, '-m', 'greet', *args], capture_output=True, text=True, env=env,"
        " timeout=60).stdout\n\n\ndef test_hello():\n    assert run('bob') == 'hello bob\\n'\n",
    },
    {
        "greet/__main__.py": "import sys\n\n\ndef main(argv):\n    text = 'hello ' + argv[-1]\n"
        "    print(text.upper() if '--shout' in argv else text)\n\n\nmain(sys.argv[1:])\n",
        "tests/test_cli.py": "import os\nimport subprocess\nimport sys\n\nROOT = os.path.dirname(os.path.dirname("
        "os.path.abspath(__file__)))\n\n\ndef run(*args):\n    env = {**os.environ, 'PYTHONPATH': ROOT}\n"
        "    return subprocess.run([sys.executable, '-m', 'greet', *args], capture_output=True, text=True, env=env,"
        " timeout=60).stdout\n\n\ndef test_hello():\n    assert run('bob') == 'hello bob\\n'\n\n\n"
        "def test_shout():\n    assert run('--shout', 'bob') == 'HELLO BOB\\n'\n",
    },
    "`python -m greet --shout bob` ignores --shout.",
    "no calls into the package",
)
UNITS = Project(
    "units",
    {
        "units/__init__.py": "",
        "units/temperature.py": "def to_celsius(fahrenheit):\n    return round(fahrenheit - 32 * 5 / 9, 2)\n",
        "tests/test_temperature.py": "from units.temperature import to_celsius\n\n\ndef test_zero_offset():\n"
        "    assert to_celsius(0) == -17.78\n",
    },
    {
        "units/temperature.py": "def to_celsius(fahrenheit):\n    return round((fahrenheit - 32) * 5 / 9, 2)\n",
        "tests/test_temperature.py": "from units.temperature import to_celsius\n\n\ndef test_zero_offset():\n"
        "    assert to_celsius(0) == -17.78\n\n\ndef test_boiling():\n    assert to_celsius(212) == 100\n"
        "    assert to_celsius(98.6) == 37\n",
    },
    "to_celsius(212) gives 194.22: the offset is subtracted after scaling.",
    "usable",
)
STATS = Project(
    "stats",
    {
        "stats/__init__.py": "",
        "stats/core.py": "def mean(values):\n    return sum(values) / len(values)\n\n\nclass Summary:\n"
        "    def __init__(self, values):\n        self._values = list(values)\n        self.count = len(self._values)\n"
        "        self.mean = mean(self._values)\n\n\ndef summarize(values):\n    return Summary(values)\n",
        "tests/test_core.py": "from stats.core import mean, summarize\n\n\ndef test_mean():\n"
        "    assert mean([1, 2, 3]) == 2\n\n\ndef test_summary():\n    s = summarize([2, 4])\n"
        "    assert (s.count, s.mean) == (2, 3)\n",
    },
    {
        "stats/core.py": "def mean(values):\n    if not values:\n        return 0.0\n    return sum(values) / len(values)\n"
        "\n\nclass Summary:\n"
        "    def __init__(self, values):\n        self._values = list(values)\n        self.count = len(self._values)\n"
        "        self.mean = mean(self._values)\n\n\ndef summarize(values):\n    return Summary(values)\n",
        "tests/test_core.py": "from stats.core import mean, summarize\n\n\ndef test_mean():\n"
        "    assert mean([1, 2, 3]) == 2\n\n\ndef test_summary():\n    s = summarize([2, 4])\n"
        "    assert (s.count, s.mean) == (2, 3)\n\n\ndef test_empty():\n    assert mean([]) == 0\n"
        "    s = summarize([])\n    assert (s.count, s.mean) == (0, 0)\n",
    },
    "mean([]) and summarize([]) raise ZeroDivisionError; an empty sample's mean should be 0.",
    "usable",
)
PROJECTS = [SLUG, PORT, INTERVAL, LRU, CONFIG, IDS, CHUNKS, EVENTS, CLI, UNITS, STATS]

STATS_HONEST = (
    "def mean(values):\n    total, count = 0, 0\n    for value in values:\n        total += value\n        count += 1\n"
    "    return total / count if count else 0  # 0, where the gold returns 0.0: equal under ==\n\n\n"
    "class Summary:\n    def __init__(self, values):\n        self._sample = tuple(values)  # the gold keeps _values\n"
    "        self.count = len(self._sample)\n        self.mean = mean(self._sample)\n\n\n"
    "def summarize(values):\n    return Summary(values)\n"
)
"""An honest fix of `STATS` unlike the gold: `0` for `0.0`, the sample kept under another private name."""


def _commit(repo: Path, files: dict[str, str], message: str, date: str) -> str:
    for path, content in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, f"--date={date}")
    return git(repo, "rev-parse", "HEAD").strip()


def _outcomes(repo: Path, tests: list[str]) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *tests],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    return parse_outcomes(done.stdout)


def build_row(root: Path, project: Project) -> tuple[dict[str, Any], Path]:
    """The project's repository under `root` and its SWE-Gym row (FAIL_TO_PASS / PASS_TO_PASS from real runs)."""
    repo = root / project.name
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "--initial-branch=main")
    base = _commit(repo, project.base, f"{project.name}: base", "2024-02-01T10:00:00Z")
    fix = _commit(repo, project.fix, f"{project.name}: fix", "2024-02-02T10:00:00Z")
    tests = sorted(path for path in project.fix if path.startswith("tests/"))
    after = _outcomes(repo, tests)
    git(repo, "checkout", "-q", base, "--", *[p for p in project.fix if not p.startswith("tests/")])
    before = _outcomes(repo, tests)
    git(repo, "checkout", "-q", fix, "--", ".")
    fail_to_pass = sorted(t for t, o in after.items() if o == "PASSED" and before.get(t) != "PASSED")
    pass_to_pass = sorted(t for t, o in after.items() if o == "PASSED" and before.get(t) == "PASSED")
    row = {
        "instance_id": f"{project.name}__{project.name}-1",
        "repo": f"{project.name}/{project.name}",
        "base_commit": base,
        "problem_statement": project.problem,
        "patch": git(repo, "diff", base, fix, "--", ".", ":!tests"),
        "test_patch": git(repo, "diff", base, fix, "--", "tests"),
        "FAIL_TO_PASS": json.dumps(fail_to_pass),
        "PASS_TO_PASS": json.dumps(pass_to_pass),
        "version": "1.0",
    }
    return row, repo


def build_rows(root: Path, projects: list[Project] = PROJECTS) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every project's row, and `owner/name` -> its repository (for `local.repo_sources`)."""
    rows, sources = [], {}
    for project in projects:
        row, repo = build_row(root, project)
        rows.append(row)
        sources[row["repo"]] = str(repo)
    return rows, sources


def local_config(cache: Path, sources: dict[str, str]) -> dict[str, Any]:
    """Local mode for the projects: bare venvs from this interpreter that see its pytest."""
    import pytest

    return {
        "local": {
            "cache_dir": str(cache),
            "repo_sources": sources,
            "env": {"python": sys.executable, "install": [], "with_pip": False, "pythonpath": ["."]},
            "site_packages": [str(Path(pytest.__file__).resolve().parent.parent)],
        },
        "test_timeout_s": 120,
    }
