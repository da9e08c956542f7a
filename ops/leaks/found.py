"""A leftover of a stack (`Leak`), what it costs (`Cost`) and the report `fab leaks` prints.

What the clouds return (names, tags, ids) is data from outside: every such string is
printed through `ops.terminal_text.printable`, so a control character, an ANSI escape
or a terminal hyperlink in a tag reaches the terminal as visible text, never as an
effect; the report is plain text, never rich markup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ops.terminal_text import printable
from stack import catalog

HOURS_PER_MONTH = 730  # the clouds' own month for hourly prices
SHOWN_CHARACTERS = 80  # of one name or tag from the cloud: a tag can hold 256
SHOWN_ID_CHARACTERS = 300  # of an id: an Azure resource id, whole, is what deletes it

T = TypeVar("T")


class LeakCheckError(RuntimeError):
    """The cloud could not be asked, or did not answer in time: nothing is proven."""


@dataclass(frozen=True)
class Cost:
    """What one leftover bills: per hour, per month, or unknown, and on what basis."""

    usd_per_hour: float | None = None
    usd_per_month: float | None = None
    basis: str = ""
    """Where the figure comes from, or why there is none."""

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None or self.usd_per_month is not None

    def said(self) -> str:
        if self.usd_per_hour is not None:
            return f"${self.usd_per_hour:,.3f}/h ({self.basis})"
        if self.usd_per_month is not None:
            return f"${self.usd_per_month:,.2f}/month ({self.basis})"
        return f"cost unknown: {self.basis}"


@dataclass(frozen=True)
class Leak:
    """One thing of the stack the cloud still holds."""

    kind: str
    """What it is, in the cloud's words ("instance", "spot request", "disk"...)."""
    ident: str
    """The cloud's id for it (from the cloud: printed escaped)."""
    detail: str
    """Its state, size or type (from the cloud: printed escaped)."""
    cost: Cost


def box_cost(cloud: str, size_name: str, spot: bool) -> Cost:
    """One running box of `size_name` per hour, at the catalog's price (retired sizes
    included); unknown, and why, for a size the catalog does not price."""
    wanted = size_name.lower()
    sizes = [s for s in catalog.sizes(cloud, include_retired=True) if s.name.lower() == wanted]
    if not sizes:
        named = printable(size_name, SHOWN_CHARACTERS)
        return Cost(basis=f"{named} is not in the catalog (stack/catalog.py)")
    size = sizes[0]
    if size.unpriced:
        return Cost(basis=size.unpriced)
    market = "spot" if spot and size.spot_usd_per_hour is not None else "on demand"
    price = size.hourly_price_usd(spot)
    return Cost(price, basis=f"{size.name} {market}, catalog {size.price_date}")


def within(seconds: float, ask: Callable[[], T], what: str) -> T:
    """`ask()`'s answer, or LeakCheckError when it has none after `seconds`: each request
    has its own timeout, this bounds the whole search (pages, retries, slow answers).
    A daemon thread: a cloud that never answers cannot hold `fab` open at exit."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["answer"] = ask()
        except BaseException as error:  # handed to the caller's thread as it was
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"leaks-{what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise LeakCheckError(f"{what} did not answer within {seconds:.0f} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["answer"]  # type: ignore[return-value]


def report(where: str, leaks: Sequence[Leak]) -> list[str]:
    """The lines `fab leaks` prints: each leftover with its cost, then the totals."""
    if not leaks:
        return [f"{where}: nothing left that bills."]
    kinds = max(len(leak.kind) for leak in leaks)
    lines = [f"{where}: {len(leaks)} thing{'s' * (len(leaks) != 1)} left:"]
    for leak in leaks:
        ident = printable(leak.ident, SHOWN_ID_CHARACTERS)
        detail = printable(leak.detail.strip(), SHOWN_CHARACTERS)
        lines.append(f"  {leak.kind:<{kinds}}  {ident}  {detail}  {leak.cost.said()}")
    hourly = sum(leak.cost.usd_per_hour or 0.0 for leak in leaks)
    monthly = sum(leak.cost.usd_per_month or 0.0 for leak in leaks)
    unknown = [leak.kind for leak in leaks if not leak.cost.known]
    total = (
        f"known: ${hourly:,.3f}/h (${hourly * HOURS_PER_MONTH:,.2f}/month) + ${monthly:,.2f}/month"
    )
    if unknown:
        total += f"; cost unknown for {len(unknown)} ({', '.join(dict.fromkeys(unknown))})"
    lines.append(f"Billing {total}.")
    return lines
