"""`fab start` when the cloud has no room for the boxes: retry, resize in place, or say so.

A stopped box keeps its size, zone and disk; starting it asks the cloud for that size in
that zone again, and the cloud may have none (EC2's InsufficientInstanceCapacity, ARM's
AllocationFailed, which only the start's async operation tells). Each refusal is sorted
by `stack.placement.refusal_kind`:

- capacity: the same size again every RETRY_SECONDS for `capacityWaitMinutes`, every
  try printed; then the next size;
- quota: the next size at once (another family may have room);
- anything else: stop at once, with the cloud's words.

The next size is the next of the stack's candidates (`placementTried`, in order) sold
in the boxes' zone; every box is resized in place together (disk, addresses and zone
kept) and started. A spot box is never resized (its request keeps its size). When
nothing starts: a table of every try and the two ways out, waiting or `fab start
--move`. Nothing here moves a box to another zone: only `--move` does (ops/cloud/move.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from invoke.exceptions import Exit

from ops.cloud.power import STOPPED, BoxPower
from ops.target.schema import Target
from stack.placement import (
    CAPACITY,
    NOT_TRIED,
    ON_DEMAND,
    OTHER,
    SPOT,
    hourly_price_usd,
    placement_line,
    refusal_kind,
)

RETRY_SECONDS = 30


@dataclass(frozen=True)
class Try:
    """One start request: the size and zone asked for, and the cloud's refusal ("" none)."""

    size: str
    zone: str
    refusal: str


def start(
    cloud: ModuleType,
    target: Target,
    say: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[BoxPower]:
    """Start every stopped box of `target` through `cloud`'s verbs (`try_start`, `where`,
    `sold_in`, `resize`); the boxes' power afterwards. Exit when none of it works."""
    if not any(box.state == STOPPED for box in cloud.states(target)):
        return cloud.states(target)
    size, zone = cloud.where(target)
    tries: list[Try] = []
    give_up = clock() + target.capacity_wait_minutes * 60
    while True:
        refusal = cloud.try_start(target)
        tries.append(Try(size, zone, "" if refusal is None else ": ".join(refusal)))
        if refusal is None:
            say(f"try {len(tries)}: {size} {zone}: started")
            say(_started_line(target, tries))
            return cloud.states(target)
        code, message = refusal
        kind = refusal_kind(code, message)
        say(f"try {len(tries)}: {size} {zone}: {code} ({kind}) {message}".rstrip())
        if kind == OTHER:
            raise Exit(f"{target.source}: the cloud refused to start {size} ({code}: {message})")
        if kind == CAPACITY and clock() < give_up:
            minutes = (give_up - clock()) / 60
            say(f"  {size} again in {RETRY_SECONDS} s ({minutes:.1f} of capacityWaitMinutes left)")
            sleep(RETRY_SECONDS)
            continue
        following = _next_size(cloud, target, size, zone, tries)
        if following is None:
            raise Exit(_nothing_started(target, tries))
        say(f"resizing every box from {size} to {following} in place (zone {zone}, disk kept)")
        cloud.resize(target, following)
        size, give_up = following, clock()  # one try for each later size: you waited


def candidate_sizes(target: Target, current: str) -> list[str]:
    """The stack's sizes in the order `pulumi up` tried them (its market's), or the
    boxes' own when the stack does not say."""
    market = (target.placement or {}).get("market", SPOT if target.spot else ON_DEMAND)
    sizes = [t["size"] for t in target.placement_tried if t.get("market", market) == market]
    return list(dict.fromkeys(sizes)) or [current]


def _next_size(
    cloud: ModuleType, target: Target, size: str, zone: str, tries: list[Try]
) -> str | None:
    """The next candidate after `size` sold in `zone` and not tried; None for a spot box."""
    if target.spot:
        return None
    sizes = candidate_sizes(target, size)
    later = sizes[sizes.index(size) + 1 :] if size in sizes else []
    later = [s for s in later if s not in {t.size for t in tries}]
    sold = cloud.sold_in(target, zone, later) if later else set()
    return next((s for s in later if s in sold), None)


def _started_line(target: Target, tries: list[Try]) -> str:
    """The placement line of the boxes now: size, zone, market, price, and why not the
    first size (stack.placement.placement_line)."""
    taken = tries[-1]
    market = SPOT if target.spot else ON_DEMAND
    placement = {"size": taken.size, "zone": taken.zone, "market": market}
    sizes = candidate_sizes(target, taken.size)
    refused: dict[str, str] = {}
    for t in tries[:-1]:
        refused.setdefault(t.size, t.refusal)
    record = [
        {"size": s, "zone": taken.zone, "market": market, "refusal": refused.get(s, NOT_TRIED)}
        for s in sizes[: sizes.index(taken.size)] if taken.size in sizes
    ]  # fmt: skip
    record.append({**placement, "refusal": ""})
    price = hourly_price_usd(target.cloud, placement)
    return placement_line(placement, record, price)


def _nothing_started(target: Target, tries: list[Try]) -> str:
    """Every try as a table, and the two ways out."""
    rows = _grouped(tries)
    width = max(len(f"{size} {zone}") for size, zone, _, _ in rows)
    lines = [
        f"  {f'{s} {z}':<{width}}  {n:>3} tr{'y' if n == 1 else 'ies'}  {r}" for s, z, n, r in rows
    ]
    spot = " (a spot box keeps its size)" if target.spot else ""
    return (
        f"{target.source}: the boxes did not start; every try{spot}:\n"
        + "\n".join(lines)
        + "\nTwo ways out: wait and run `fab start` again (the boxes keep their disks and "
        "zone), or `fab start --move` (another zone: the boxes and their disks are made "
        "again; a run resumes from storage with `fab train --run ID`)."
    )


def _grouped(tries: list[Try]) -> list[tuple[str, str, int, str]]:
    """(size, zone, tries, last refusal), in the order first tried."""
    seen: dict[tuple[str, str], list] = {}
    for t in tries:
        entry = seen.setdefault((t.size, t.zone), [0, ""])
        entry[0] += 1
        entry[1] = t.refusal
    return [(size, zone, n, refusal) for (size, zone), (n, refusal) in seen.items()]
