"""Text helpers."""


def shout(text):
    return text.upper() + "!"


def initials(name):
    return "".join(word[0] for word in name.split())
