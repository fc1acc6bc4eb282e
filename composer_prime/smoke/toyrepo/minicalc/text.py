"""Text helpers."""


def shout(text):
    """`text` in capitals, with an exclamation mark."""
    loud = text.upper()
    if not loud.endswith("!"):
        loud += "!"
    return loud


def initials(name):
    """The first letter of each word of `name`."""
    words = name.split()
    letters = [word[0] for word in words]
    return "".join(letters)
