"""Text helpers."""


def shout(text):
    """`text` in capitals, with an exclamation mark."""
    return text.upper() + "!"


def initials(name):
    """The first letter of each word of `name`."""
    return "".join(word[0] for word in name.split())
