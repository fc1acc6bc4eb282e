from minicalc.text import initials, shout


def test_shout():
    assert shout("hi") == "HI!"


def test_initials():
    assert initials("Ada Lovelace") == "AL"
