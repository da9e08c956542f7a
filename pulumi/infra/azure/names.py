"""Azure's global resource names: letters and digits only."""

from __future__ import annotations

import re


def alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())
