"""The line matcher that finds a task's gold code in its image (`composer_prime.corpus.image_copies`): hand-made
gold patches and files, and the walk over a folder laid out like an image's root filesystem."""

from __future__ import annotations

import zipfile
from pathlib import Path

from composer_prime.corpus.image_copies import describe, gold_lines, matches, search

CODE = '''\
def add_metaclass(metaclass):
    """Class decorator for creating a class with a metaclass."""
    def wrapper(cls):
        orig_vars = cls.__dict__.copy()
        slots = orig_vars.get('__slots__')
        if slots is not None:
            if isinstance(slots, str):
                slots = [slots]
            for slots_var in slots:
                orig_vars.pop(slots_var)
        orig_vars.pop('__dict__', None)
        orig_vars.pop('__weakref__', None)
        return metaclass(cls.__name__, cls.__bases__, orig_vars)
    return wrapper
'''
GOLD = "--- a/six.py\n+++ b/six.py\n@@ -10,0 +10,14 @@\n" + "".join(f"+{line}\n" for line in CODE.splitlines())
TRIVIAL = """\
class Other:
    def wrapper(cls):
        pass
    return wrapper
    else:
        return None
        ]
        )
        raise NotImplementedError
"""


def test_the_distinctive_lines_leave_out_trivial_ones():
    lines = gold_lines(GOLD)
    assert "orig_vars.pop('__dict__', None)" in lines
    assert "return metaclass(cls.__name__, cls.__bases__, orig_vars)" in lines
    for trivial in ("return wrapper", "slots = [slots]", "pass"):
        assert trivial not in lines  # under 16 characters or 3 words
    assert not any(line.startswith("--- ") or line.startswith("++ ") for line in lines)
    assert len(lines) == 12


def test_a_verbatim_copy_matches():
    assert matches("import sys\n\n" + CODE + "\nX = 1\n", {"t": gold_lines(GOLD)}) == {"t": 12}


def test_a_reindented_copy_matches():
    reindented = "class Holder:\n" + "".join(f"\t\t{line.strip()}   \n" for line in CODE.splitlines())
    assert matches(reindented, {"t": gold_lines(GOLD)}) == {"t": 12}


def test_a_file_sharing_only_trivial_lines_does_not_match():
    assert matches(TRIVIAL, {"t": gold_lines(GOLD)}) == {}  # it shares 8 lines, one of them distinctive
    assert gold_lines("+++ b/x.py\n" + "".join(f"+{line}\n" for line in TRIVIAL.splitlines())) == ["def wrapper(cls):"]


def test_a_minority_of_the_lines_does_not_match_and_a_majority_does():
    lines = gold_lines(GOLD)
    assert matches("\n".join(lines[:6]), {"t": lines}) == {}  # 6 of 12: not a strict majority
    assert matches("\n".join(lines[:7]), {"t": lines}) == {"t": 7}
    assert matches(lines[0], {"t": lines[:1]}) == {}  # one distinctive line cannot be judged


def test_the_walk_finds_plain_files_and_archive_members_and_skips_proc(tmp_path: Path):
    vendored = tmp_path / "usr" / "lib" / "python3" / "dist-packages" / "pip" / "_vendor"
    vendored.mkdir(parents=True)
    (vendored / "six.py").write_text(CODE)
    (vendored / "unrelated.py").write_text(TRIVIAL)
    wheels = tmp_path / "usr" / "share" / "python-wheels"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "pip-23.0.1-py3-none-any.whl", "w") as archive:
        archive.writestr("pip/_vendor/six.py", CODE)
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "environ.py").write_text(CODE)
    (tmp_path / "link.py").symlink_to(vendored / "six.py")
    result = search(str(tmp_path), {"six": gold_lines(GOLD), "other": ["nothing like this line at all", "nor x y z w"]})
    found = sorted(path for path, _, _ in result["found"]["six"])
    assert found == [f"{vendored}/six.py", f"{wheels}/pip-23.0.1-py3-none-any.whl!pip/_vendor/six.py"]
    assert "other" not in result["found"] and result["files"] == 3
    reason = describe(result["found"]["six"])
    assert reason.startswith("gold code in the image: ") and f"{vendored}/six.py (12/12 lines)" in reason
