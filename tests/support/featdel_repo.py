"""A small multi-module Python repository with a pytest suite, built for the Feature Deletion tests.

`build_shop_repo(root)` writes package `shop` (pricing functions, a `Cart` class, a stand-alone `textutil` module)
and its tests, commits it in two commits with real git, then litters the tree with what a real checkout collects
(bytecode, tool caches, build output holding copies of the code) so the tests can check that none of it reaches a
task snapshot.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PRICING = '''\
"""Money helpers."""


def apply_discount(amount: float, percent: float) -> float:
    """Return `amount` reduced by `percent` (0-100), rounded to cents."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent must be within [0, 100], got {percent}")
    reduced = amount * (100 - percent) / 100
    return round(reduced, 2)


def format_price(amount: float, currency: str = "EUR") -> str:
    """Format `amount` with two decimals followed by the currency code."""
    return f"{amount:.2f} {currency}"
'''

CART = '''\
"""A shopping cart."""

from shop.pricing import apply_discount


class Cart:
    """A cart of (name, unit price, quantity) lines."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, float, int]] = []

    def add(self, name: str, price: float, quantity: int = 1) -> None:
        """Add a line; `quantity` must be positive."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self.lines.append((name, price, quantity))

    def total(self, discount_percent: float = 0.0) -> float:
        """Sum of price times quantity over all lines, less an optional discount."""
        subtotal = sum(price * quantity for _, price, quantity in self.lines)
        return apply_discount(subtotal, discount_percent)

    def count(self) -> int:
        """How many items the cart holds, quantities included."""
        return sum(quantity for _, _, quantity in self.lines)
'''

TEXTUTIL = '''\
"""Text helpers for product pages."""


def slugify(text: str) -> str:
    """Lower-case `text` and join its words with dashes."""
    words = "".join(ch if ch.isalnum() else " " for ch in text.lower()).split()
    return "-".join(words)


def initials(name: str) -> str:
    """The upper-cased first letters of the words of `name`."""
    return "".join(word[0].upper() for word in name.split())
'''

INIT = '''\
"""A tiny shop."""

from shop.cart import Cart
from shop.pricing import apply_discount, format_price

__all__ = ["Cart", "apply_discount", "format_price"]
'''

TEST_PRICING = """\
import pytest

from shop.pricing import apply_discount, format_price


def test_discount_reduces_amount():
    assert apply_discount(200.0, 25) == 150.0


def test_discount_rejects_bad_percent():
    with pytest.raises(ValueError):
        apply_discount(10.0, 120)


def test_format_price_default_currency():
    assert format_price(3.5) == "3.50 EUR"


def test_format_price_other_currency():
    assert format_price(2, "USD") == "2.00 USD"
"""

TEST_CART = """\
import pytest

from shop import Cart


def test_add_and_count():
    cart = Cart()
    cart.add("pen", 1.5, 2)
    cart.add("ink", 4.0)
    assert cart.count() == 3


def test_add_rejects_zero_quantity():
    with pytest.raises(ValueError):
        Cart().add("pen", 1.5, 0)


def test_total_with_discount():
    cart = Cart()
    cart.add("pen", 10.0, 3)
    assert cart.total(10) == 27.0


def test_empty_cart_total():
    assert Cart().total() == 0.0
"""

TEST_TEXTUTIL = """\
from shop.textutil import initials, slugify


def test_slugify_words():
    assert slugify("Blue Fountain Pen!") == "blue-fountain-pen"


def test_initials():
    assert initials("ada lovelace") == "AL"
"""

FILES = {
    "shop/__init__.py": INIT,
    "shop/pricing.py": PRICING,
    "shop/cart.py": CART,
    "shop/textutil.py": TEXTUTIL,
    "tests/test_pricing.py": TEST_PRICING,
    "tests/test_cart.py": TEST_CART,
    "tests/test_textutil.py": TEST_TEXTUTIL,
    "pytest.ini": "[pytest]\ntestpaths = tests\n",
    "README.md": "# shop\n\nA tiny shop used to test Feature Deletion mining.\n",
}

LEAKY_COPIES = ["build/lib/shop/pricing.py", ".mypy_cache/3.11/shop/pricing.py", "shop.egg-info/SOURCES.py"]
"""Untracked, unignored copies of the original code in folders a snapshot must never contain."""


def git(root: Path, *args: str) -> str:
    identity = ["-c", "user.name=test", "-c", "user.email=test@localhost"]
    done = subprocess.run(["git", *identity, *args], cwd=root, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def build_shop_repo(root: Path) -> Path:
    """Write, commit (two commits) and litter the shop repository under `root`; return its path."""
    repo = root / "shop-repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for path, text in FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shop")
    (repo / "README.md").write_text(FILES["README.md"] + "\nSee tests/.\n")
    git(repo, "commit", "-qam", "readme")
    for path in LEAKY_COPIES:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(PRICING)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "shop"], cwd=repo, check=True, timeout=60, capture_output=True
    )
    return repo


_MINED: dict[str, tuple[Path, Path, list[str]]] = {}


APPLY_DISCOUNT = "shop-repo:shop/pricing.py::apply_discount"
"""The task id of the shop repository's `apply_discount` function."""


def mined_shop(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """Build and mine the shop repository once per test session: (repo, tasks file, progress lines).

    Every candidate is mined (nine tasks); the tests that read the result must not modify it.
    """
    if "shop" not in _MINED:
        from composer_prime.mining.config import MineConfig
        from composer_prime.mining.miner import Miner

        root = tmp_path_factory.mktemp("featdel-shop")
        repo = build_shop_repo(root)
        out = root / "out" / "tasks.jsonl"
        lines: list[str] = []
        # whole deletion: the grading suite's tasks (held-out files, FAIL_TO_PASS sets) were written against it
        config = MineConfig(repo=repo, out=out, test_timeout_s=120, min_body_lines=0, deletion="whole")
        Miner(config, log=lines.append).run()
        _MINED["shop"] = (repo, out, lines)
    return _MINED["shop"]
