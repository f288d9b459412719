"""Text from users, made safe to write into a log: one line, printable, bounded.

Names and paths that reach a log (a request path in the access log, a data
uri in an error, a line a job prints) could otherwise forge log lines with a
newline, rewrite a terminal with an escape sequence, or flood it. Control
characters become visible escapes (`\\n`, `\\x1b`), and text past `limit`
is cut with a marker saying how much was left out.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def printable(value: object, limit: int = 512) -> str:
    text = _CONTROL.sub(_escape, str(value))
    if len(text) > limit:
        text = f"{text[:limit]}...[{len(text) - limit} more chars]"
    return text
