"""Number helpers."""


def clamp(value, low, high):
    """Limit `value` to the range [low, high]."""
    if value < low:
        return low
    return min(value, high)


def double(value):
    """Twice `value`; numbers only."""
    if isinstance(value, str):
        raise TypeError("double needs a number")
    return value * 2
