"""What the replay no longer holds against an honest fix (issue 39, line 4), and that none of it lets a forgery
through: numbers as `==` and pytest.approx compare them, `str`/`int` enums by value, a list for a tuple, iterators
drained (bounded), an exception class the gold adds by the nearest base the starting tree has, no result compared
where the gold returned None, no argument compared that the gold left alone; `mining.behaviour.blind` judges
with the same rules."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from composer_prime.grading import values
from composer_prime.grading.behaviour import RecordedCall, mismatch
from composer_prime.mining.behaviour import blind, exception_floor, existed_before, floored


def same(a, b) -> bool:
    return values.same(values.dump(a), values.dump(b, drain=True))


class Level(str, enum.Enum):  # noqa: UP042 - the red team's shape (a StrEnum is `Tone`)
    HIGH = "high"
    LOW = "low"


class Rank(enum.IntEnum):
    GOLD = 1
    SILVER = 2


class Tone(enum.StrEnum):
    SOFT = "soft"


class Colour(enum.Enum):
    RED = "red"


def test_numbers_compare_as_equality_and_floats_as_pytest_approx() -> None:
    """`Decimal("0.30")` and `Fraction(3, 10)` answer each other exactly (as `==`); a float answers within
    pytest.approx's default tolerance of the expected value (rel 1e-6, abs 1e-12), whatever the other side's type."""
    assert same(Decimal("3.50"), Decimal("3.5")) and same(Decimal("0.5"), Fraction(1, 2)) and same(150.0, Decimal(150))
    assert same(Fraction(1, 3), 1 / 3) and same(0.3, Decimal("0.30")) and same(2**0.5, 1.4142135)
    assert not same(Decimal("0.30"), Fraction(1, 3)) and not same(Fraction(1, 3), Decimal("0.3333333"))
    assert (
        not same(2**0.5, 1.41421) and not same(1, 2) and not same(Decimal("NaN"), 1) and same(Decimal("-inf"), -1e999)
    )
    assert same(True, Decimal(1)) and not same("0.3", Decimal("0.3"))
    assert not values.same(["decimal", "1E+99999"], ["decimal", "1.0E+99999"])  # too long to build: different
    assert same(10**500, 10**500) and not same(10**500, 10**500 + 1)  # the same text is the same number


def test_a_forged_number_of_any_tag_costs_bounded_work() -> None:
    """A Decimal or Fraction the candidate's process wrote is built only from at most 400 digits and a 3-digit
    exponent: past that it is a different answer, at once."""
    code = (
        "import time; from composer_prime.grading import values; t = time.monotonic()\n"
        "print(values.same(['decimal', '1.5'], ['decimal', '1E+99999999']),"
        " values.same(['fraction', '1', '2'], ['fraction', '1' * 10**6, '2']),"
        " values.same(['float', '0.5'], ['decimal', '9' * 10**6]), time.monotonic() - t < 2)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert run.stdout.split() == ["False", "False", "False", "True"], run.stderr[-800:]


def test_str_and_int_enums_are_their_value_both_ways_and_a_plain_enum_is_itself() -> None:
    assert values.dump(Level.HIGH) == ["enum", f"{__name__}:Level", "HIGH", ["str", "high"]]
    assert same("high", Level.HIGH) and same(Level.HIGH, "high") and same(Rank.GOLD, 1) and same(1.0, Rank.GOLD)
    assert same(Tone.SOFT, "soft") and same("soft", Tone.SOFT) and not same(Tone.SOFT, "loud")
    assert not same("low", Level.HIGH) and not same(Level.HIGH, Level.LOW) and not same(Rank.GOLD, 2)
    assert same(Colour.RED, Colour.RED) and not same("red", Colour.RED) and not same(Colour.RED, "red")
    assert values.load(values.dump(Level.HIGH)) is Level.HIGH
    assert same(Level.HIGH, Level.HIGH) and values.same(["enum", f"{__name__}:Level", "HIGH"], values.dump(Level.HIGH))


def test_sequences_answer_each_other_and_iterators_drain_within_a_bound() -> None:
    def evens(items):
        yield from (item for item in items if item % 2 == 0)

    assert same((1, 2), [1, 2]) and same([1, 2], (1, 2)) and same([2, 4], evens([1, 2, 3, 4])) and same((1,), iter([1]))
    assert same([[1, 2]], map(list, [(1, 2)])) and not same([2, 4], evens([2])) and not same([1], iter([1.5]))
    assert not same({"a": 1}, iter([("a", 1)])) and not same([1, 2], {1, 2})
    with pytest.raises(values.Unserialisable, match="more than 10000 items"):
        values.dump(iter(range(10**9)), drain=True)
    with pytest.raises(values.Unserialisable):
        values.dump(evens([2]))  # the recorder's dump never consumes one
    with open(__file__) as stream:
        assert values.is_iterator(evens([])) and not values.is_iterator([1]) and not values.is_iterator(stream)
    assert not values.same(values.PENDING, values.PENDING) and not values.same(values.PENDING, ["iter", []])


def call(result=None, raised=None, args=(), after=None) -> RecordedCall:
    args = [values.dump(arg) for arg in args]
    return RecordedCall(
        target="m:f",
        args=args,
        result=values.dump(result) if raised is None else None,
        raised=values.dump(raised) if raised is not None else None,
        args_after=[values.dump(arg) for arg in after] if after is not None else args,
    )


def answer(result=None, raised=None, after=()) -> dict:
    found = {"raised": values.dump(raised)} if raised is not None else {"result": values.dump(result, drain=True)}
    return found | {"args_after": [values.dump(arg) for arg in after], "kwargs_after": {}}


def test_a_result_where_the_gold_gave_none_is_not_compared_but_a_raise_is_a_raise() -> None:
    """`Cart.add` returning `self` where the gold returns None: any answer, even one without a strict form; a raise
    where the gold returned is still wrong, and so is an answer where the gold raised."""
    gold = call(None, args=[[1]])
    assert mismatch(gold, answer({"cart": 1}, after=[[1]])) is None
    assert (
        mismatch(gold, {"result": ["unserialisable", "x"], "args_after": [values.dump([1])], "kwargs_after": {}})
        is None
    )
    assert "raised" in mismatch(gold, answer(raised=ValueError("x"), after=[[1]]))
    assert "expected to raise" in mismatch(call(raised=ValueError("x"), args=[1]), answer(None, after=[1]))
    assert "expected" in mismatch(
        call(5, args=[1]), {"result": ["unserialisable", "x"], "args_after": [["int", "1"]], "kwargs_after": {}}
    )


def test_an_argument_the_gold_left_alone_is_the_candidates_and_one_it_changed_is_compared() -> None:
    """An in-place sort no test observes (the gold sorted a copy); an argument the gold changed must be changed
    alike."""
    copy = call(2, args=[[3, 1, 2]])
    assert mismatch(copy, answer(2, after=[[1, 2, 3]])) is None
    in_place = call(None, args=[[3, 1, 2]], after=[[1, 2, 3]])
    assert mismatch(in_place, answer(None, after=[[1, 2, 3]])) is None
    assert "in-place" in mismatch(in_place, answer(None, after=[[3, 1, 2]]))
    assert "in-place" in mismatch(in_place, answer(None, after=[[1, 2]]))
    # the same by keyword: `median(values=[3, 1, 2])`
    by_name = call(2).model_copy(update={"kwargs": {"values": values.dump([3, 1, 2])}})
    left = by_name.model_copy(update={"kwargs_after": by_name.kwargs})
    sorted_in_place = {"values": values.dump([1, 2, 3])}
    assert mismatch(left, answer(2) | {"kwargs_after": sorted_in_place}) is None
    changed = by_name.model_copy(update={"result": ["none"], "kwargs_after": sorted_in_place})
    assert mismatch(changed, answer(None) | {"kwargs_after": sorted_in_place}) is None
    assert "in-place" in mismatch(changed, answer(None) | {"kwargs_after": by_name.kwargs})


class PercentError(ValueError):
    pass


class ShopError(Exception):
    pass


class DiscountError(ShopError, ValueError):
    pass


def test_an_exception_the_gold_adds_is_wanted_as_its_nearest_base_the_starting_tree_has(tmp_path: Path) -> None:
    """The gold adds `class PercentError(ValueError)` (no starting file defines it): any `ValueError` answers for it,
    as the tests' `pytest.raises(ValueError)` does; a class the starting tree already had is still wanted as such
    (or a subclass); builtins and modules outside the repository always existed."""
    gold = tmp_path / "gold"
    (gold / "shop").mkdir(parents=True)
    (gold / "shop" / "errors.py").write_text(
        "class ShopError(Exception):\n    pass\n\n\nclass PercentError(ValueError):\n    pass\n"
    )
    starting = {"shop/errors.py": "class ShopError(Exception):\n    class Inner(Exception):\n        pass\n"}
    existed = existed_before(gold, starting.get, ["."])
    assert existed("shop.errors:ShopError") and existed("shop.errors:ShopError.Inner")
    assert not existed("shop.errors:PercentError") and not existed("shop.errors:Missing")
    assert existed("builtins:ValueError") and existed("json.decoder:JSONDecodeError")
    assert not existed_before(gold, {}.get, ["."])("shop.errors:ShopError")  # a file the starting tree lacks

    tree = ["exc", "shop.errors:PercentError", [["int", "120"]], ["builtins:ValueError", "builtins:Exception"]]
    assert exception_floor(tree, existed) == ["exc", "builtins:ValueError", [["int", "120"]]]
    sub = [
        "exc",
        "shop.errors:DiscountError",
        [],
        ["shop.errors:ShopError", "builtins:ValueError", "builtins:Exception"],
    ]
    assert exception_floor(sub, existed) == [
        "exc",
        "shop.errors:ShopError",
        [],
        ["builtins:ValueError", "builtins:Exception"],
    ]
    kept = ["exc", "shop.errors:ShopError", [], ["builtins:Exception"]]
    assert exception_floor(kept, existed) is kept

    recorded = floored([call(raised=PercentError(120), args=[120])], lambda name: name.startswith("builtins:"))[0]
    assert mismatch(recorded, answer(raised=ValueError("bad"), after=[120])) is None
    assert mismatch(recorded, answer(raised=PercentError(1), after=[120])) is None
    assert "expected to raise" in mismatch(recorded, answer(raised=TypeError("bad"), after=[120]))
    assert "expected to raise" in mismatch(recorded, answer(raised=Exception("bad"), after=[120]))
    strict = floored([call(raised=PercentError(120), args=[120])], lambda name: True)[0]
    assert "expected to raise" in mismatch(strict, answer(raised=ValueError("bad"), after=[120]))


def test_blind_judges_with_the_relaxed_comparison() -> None:
    """A stub that returns None everywhere is refused where the gold returned None everywhere; a call the gold
    answered with None no longer tells a constant apart (`return 5` replays `f(1) -> None, f(2) -> 5`), nor do
    answers within pytest.approx's tolerance, nor a str enum and its value; a list for a tuple is one value."""
    assert blind([call(None, args=[1]), call(None, args=[2])]) == "returns None"
    assert blind([call(None, args=[1]), call(5, args=[2])]).startswith("returns the same value")
    assert blind([call(1.0, args=[1]), call(1.0000001, args=[2])]).startswith("returns the same value")
    assert blind([call("high", args=[60]), call(Level.HIGH, args=[70])]).startswith("returns the same value")
    assert blind([call((1, 2), args=[1]), call([1, 2], args=[2])]).startswith("returns the same value")
    assert blind([call(None, args=[1]), call([7], args=[[7]])]) == "returns its argument #0"
    assert blind([call(1.0, args=[1]), call(1.001, args=[2])]) is None
    assert blind([call(None, args=[1]), call(raised=ValueError("x"), args=[2])]) is None  # which raises: knowledge
    assert blind([call(None, args=[1]), call(5, args=[1])]) is None  # one input and its answer


ALWAYS_EQUAL = ["obj", "shop.pricing:Exact", ["dict", []]]


def test_forgeries_still_fail_the_relaxed_comparison() -> None:
    """A constant stub, the unfixed code's answers, an object equal to anything and a frame oracle (which, with no
    test up the stack, returns None) fail calls whose gold answered a value, under every relaxation: a tolerance
    past pytest.approx's, another member of a str enum, a list of other items, a raise where a value was wanted."""
    calls = [
        call(150.0, args=[200.0, 25]),
        call(Decimal("3.50"), args=[["1.10", "2.40"]]),
        call("high", args=[60]),
        call((1, 9), args=[[9, 1, 5]]),
        call([2, 4], args=[[1, 2, 3, 4]]),
        call(raised=PercentError(5), args=[-5]),
    ]
    calls[5] = floored([calls[5]], lambda name: name.startswith("builtins:"))[0]
    forged = {
        "constant": [answer(150.0, after=c.args and [values.load(a) for a in c.args]) for c in calls],
        "unfixed": [
            answer(v, after=[values.load(a) for a in c.args])
            for c, v in zip(calls, [150.0002, Decimal("3.6"), Level.LOW, (9, 1), iter([1, 2, 3, 4]), 5], strict=True)
        ],
        "frame-oracle": [answer(None, after=[values.load(a) for a in c.args]) for c in calls],
    }
    for name, answers in forged.items():
        wrong = [i for i, (c, a) in enumerate(zip(calls, answers, strict=True)) if mismatch(c, a) is not None]
        assert wrong == ([1, 2, 3, 4, 5] if name == "constant" else [0, 1, 2, 3, 4, 5]), (name, wrong)
    for c in calls[:5]:
        assert "expected" in mismatch(c, {"result": ALWAYS_EQUAL, "args_after": c.args, "kwargs_after": {}})


def test_subclasses_of_builtin_numbers_and_numpy_scalars_answer_as_their_value() -> None:
    """`class Money(float)`, numpy's `float64`/`int64` (what `np.round`, `np.clip` return): a test compares them with
    `==` as numbers, so the replay does; read with the builtin's own methods, so an override of `__eq__` or
    `__repr__` changes nothing (an "equal to anything" subclass still has to hold the right number)."""
    import numpy as np

    from composer_prime.grading import values

    class Money(float):
        def __eq__(self, other: object) -> bool:  # a forger's: equal to anything
            return True

        def __repr__(self) -> str:
            return "Money(?)"

    class Count(int):
        pass

    assert values.same(values.dump(3.25), values.dump(Money(3.25)))
    assert not values.same(values.dump(3.25), values.dump(Money(9.0)))
    assert values.same(values.dump(7), values.dump(Count(7))) and values.same(values.dump(7), values.dump(np.int64(7)))
    assert values.same(values.dump(0.5), values.dump(np.float64(0.5)))
    assert not values.same(values.dump(7), values.dump(np.int64(8)))
    assert values.dump(np.bool_(True)) == values.dump(True)


class StoredCart:
    """The gold's layout: `lines` stored on the instance."""

    def __init__(self) -> None:
        self.lines: list = []

    def add(self, name, price, quantity=1) -> None:  # type: ignore[no-untyped-def]
        self.lines.append((name, price, quantity))


class ServedCart:
    """An honest re-implementation: `lines` served by a property over `_lines`, with a setter."""

    def __init__(self) -> None:
        self.lines = []

    @property
    def lines(self) -> list:
        return self._lines

    @lines.setter
    def lines(self, value) -> None:  # type: ignore[no-untyped-def]
        self._lines = list(value)

    @property
    def broken(self) -> int:  # a getter that raises is left out of the answer, not a failed dump
        raise RuntimeError("not now")

    @property
    def stream(self):  # type: ignore[no-untyped-def]  # a value without a strict form: left out too
        return __import__("io").StringIO()

    @property
    def everything(self) -> list:  # past the node budget: left out, and the nodes it took given back
        return list(range(values.MAX_NODES))

    @property
    def itself(self):  # type: ignore[no-untyped-def]  # a cycle: left out
        return self

    def add(self, name, price, quantity=1) -> None:  # type: ignore[no-untyped-def]
        self._lines.append((name, price, quantity))


class ReadOnlyCart:
    """`lines` served by a property without a setter: the recorded `lines` has nowhere to go."""

    def __init__(self) -> None:
        self._lines: list = []

    @property
    def lines(self) -> list:
        return self._lines


def as_class(tree: list, cls: type) -> list:
    """An `obj` tree recorded for the gold's class, named as the candidate's class of the same name would be."""
    return ["obj", f"{__name__}:{cls.__qualname__}", tree[2]]


def test_an_attribute_a_property_serves_is_rebuilt_through_its_setter_and_read_back() -> None:
    """The red team's honest `Cart` keeps `lines` behind a `@property` with a setter: the replay rebuilds `self`
    from the gold's recorded `lines` through the setter, and reads `lines` back through the getter, so it answers as
    the gold; a getter that raises or gives a value without a strict form is left out. Without the read-back (the
    recorder's dump) the answer lacks `lines` and fails; a wrong order still fails."""
    gold = StoredCart()
    gold.add("pen", 1.5, 2)
    before = as_class(values.dump(gold), ServedCart)
    cart = values.load(before)
    assert type(cart) is ServedCart and cart._lines == [("pen", 1.5, 2)] and "lines" not in vars(cart)
    cart.add("ink", 4.0)
    gold.add("ink", 4.0)
    after = as_class(values.dump(gold), ServedCart)
    answered = values.dump(cart, properties=True)
    assert values.same(after, answered), answered
    assert [pair[0][1] for pair in answered[2][1]] == ["_lines", "lines"], answered  # the other four left out
    assert not values.same(after, values.dump(cart))  # potent: the recorder's dump has no `lines` to compare
    recorded = RecordedCall(target="m:Cart.add", args=[before, ["str", "ink"], ["float", "4.0"]], result=["none"])
    recorded = recorded.model_copy(update={"args_after": [after, ["str", "ink"], ["float", "4.0"]]})
    reply = {"result": ["none"], "args_after": [answered, ["str", "ink"], ["float", "4.0"]], "kwargs_after": {}}
    assert mismatch(recorded, reply) is None
    cart._lines.reverse()  # newest first: `cart.lines` shows another order, which a test can see
    wrong = reply | {"args_after": [values.dump(cart, properties=True), ["str", "ink"], ["float", "4.0"]]}
    assert "in-place" in mismatch(recorded, wrong)
    # a property without a setter: the recorded value stays in `__dict__`, shadowed, and the getter finds nothing
    read_only = values.load(as_class(values.dump(gold), ReadOnlyCart))
    with pytest.raises(AttributeError):
        read_only.lines  # noqa: B018


@dataclasses.dataclass(frozen=True)
class Span:
    lo: int
    hi: int

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield self.lo
        yield self.hi


def test_what_a_test_sees_as_different_stays_different() -> None:
    """The honest-looking fixes the red team scored 0 that the replay keeps at 0 (docs/grading.md): a frozen
    dataclass where the gold returns a tuple (`span(v) == (1, 3)`, `span(v)[0]` fail), a numpy array where the gold
    returns a list (`assert evens(v) == [2, 4]` raises: the array's `==` is elementwise), `Cart.add` prepending where
    the gold appends (`cart.lines` in another order)."""
    import numpy as np

    assert not same((1, 3), Span(1, 3)) and Span(1, 3) != (1, 3)
    with pytest.raises(values.Unserialisable):
        values.dump(np.array([2, 4]), drain=True, properties=True)
    gold = call(None, args=[StoredCart()])
    gold = gold.model_copy(update={"args_after": [values.dump(_filled(("pen", 1.5, 2), ("ink", 4.0, 1)))]})
    assert "in-place" in mismatch(gold, answer(None, after=[_filled(("ink", 4.0, 1), ("pen", 1.5, 2))]))
    assert mismatch(gold, answer(None, after=[_filled(("pen", 1.5, 2), ("ink", 4.0, 1))])) is None


def _filled(*lines: tuple) -> StoredCart:
    cart = StoredCart()
    cart.lines = list(lines)
    return cart


def test_a_mismatch_never_names_what_the_gold_answered() -> None:
    """red40's R2: the reason goes on the trace, and a later rollout of the task read the recorded answers there (a
    lookup table scored 1.0). The candidate's own answer is shown; the recorded result and exception are not."""
    wrong_value = mismatch(call(27.125, args=[3]), answer(26.5, after=[3]))
    wrong_raise = mismatch(call(raised=KeyError("sku-7781"), args=[3]), answer(raised=ValueError("mine"), after=[3]))
    raised_instead = mismatch(call(27.125, args=[3]), answer(raised=ValueError("mine"), after=[3]))
    for reason in (wrong_value, wrong_raise, raised_instead):
        assert reason is not None and "27.125" not in reason and "KeyError" not in reason and "sku-7781" not in reason
    assert "26.5" in wrong_value and "ValueError" in wrong_raise
