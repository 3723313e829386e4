"""A strict RFC 8259 check of JSON text that builds no values.

``json.loads`` will not do for the outbox builder: it accepts NaN and Infinity, recurses
(a deeply nested payload raises RecursionError) and turns integers into ``int`` (more than
4,300 digits raise ValueError). The Rust writer accepts exactly RFC 8259 text of any depth
and number length, and so does this: one pass, an explicit stack, regular expressions for
strings and numbers."""

from __future__ import annotations

import re

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+"')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?")
_LITERALS = ("true", "false", "null")


class JsonTextError(ValueError):
    """The text is not one JSON value; the message says where."""


def check_json_text(text: str) -> None:
    """Raises :class:`JsonTextError` unless ``text`` is exactly one JSON value (RFC 8259),
    with optional whitespace around it."""
    n = len(text)
    stack: list[str] = []
    i = _WS.match(text, 0).end()
    expect_value = True
    while True:
        if expect_value:
            if i >= n:
                raise JsonTextError(f"a value is missing at character {i}")
            c = text[i]
            if c == "{" or c == "[":
                close = "}" if c == "{" else "]"
                i = _WS.match(text, i + 1).end()
                if i < n and text[i] == close:
                    i += 1
                else:
                    stack.append(c)
                    if c == "{":
                        i = _key(text, i)
                    continue
            elif c == '"':
                m = _STRING.match(text, i)
                if m is None:
                    raise JsonTextError(f"a bad string at character {i}")
                i = m.end()
            elif c == "-" or c.isascii() and c.isdigit():
                m = _NUMBER.match(text, i)
                if m is None:
                    raise JsonTextError(f"a bad number at character {i}")
                i = m.end()
            else:
                for word in _LITERALS:
                    if text.startswith(word, i):
                        i += len(word)
                        break
                else:
                    raise JsonTextError(f"unexpected {c!r} at character {i}")
            expect_value = False
        # After a value: a separator, a close, or the end.
        i = _WS.match(text, i).end()
        if not stack:
            if i != n:
                raise JsonTextError(f"trailing characters at character {i}")
            return
        if i >= n:
            raise JsonTextError("the text ends inside an object or array")
        c = text[i]
        top = stack[-1]
        if c == ",":
            i = _WS.match(text, i + 1).end()
            if top == "{":
                i = _key(text, i)
            expect_value = True
        elif (c == "}" and top == "{") or (c == "]" and top == "["):
            stack.pop()
            i += 1
        else:
            raise JsonTextError(f"unexpected {c!r} at character {i}")


def _key(text: str, i: int) -> int:
    """Reads ``"name" :`` at ``i``; returns the index after the colon and its whitespace."""
    m = _STRING.match(text, i)
    if m is None:
        raise JsonTextError(f"an object key is missing at character {i}")
    i = _WS.match(text, m.end()).end()
    if i >= len(text) or text[i] != ":":
        raise JsonTextError(f"':' is missing at character {i}")
    return _WS.match(text, i + 1).end()
