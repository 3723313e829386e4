"""The canonical JSON form the outbox test vectors compare (clients/outbox/README.md)."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON bytes: keys sorted, no whitespace, UTF-8, strings
    escaped only where JSON requires (``"``, ``\\``, control characters: what
    ``JSON.stringify`` and serde_json write). For documents of objects and strings, as a
    DynamoDB Put is, this is RFC 8785 (JCS): the item's keys are ASCII, so code-point
    order is UTF-16 order."""
    return json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True
    ).encode("utf-8")
