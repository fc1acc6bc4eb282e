"""Number helpers."""


def clamp(value, low, high):
    return max(low, min(value, high))


def double(value):
    return value * 2
