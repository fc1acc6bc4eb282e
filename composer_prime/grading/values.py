"""A strict, type-tagged serialisation of Python values, for recording a feature's behaviour and replaying it.

Stdlib only: the miner's recorder and the grader's replay script carry a copy of this file into the box. Every value
becomes a JSON tree `[tag, ...]` built from the value's exact type, never from what the value says of itself
(`__eq__`, `__repr__`, `__reduce__` are never called):

    None -> ["none"]            bool -> ["bool", b]           int -> ["int", "12"]        float -> ["float", "0.1"]
    str -> ["str", s]            bytes -> ["bytes", base64]    complex -> ["complex", re, im]
    list / tuple -> [tag, [items]]     set / frozenset -> [tag, [items, canonical order]]
    dict -> ["dict", [[key, value], ...]] (an OrderedDict or Counter: ["dict", pairs, "collections:OrderedDict"])
    range -> ["range", start, stop, step]
    a class or function reachable as module:qualname -> ["type" | "fn", "module:qualname"]
    an exception -> ["exc", "module:qualname", [args]] (+ its exception bases' names, unless builtin)
    Decimal / Fraction -> ["decimal", s] / ["fraction", n, d]
    an enum member -> ["enum", "module:qualname", name] (+ its value, for a `str`, `int` or `float` enum)
    with `drain`, an iterator -> ["iter", [items]] (consumed, at most `MAX_ITEMS`)
    a date, time, datetime, timedelta or datetime.timezone -> ["date" | "time" | ..., its fields] (exact types)
    a compiled regex -> ["pattern", pattern, flags]     functools.partial -> ["partial", func, [args], [[name, value]]]
    an instance of a class reachable as module:qualname, with a plain `__dict__` or slots -> ["obj", "module:qualname",
    state] (the `__dict__`'s items and the slots that are set, as a dict)
    a tuple subclass (namedtuple) -> ["obj", "module:qualname", ["tuple", [items]]]

Anything else (iterators without `drain`, lambdas, open files and streams, flags with unnamed bits, cycles, deeper
than `MAX_DEPTH`, more than `MAX_NODES` nodes) raises `Unserialisable`. `same(expected, actual)` compares two trees on
the grader's side as a test's `==` would see them, never by calling the candidate's `__eq__`: tags and structure
exactly, except that ints, floats, bools, Decimals and Fractions are compared as `==` compares them (where either is a
float, to pytest.approx's default tolerance of the expected value), a `str`/`int`/`float` enum's member as its value,
a set and a frozenset alike, a list, a tuple and a drained iterator of the same items alike, and a namedtuple where a
tuple was recorded (a dict subclass is dumped as the dict of its stored items); dicts and sets regardless of order
(an expected OrderedDict in its order; a Counter less its zero counts), times and datetimes as `==` has them (fixed
offsets by offset, aware ones by their instant, `fold` ignored), exceptions by type (a subclass answers for its base),
instances by the public attributes the expected one has (what a test can observe: `obj.count`, not `obj._items`; a
re-implementation that keeps its state under other private names, or adds attributes, is the same; a replay reads a
public property back as the attribute it serves (`dump(..., properties=True)`), and rebuilds a recorded attribute
through the property's setter where the candidate's class serves it so (`load`); by all of them
when it has no public one, else any instance would pass), and an `OPAQUE` expected state (a deleted class's own
instances, laid out as the candidate chose) by class only.
"""

from __future__ import annotations

import base64
import datetime
import enum
import functools
import importlib
import io
import json
import operator
import re
import sys
import types
from collections import Counter, OrderedDict
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"_pathlib"}
"""Modules whose classes' slots are not a strict form: their layout is the Python version's, and some fill slots
lazily (a `pathlib.Path` caches its `_str` and `_hash` once asked), so two equal values would differ."""
_MAPPING_TYPES = {"collections:OrderedDict": OrderedDict, "collections:Counter": Counter}
"""The dict subclasses whose type a dump keeps (`["dict", pairs, name]`), so that a replay rebuilds the instance its
methods need (an LRU cache's `OrderedDict.move_to_end`); compared as dicts, as `==` compares them with one."""
_MAPPINGS = {kind: name for name, kind in _MAPPING_TYPES.items()}
MAX_DEPTH = 24
MAX_NODES = 20_000
_EXACT = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}


class Unserialisable(Exception):
    """The value has no strict serialisation (its type, its size or a cycle)."""


def _name(obj) -> str:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise Unserialisable(f"{type(obj).__name__} is not reachable by name")
    return f"{module}:{qualname}"


def resolve(name: str):
    """The object `module:qualname` names (imports the module)."""
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _reachable(obj) -> str:
    name = _name(obj)
    module = sys.modules.get(name.partition(":")[0])
    target = module
    try:
        for part in name.partition(":")[2].split("."):
            target = getattr(target, part)
    except AttributeError:
        target = None
    if target is not obj:
        raise Unserialisable(f"{name} does not resolve to the object")
    return name


def name_of(kind: type) -> str:
    """`module:qualname` of a class, or its plain qualified name where it has none to import it by."""
    try:
        return _reachable(kind)
    except Unserialisable:
        return f"{kind.__module__}:{kind.__qualname__}"


class _Walk:
    """One dump's state: nodes left, the containers being dumped (cycles), the classes dumped by name only, whether
    iterators are drained and whether public properties are read."""

    __slots__ = ("active", "budget", "drain", "opaque", "properties", "wasted")

    def __init__(self, opaque: dict[type, str], drain: bool, properties: bool):
        self.budget, self.active, self.opaque, self.drain = MAX_NODES, set(), opaque, drain
        self.properties, self.wasted = properties, 0


def dump(value, opaque_types: dict[type, str] | None = None, drain: bool = False, properties: bool = False):
    """The tagged tree of `value`; raises `Unserialisable`. Instances of a class in `opaque_types` (exactly) are dumped
    by the name given there only (`OPAQUE` state): the replay's live objects of a class feature, kept however the
    candidate chose and wherever it defined the class (a class re-exported from another module keeps the name the
    recording knows it by). `drain`: an iterator (a generator, `map`, an iterator class) is consumed, at most
    `MAX_ITEMS` items, into `["iter", [items]]` (the replay's answers; a recorder must not consume what the test is
    about to read). `properties`: an instance's state also holds the value of each public `property` of its class
    that its `__dict__` lacks (the replay's answers: `cart.lines` served from `self._lines` reads as the gold's
    stored `lines`); one whose getter raises or whose value has no strict form is left out."""
    return _dump(value, 0, _Walk(opaque_types or {}, drain, properties))


def is_iterator(value) -> bool:
    """Whether `value` is an iterator (what `dump(..., drain=True)` consumes); an open file or stream is not one."""
    return isinstance(value, Iterator) and not isinstance(value, io.IOBase)


def _builtin_number(value):
    """The plain `int`, `float` or `str` a subclass of one stands for (read with the builtin's own methods, never an
    override), or a numpy scalar's (`numpy.int64` subclasses no builtin; `.item()` is numpy's); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float(float.__repr__(value))
    if isinstance(value, str):
        return str.__str__(value)
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in _NUMPY_SCALARS:
        plain = value.item()
        return plain if type(plain) in (int, float, bool) else None
    return None


_NUMPY_SCALARS = frozenset(
    f"{kind}{bits}"
    for kind, sizes in (("int", (8, 16, 32, 64)), ("uint", (8, 16, 32, 64)), ("float", (16, 32, 64)))
    for bits in sizes
) | {"bool_", "bool"}


def _dump(value, depth: int, ctx: _Walk):
    ctx.budget -= 1
    if ctx.budget < 0 or depth > MAX_DEPTH:
        raise Unserialisable("too large or too deep")
    kind = type(value)
    opaque, active = ctx.opaque, ctx.active
    if kind in opaque:
        return ["obj", opaque[kind], OPAQUE]
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", repr(value)]
    if kind is complex:
        return ["complex", repr(value.real), repr(value.imag)]
    if kind is str:
        return ["str", value]
    if kind in (bytes, bytearray):
        return ["bytes" if kind is bytes else "bytearray", base64.b64encode(bytes(value)).decode("ascii")]
    if kind is range:
        return ["range", value.start, value.stop, value.step]
    if kind is Decimal:
        return ["decimal", str(value)]
    if kind is Fraction:
        return ["fraction", str(value.numerator), str(value.denominator)]
    if isinstance(value, type):
        return ["type", _reachable(value)]
    if kind in _TIMES:  # exact types: a date, time, datetime, timedelta or fixed-offset timezone by its fields
        return _dump_time(value, depth, ctx)
    if kind is re.Pattern:  # a compiled regex (a parser's cached `_match_re`): its text and flags are all it is
        return ["pattern", _dump(value.pattern, depth + 1, ctx), value.flags]
    if kind in (types.FunctionType, types.BuiltinFunctionType):
        return ["fn", _reachable(value)]
    if isinstance(value, enum.Enum):
        if isinstance(value, enum.Flag) and not _named_flag(value):  # `Perm(0o4000)` of an IntFlag: no name says it
            raise Unserialisable(f"{kind.__qualname__} value {value.value!r} has bits no member names")
        plain = _plain_enum(value)  # `class Level(str, Enum)`, IntEnum: equal to their value under `==`
        return ["enum", _reachable(kind), value.name] + ([_dump(plain, depth + 1, ctx)] if plain is not None else [])
    if isinstance(value, BaseException):
        try:
            args = [_dump(arg, depth + 1, ctx) for arg in value.args]
        except Unserialisable:
            args = []
        if kind.__module__ == "builtins":
            return ["exc", _name(kind), args]
        bases = [
            _name(base) for base in kind.__mro__[1:] if issubclass(base, BaseException) and "<" not in base.__qualname__
        ]
        return ["exc", _name(kind), args, bases]  # a subclass answers for its bases, as `except` and `pytest.raises` do
    if ctx.drain and is_iterator(value):
        return ["iter", _drained(value, depth, ctx)]
    if isinstance(value, io.IOBase):  # an open file or stream: its state is the OS's, not its attributes
        raise Unserialisable(f"{kind.__qualname__} is a stream")
    if id(value) in active:
        raise Unserialisable("a cycle")
    active.add(id(value))
    try:
        if kind is functools.partial:  # `partial(int_convert, 16)` in a converter table: its function and arguments
            return [
                "partial",
                _dump(value.func, depth + 1, ctx),
                [_dump(arg, depth + 1, ctx) for arg in value.args],
                [[name, _dump(arg, depth + 1, ctx)] for name, arg in value.keywords.items()],
            ]
        if kind in _EXACT:
            items = [_dump(item, depth + 1, ctx) for item in value]
            if kind in (set, frozenset):
                items.sort(key=lambda item: json.dumps(item, sort_keys=True))
            return [_EXACT[kind], items]
        if kind is dict:
            return [
                "dict",
                [[_dump(k, depth + 1, ctx), _dump(v, depth + 1, ctx)] for k, v in value.items()],
            ]
        if isinstance(value, tuple):
            return [
                "obj",
                _reachable(kind),
                ["tuple", [_dump(item, depth + 1, ctx) for item in value]],
            ]
        if isinstance(value, dict):  # Counter, OrderedDict, defaultdict: equal to a dict of the same items
            # the stored items, not what an overridden `items` says; an OrderedDict's in its own order, which
            # `move_to_end` changes and the dict underneath does not show
            pairs = OrderedDict.items(value) if kind is OrderedDict else dict.items(value)
            tree = ["dict", [[_dump(k, depth + 1, ctx), _dump(v, depth + 1, ctx)] for k, v in pairs]]
            return [*tree, _MAPPINGS[kind]] if kind in _MAPPINGS else tree
        plain = _builtin_number(value)
        if plain is not None:  # `class Money(float)`, numpy's float64 and int64: what `==` compares is the number
            return _dump(plain, depth + 1, ctx)
        if isinstance(value, (int, float, complex, str, bytes, bytearray, list, dict, set, frozenset)):
            raise Unserialisable(f"a subclass of a builtin ({kind.__qualname__})")
        state = getattr(value, "__dict__", None)
        slots = {} if kind.__module__.partition(".")[0] in _STDLIB else _slots(kind)
        if (type(state) is not dict and not slots) or kind.__module__ == "builtins":
            raise Unserialisable(f"{kind.__qualname__} has no plain state")
        state = dict(state) if type(state) is dict else {}
        for name, member in slots.items():  # semver's `Version(__slots__ = ("_major", ...))`: the slots that are set
            try:
                state[name] = member.__get__(value, kind)
            except AttributeError:
                continue
        tree = _dump(state, depth + 1, ctx)
        if ctx.properties:
            tree[1] += _read_properties(value, state, depth, ctx)
        return ["obj", _reachable(kind), tree]
    finally:
        active.discard(id(value))


MAX_ITEMS = 10_000
"""An iterator of more items than this has no strict form (a replay's answer that never ends is a mismatch)."""


def _drained(value, depth: int, ctx: _Walk) -> list:
    items = []
    for item in value:
        if len(items) == MAX_ITEMS:
            raise Unserialisable(f"an iterator of more than {MAX_ITEMS} items")
        items.append(_dump(item, depth + 1, ctx))
    return items


def _plain_enum(value: enum.Enum):
    """The `str`, `int` or `float` a member of an enum with that mixin is under `==` (its data, read through the
    builtin type, never through the member's own methods); None for a plain `Enum`."""
    for base in (str, int, float):
        if isinstance(value, base):
            return {str: str.__str__, int: int.__int__, float: float.__float__}[base](value)
    return None


def _named_flag(value: enum.Flag) -> bool:
    """Whether a flag's name says all of it: a member, members joined by `|`, or no name for the empty flag."""
    if value.name is None:
        return value.value == 0
    members = type(value).__members__
    return all(part in members for part in value.name.split("|"))


def _property(kind: type, name: str) -> property | None:
    """The `property` through which attribute lookup serves `name` on `kind`'s instances (the first class of its MRO
    that defines the name), or None."""
    for klass in kind.__mro__:
        if name in vars(klass):
            member = vars(klass)[name]
            return member if isinstance(member, property) else None
    return None


def _read_properties(value, state: dict, depth: int, ctx: _Walk) -> list:
    """`[name, value]` pairs of the public properties that `value`'s class, or a base of it from the same top-level
    package, defines and `state` lacks, read with their getters: what a test reading `obj.name` sees. A library
    base's properties (a pydantic model's `model_extra`) are the library's, not the feature's. A property left out
    gives back the nodes its dump took, so reading properties never makes a value that has a strict form lose it;
    past `MAX_NODES` nodes spent on properties left out, no more are read in this dump (the work stays bounded)."""
    package = type(value).__module__.partition(".")[0]
    names = {
        name
        for klass in type(value).__mro__
        if klass.__module__.partition(".")[0] == package and package not in _STDLIB
        for name, member in vars(klass).items()
        if isinstance(member, property) and not name.startswith("_") and name not in state
    }
    pairs = []
    for name in sorted(names):
        getter = _property(type(value), name)
        if getter is None or getter.fget is None:
            continue
        left = ctx.budget
        try:
            pairs.append([["str", name], _dump(getter.fget(value), depth + 2, ctx)])
        except Exception:  # noqa: BLE001 - a getter that raises, or a value without a strict form: not shown
            ctx.wasted += left - ctx.budget
            ctx.budget = left
            ctx.properties = ctx.wasted <= MAX_NODES
            if not ctx.properties:
                break
    return pairs


def _slots(kind: type) -> dict[str, types.MemberDescriptorType]:
    """The slots of `kind`'s instances (the member descriptors the classes of its MRO define), by attribute name. The
    empty `__slots__ = ()` of `collections.abc.MutableMapping` and other bases defines none: a `Cache(MutableMapping)`
    keeps all its state in its `__dict__`."""
    return {
        name: member
        for klass in reversed(kind.__mro__)
        for name, member in vars(klass).items()
        if isinstance(member, types.MemberDescriptorType) and member.__objclass__ is klass
    }


_TIMES = (datetime.date, datetime.time, datetime.datetime, datetime.timedelta, datetime.timezone)


def _dump_time(value, depth: int, ctx: _Walk):
    """`["date", y, m, d]`, `["time", H, M, S, us, tzinfo, fold]`, `["datetime", y, m, d, H, M, S, us, tzinfo, fold]`,
    `["timedelta", days, seconds, us]`, `["timezone", offset, name]` (`name` None: the default)."""
    if type(value) is datetime.timedelta:
        return ["timedelta", value.days, value.seconds, value.microseconds]
    if type(value) is datetime.timezone:
        name = value.tzname(None)
        default = name == datetime.timezone(value.utcoffset(None)).tzname(None)
        return [
            "timezone",
            _dump_time(value.utcoffset(None), depth + 1, ctx),
            None if default else name,
        ]
    if type(value) is datetime.date:
        return ["date", value.year, value.month, value.day]
    zone = _dump(value.tzinfo, depth + 1, ctx)
    clock = [value.hour, value.minute, value.second, value.microsecond, zone, value.fold]
    if type(value) is datetime.time:
        return ["time", *clock]
    return ["datetime", value.year, value.month, value.day, *clock]


def _load_time(tree):
    tag = tree[0]
    if tag == "timedelta":
        return datetime.timedelta(days=tree[1], seconds=tree[2], microseconds=tree[3])
    if tag == "timezone":
        offset = _load_time(tree[1])
        return datetime.timezone(offset) if tree[2] is None else datetime.timezone(offset, tree[2])
    if tag == "date":
        return datetime.date(*tree[1:4])
    *clock, zone, fold = tree[-6:]
    if tag == "time":
        return datetime.time(*clock, tzinfo=load(zone), fold=fold)
    return datetime.datetime(*tree[1:4], *clock, tzinfo=load(zone), fold=fold)


def load(tree):
    """The value a tagged tree describes (classes and functions are imported by name)."""
    tag = tree[0]
    if tag == "none":
        return None
    if tag == "bool":
        return bool(tree[1])
    if tag == "int":
        return int(tree[1])
    if tag == "float":
        return float(tree[1])
    if tag == "complex":
        return complex(float(tree[1]), float(tree[2]))
    if tag == "str":
        return str(tree[1])
    if tag in ("bytes", "bytearray"):
        data = base64.b64decode(tree[1])
        return data if tag == "bytes" else bytearray(data)
    if tag == "range":
        return range(tree[1], tree[2], tree[3])
    if tag == "decimal":
        return Decimal(tree[1])
    if tag == "fraction":
        return Fraction(int(tree[1]), int(tree[2]))
    if tag in ("type", "fn"):
        return resolve(tree[1])
    if tag == "enum":
        cls = resolve(tree[1])
        if issubclass(cls, enum.Flag) and (tree[2] is None or "|" in tree[2]):  # `IGNORECASE|DOTALL`; None: no flag
            return functools.reduce(operator.or_, (cls[name] for name in (tree[2] or "").split("|") if name), cls(0))
        return cls[tree[2]]
    if tag == "exc":
        return resolve(tree[1])(*[load(arg) for arg in tree[2]])
    if tag in ("list", "tuple", "set", "frozenset", "iter"):
        items = [load(item) for item in tree[1]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "iter": iter}[tag](items)
    if tag in ("date", "time", "datetime", "timedelta", "timezone"):
        return _load_time(tree)
    if tag == "pattern":
        return re.compile(load(tree[1]), tree[2])
    if tag == "partial":
        return functools.partial(load(tree[1]), *[load(arg) for arg in tree[2]], **{k: load(v) for k, v in tree[3]})
    if tag == "dict":
        items = {load(k): load(v) for k, v in tree[1]}
        return _MAPPING_TYPES[tree[2]](items) if len(tree) == 3 else items
    if tag == "obj":
        cls = resolve(tree[1])
        if tree[2][0] == "tuple":
            return tuple.__new__(cls, load(tree[2]))
        obj = cls.__new__(cls)
        slots = _slots(cls)
        for name, value in load(tree[2]).items():  # around the class's own `__setattr__` (an immutable `Version`)
            served = _property(cls, name)
            if name in slots:
                slots[name].__set__(obj, value)
            elif served is not None and served.fset is not None:
                served.fset(obj, value)  # a stored attribute the candidate's class serves through a property
            else:
                obj.__dict__[name] = value
        return obj
    raise ValueError(f"unknown value tag {tag!r}")


def same(expected, actual) -> bool:
    """Whether two tagged trees describe the same value (see the module docstring for what `same` means)."""
    if not isinstance(expected, list) or not isinstance(actual, list) or not expected or not actual:
        return False
    tag = expected[0]
    if tag == "enum" or actual[0] == "enum":
        return _same_enum(expected, actual)
    if tag in _NUMBERS and actual[0] in _NUMBERS:
        return _same_number(expected, actual)  # `0` for `0.0`, `Decimal("0.30")` for `0.3`, floats as pytest.approx
    if {tag, actual[0]} == {"set", "frozenset"} and len(actual) == len(expected) == 2:
        return _unordered(expected[1], actual[1])  # `{1} == frozenset({1})`
    if tag in _SEQUENCES and actual[:1] == ["obj"] and len(actual) == 3 and actual[2][:1] == ["tuple"]:
        return same(expected, actual[2])  # a namedtuple where a tuple was returned: equal, and it indexes alike
    if tag in _SEQUENCES and actual[0] in _SEQUENCES and len(actual) == len(expected) == 2:
        mine, theirs = expected[1], actual[1]  # a list for a tuple, a drained iterator for either: the same items
        return (
            isinstance(mine, list)
            and isinstance(theirs, list)
            and len(mine) == len(theirs)
            and all(map(same, mine, theirs))
        )
    if tag == "exc" and actual[0] == "exc" and len(actual) in (3, 4) and isinstance(actual[1], str):
        return expected[1] == actual[1] or (
            len(actual) == 4 and isinstance(actual[3], list) and expected[1] in actual[3]
        )
    if tag == "dict" and actual[0] == "dict" and len(actual) in (2, 3) and len(expected) in (2, 3):
        return _same_mapping(expected, actual)
    if tag in ("time", "datetime", "timezone") and actual[0] == tag and len(actual) == len(expected):
        return _same_time(expected, actual)
    if actual[0] != tag or len(actual) != len(expected):
        return False
    if tag == "complex":
        return same(["float", expected[1]], ["float", actual[1]]) and same(["float", expected[2]], ["float", actual[2]])
    if tag == "exc":
        return expected[1] == actual[1]
    if tag in ("set", "frozenset"):
        return _unordered(expected[1], actual[1])
    if tag == "pair":
        return same(expected[1], actual[1]) and same(expected[2], actual[2])
    if tag == "obj":
        if expected[1] != actual[1]:
            return False
        if expected[2] == OPAQUE:
            return True
        if expected[2][:1] == ["dict"] and actual[2][:1] == ["dict"]:
            return _public_subset(expected[2][1], actual[2][1])
        return same(expected[2], actual[2])
    return expected == actual


PENDING = ["iter", None]
"""A recorded result left for the gold's lone replay to fill in: an iterator, which the recorder must not consume
before the test reads it (`mining.behaviour.with_drained_results`). Never the same as any answer."""
OPAQUE = ["opaque"]
"""An instance's state on the expected side that `same` does not compare (its class still is): how an instance of a
class the candidate writes keeps its state is the candidate's choice."""


def _public_subset(expected: list, actual: list) -> bool:
    """Every public attribute of the expected instance's state is in the actual one's, the same value; for an instance
    with no public attribute at all (semver's `Version`, all in `_major` ... slots), every attribute: compared by
    class alone, any instance of it would pass."""
    found = {pair[0][1]: pair[1] for pair in actual if pair[0][:1] == ["str"]}
    private_too = all(key[:1] == ["str"] and str(key[1]).startswith("_") for key, _ in expected)
    for key, value in expected:
        if key[:1] != ["str"] or not isinstance(key[1], str):
            return False
        if key[1].startswith("_") and not private_too:
            continue
        if key[1] not in found or not same(value, found[key[1]]):
            return False
    return True


def _same_mapping(expected: list, actual: list) -> bool:
    """Dicts as `==` has them: the same items in any order; an expected OrderedDict in its order (what iterating it
    shows), whatever the answer's type; a Counter less its zero counts, as `Counter.__eq__` (3.10+) ignores them."""
    mine, theirs = expected[1], actual[1]
    if not isinstance(mine, list) or not isinstance(theirs, list):
        return False
    if expected[2:] == ["collections:Counter"]:
        mine, theirs = ([p for p in pairs if not _zero(p)] for pairs in (mine, theirs))
    if expected[2:] == ["collections:OrderedDict"]:
        return len(mine) == len(theirs) and all(
            isinstance(b, list) and len(b) == 2 and same(a[0], b[0]) and same(a[1], b[1])
            for a, b in zip(mine, theirs, strict=True)
        )
    return _unordered([["pair", *pair] for pair in mine], [["pair", *pair] for pair in theirs], by_key=True)


def _zero(pair) -> bool:
    return isinstance(pair, list) and len(pair) == 2 and pair[1] in (["int", "0"], ["float", "0.0"], ["bool", False])


def _same_time(expected: list, actual: list) -> bool:
    """Times and datetimes as `==` has them: naive ones by their fields (not `fold`); aware ones with fixed-offset
    zones by the instant (the offset, not the zone's name); with any other tzinfo, fields and tzinfo alike. A fixed
    offset equals another of the same offset, whatever its name."""
    if expected[0] == "timezone":
        return same(expected[1], actual[1])
    mine, theirs = expected[-2], actual[-2]  # [..., hour, minute, second, microsecond, tzinfo, fold]
    if mine == ["none"] or theirs == ["none"]:
        return mine == theirs and expected[:-1] == actual[:-1]
    if mine[:1] == ["timezone"] and theirs[:1] == ["timezone"]:
        return _instant(expected) == _instant(actual)
    return expected[:-2] == actual[:-2] and same(mine, theirs)


def _instant(tree: list) -> datetime.timedelta:
    """The UTC instant of a time or datetime tree with a fixed offset (a time on 2000-01-01), built from its ints, as
    the time since `datetime.min`: a timedelta, so that `datetime.max` at a negative offset does not overflow."""
    day = tree[1:4] if tree[0] == "datetime" else [2000, 1, 1]
    hour, minute, second, micro = tree[-6:-2]
    offset = _load_time(tree[-2][1])
    return datetime.datetime(*day, hour, minute, second, micro) - datetime.datetime.min - offset


def holds_state_of(tree, cls: str) -> bool:
    """Whether `tree` holds an instance of `cls` (`module:qualname`) with any state."""
    if not isinstance(tree, list):
        return False
    if len(tree) == 3 and tree[0] == "obj" and tree[1] == cls:
        return tree[2] != ["dict", []]
    return any(holds_state_of(item, cls) for item in tree)


def opaque(tree, cls: str):
    """`tree` with the state of every instance of `cls` replaced by `OPAQUE`."""
    if not isinstance(tree, list):
        return tree
    if len(tree) == 3 and tree[0] == "obj" and tree[1] == cls:
        return ["obj", cls, OPAQUE]
    return [opaque(item, cls) for item in tree]


_NUMBERS = frozenset({"int", "float", "bool", "decimal", "fraction"})
_SEQUENCES = frozenset({"list", "tuple", "iter"})
REL_TOL, ABS_TOL = Fraction(1, 10**6), Fraction(1, 10**12)
"""pytest.approx's default tolerance, applied where either side is a float: `|a - b| <= max(REL_TOL * |expected|,
ABS_TOL)`."""
_NUMBER = re.compile(
    r"[+-]?(\d{1,400}(\.\d{0,400})?|\.\d{1,400})([eE][+-]?\d{1,3})?|[+-]?(inf|infinity|s?nan)", re.IGNORECASE
)
"""The text of a number whose exact value is cheap to build: at most 400 digits each side, an exponent below 1000
(the host compares what the candidate's process wrote: `Fraction("1e999999999")` would take hours); a float's or a
Decimal's infinities and NaNs."""


def _exact(tree: list) -> Fraction | float | None:
    """The exact value of a tagged int, float, bool, Decimal or Fraction (an infinity or NaN as a float); None where
    the text is malformed or too long to build cheaply."""
    if tree[0] == "bool":
        return Fraction(int(tree[1])) if isinstance(tree[1], bool) and len(tree) == 2 else None
    texts = tree[1:3] if tree[0] == "fraction" else tree[1:2]
    if len(tree) != len(texts) + 1 or not all(isinstance(t, str) and _NUMBER.fullmatch(t) for t in texts):
        return None
    if tree[0] == "fraction":
        if "." in texts[0] + texts[1] or "e" in (texts[0] + texts[1]).lower() or not texts[1].strip("+-0"):
            return None
        return Fraction(int(texts[0]), int(texts[1]))
    text = texts[0].lower()
    if text.lstrip("+-") in ("inf", "infinity", "nan", "snan"):
        return float(text.replace("infinity", "inf").replace("snan", "nan"))
    return Fraction(text)


def _same_number(expected: list, actual: list) -> bool:
    """Two numbers as the tests' `==` compares them, exactly (`1` for `True`, `Decimal("0.30")` for `Fraction(3,
    10)`), and to pytest.approx's default tolerance where either is a float; a NaN answers a NaN. The same tag and
    text is the same number, however long (a 500-digit int)."""
    if expected == actual:
        return True
    try:
        a, b = _exact(expected), _exact(actual)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        return False
    if a is None or b is None:
        return False
    if isinstance(a, float) or isinstance(b, float):  # an infinity or a NaN on either side
        return a == b or (a != a and b != b)  # noqa: PLR0124 - NaN is the one value unequal to itself
    if a == b:
        return True
    return "float" in (expected[0], actual[0]) and abs(a - b) <= max(REL_TOL * abs(a), ABS_TOL)


def _same_enum(expected: list, actual: list) -> bool:
    """A member of a `str`, `int` or `float` enum is its value under `==`, either way round (`Level.HIGH` for `"high"`,
    `"high"` for `Level.HIGH`); a plain `Enum`'s member only itself."""
    if expected[:1] == actual[:1] == ["enum"] and expected[1:3] == actual[1:3]:
        return True
    mine = expected[3] if expected[0] == "enum" and len(expected) == 4 else expected
    theirs = actual[3] if actual[0] == "enum" and len(actual) == 4 else actual
    return (
        (mine is not expected or theirs is not actual) and "enum" not in (mine[:1] + theirs[:1]) and same(mine, theirs)
    )


MAX_INEXACT = 64
"""At most this many items of a set or dict are matched pairwise (an int for a float, a public-attribute subset):
the rest must match exactly, by their canonical text. The candidate's process chooses the answer's order, and a
first-match scan over every pair is quadratic (a 5000-item set in reverse order held the host 11.6 s)."""


def _key(tree) -> str:
    return json.dumps(tree, sort_keys=True)


def _unordered(expected: list, actual: list, by_key: bool = False) -> bool:
    """Whether two lists of trees hold the same items in any order (`by_key`: dict pairs `["pair", key, value]`, matched
    by key first). Identical items match by their canonical text in linear time; at most `MAX_INEXACT` are left to
    match pairwise."""
    if len(expected) != len(actual):
        return False
    index = (lambda tree: _key(tree[1])) if by_key else _key
    pool: dict[str, list] = {}
    for item in actual:
        pool.setdefault(index(item), []).append(item)
    inexact = []
    for item in expected:
        bucket = pool.get(index(item))
        if not bucket:
            inexact.append(item)
        elif by_key:
            if not same(item, bucket.pop()):
                return False
        else:
            bucket.pop()  # the same canonical text: the same value
    left = [item for bucket in pool.values() for item in bucket]
    if len(inexact) > MAX_INEXACT:
        return False
    for item in inexact:
        match = next((i for i, other in enumerate(left) if same(item, other)), None)
        if match is None:
            return False
        left.pop(match)
    return True
