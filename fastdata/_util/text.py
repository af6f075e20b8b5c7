"""Names shown safely: a class or file name reaches a terminal with its control characters escaped."""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(text: object) -> str:
    r"""``text`` as one printable line: every character ``str.isprintable`` refuses is written as an escape.

    Newlines become ``\n``, ESC becomes ``\x1b``, other non-printables ``\xNN``/``\uNNNN``/``\UNNNNNNNN``,
    so a hostile folder name cannot colour, move or break the lines of ``pack``/``inspect``/``verify`` output.
    Printable text (accents, CJK) is left as it is.
    """
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
