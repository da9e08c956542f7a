"""Azure resource names: global ones take letters and digits only; some have a length."""

from __future__ import annotations

import hashlib
import re


def alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def bounded(name: str, limit: int) -> str:
    """`name` itself when it fits `limit`, else its start and 8 hex digits of its sha256
    (a long name stays unique and stays the same from one `pulumi up` to the next)."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
