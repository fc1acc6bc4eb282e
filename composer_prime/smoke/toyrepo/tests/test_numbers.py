from minicalc.numbers import clamp, double


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_bounds():
    assert clamp(-3, 0, 10) == 0
    assert clamp(42, 0, 10) == 10


def test_double():
    assert double(21) == 42
