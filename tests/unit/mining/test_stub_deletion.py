"""The stub deletion mode (`composer_prime.mining.stub`): the name stays, the implementation goes; texts checked by
hand, and the edited module executed to show what still imports and what raises."""

from __future__ import annotations

import pytest

from composer_prime.mining.deletion import CannotDelete, apply_edits
from composer_prime.mining.features import discover
from composer_prime.mining.prompt import render
from composer_prime.mining.stub import stub_feature

SOURCE = '''"""Prices."""


def keep(x):
    # a hint between the header and the body
    return x


@staticmethod
def alpha(x: int,
          y: int = 2) -> int:  # trailing
    """Add things.

    More.
    """
    # a comment that gives the idea away
    total = x + y
    return total


class Cart:
    """A cart."""

    LIMIT = 3

    def __init__(self):
        self.lines = []

    @property
    def size(self):
        return len(self.lines)

    def add(self, item):
        """Add one."""
        self.lines.append(item)
        return self


def beta(x):
    if x:
        return 1
    return 2'''


def _feature(qualname: str):
    return next(f for f in discover("m.py", SOURCE) if f.qualname == qualname)


def _stub(qualname: str, docstring: bool = True) -> tuple[str, str]:
    deletion = stub_feature({"m.py": SOURCE}, _feature(qualname), docstring=docstring)
    assert set(deletion.changed) == {"m.py"}
    # the row's line edits rebuild the same text from the original (that is how the task's tree is made)
    assert apply_edits(SOURCE, deletion.edits["m.py"]) == deletion.changed["m.py"]
    return deletion.changed["m.py"], deletion.removed


def test_a_function_keeps_decorators_header_and_docstring_and_raises():
    text, removed = _stub("alpha")
    expected = '''@staticmethod
def alpha(x: int,
          y: int = 2) -> int:  # trailing
    """Add things.

    More.
    """
    raise NotImplementedError


class Cart:'''
    assert expected in text
    assert "gives the idea away" not in text and "total = x + y" not in text
    assert removed == "total = x + y\nreturn total\n"
    without_doc, _ = _stub("alpha", docstring=False)
    assert "-> int:  # trailing\n    raise NotImplementedError\n" in without_doc and "Add things" not in without_doc


def test_comments_between_the_header_and_the_body_go():
    text, _ = _stub("keep")
    assert '"""Prices."""\n\n\ndef keep(x):\n    raise NotImplementedError\n\n\n@staticmethod' in text


def test_the_last_function_of_a_file_without_a_final_newline():
    text, removed = _stub("beta")
    assert text.endswith("def beta(x):\n    raise NotImplementedError\n")
    assert removed == "if x:\n    return 1\nreturn 2"


def test_a_method_becomes_a_stub_and_the_class_still_works():
    text, removed = _stub("Cart.add")
    assert '    def add(self, item):\n        """Add one."""\n        raise NotImplementedError\n' in text
    assert removed.startswith("self.lines.append(item)\nreturn self")
    namespace: dict = {}
    exec(text, namespace)  # noqa: S102 - the edited module imports and only the stubbed name raises
    cart = namespace["Cart"]()
    assert cart.size == 0
    with pytest.raises(NotImplementedError):
        cart.add("x")


def test_a_class_keeps_its_name_and_methods_as_stubs():
    text, removed = _stub("Cart")
    assert (
        'class Cart:\n    """A cart."""\n\n    def __init__(self):\n        raise NotImplementedError\n\n'
        "    @property\n    def size(self):\n        raise NotImplementedError\n\n"
        '    def add(self, item):\n        """Add one."""\n        raise NotImplementedError\n'
    ) in text
    assert "LIMIT" not in text and "self.lines" not in text
    assert removed.startswith('class Cart:\n    """A cart."""\n\n    LIMIT = 3\n')
    namespace: dict = {}
    exec(text, namespace)  # noqa: S102
    with pytest.raises(NotImplementedError):
        namespace["Cart"]()


def test_what_has_no_stub_form_is_refused():
    module = next(f for f in discover("m.py", SOURCE) if f.kind == "module")
    with pytest.raises(CannotDelete, match="whole module"):
        stub_feature({"m.py": SOURCE}, module)
    one_line = "def f(x): return x + 1\n"
    (feature,) = [f for f in discover("o.py", one_line) if f.qualname == "f"]
    with pytest.raises(CannotDelete, match="header's line"):
        stub_feature({"o.py": one_line}, feature)


def test_the_prompt_says_the_body_raises():
    prompt = render(_feature("alpha"), [], [], stub=True)
    assert prompt.startswith("The body of the function `alpha` in `m.py` has been removed: it raises")
    assert "NotImplementedError" in render(_feature("Cart"), [], [], stub=True).splitlines()[0]
