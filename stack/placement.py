"""Where a stack's boxes go when the first choice has no GPU: the candidates in order,
why each was refused, and the one line that says what was taken.

A candidate is a size, a zone and a market (spot or on-demand). The order is the
stack's: spot pools first when `spotFallback` adds on-demand after them, then
`vmSize` before each of `fallbackVmSizes`, then `zones` in their order (by default
every zone selling a candidate, by name). What can be known before anything is
declared is dropped first (a size not sold in a zone, a family without quota) and
kept in the record with its reason; the cloud's own engine tries the rest in order
(AWS: EC2 Fleet and spot requests, `stack.ec2_launch`; Azure: the VM's zone
placement). Stack outputs `placement` (what was taken) and `placementTried` (every
candidate and its refusal, "" for the one taken) carry the record to `fab`, which
sorts a refusal by `refusal_kind` when it starts a stopped box again (`fab start`).

Pure: no cloud SDK, no I/O; the Pulumi program, its dynamic providers and `fab` share it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SPOT, ON_DEMAND = "spot", "on-demand"
NOT_TRIED = "not tried: an earlier candidate was taken"
CAPACITY, RESTRICTION, QUOTA, OTHER = "capacity", "restriction", "quota", "other"

# What a cloud answers when it has no room for a size, for now (retrying the same size
# later may work): EC2's error codes (https://docs.aws.amazon.com/AWSEC2/latest/
# APIReference/errors-overview.html) and ARM's allocation failures
# (https://learn.microsoft.com/troubleshoot/azure/virtual-machines/windows/allocation-failure).
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "SpotMaxPriceTooLow",
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    }
)
# What no wait lifts: the size is not sold in the zone, or not to this subscription
# (EC2's Unsupported: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
# errors-overview.html; ARM's SkuNotAvailable with its NotAvailableForSubscription
# reason: https://learn.microsoft.com/troubleshoot/azure/azure-resource-manager/
# create-deployment/error-sku-not-available). The next candidate may be sold: it is
# tried at once.
RESTRICTION_CODES = frozenset({"Unsupported", "SkuNotAvailable", "NotAvailableForSubscription"})
# What no retry of the same size fixes: a limit of the account (another family's quota
# may still have room, so the next size is worth a try).
QUOTA_CODES = frozenset(
    {
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "QuotaExceeded",
    }
)


@dataclass(frozen=True)
class Candidate:
    """One place a box may go."""

    size: str
    zone: str
    """An AWS zone name, or an Azure zone number; "" where the cloud picks the zone."""
    market: str
    """SPOT or ON_DEMAND."""

    def to_json(self) -> dict[str, str]:
        return {"size": self.size, "zone": self.zone, "market": self.market}

    @property
    def label(self) -> str:
        """e.g. "g5.xlarge us-east-1b on-demand" (no zone where the cloud picks it)."""
        return " ".join(part for part in (self.size, self.zone, self.market) if part)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(str(data["size"]), str(data.get("zone") or ""), str(data["market"]))


@dataclass(frozen=True)
class Tried:
    """A candidate and why it was refused ("" for the one taken)."""

    candidate: Candidate
    refusal: str

    def to_json(self) -> dict[str, str]:
        return {**self.candidate.to_json(), "refusal": self.refusal}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tried:
        return cls(Candidate.from_json(data), str(data.get("refusal") or ""))


def markets(spot: bool, spot_fallback: bool) -> tuple[str, ...]:
    """The markets in the order they are tried."""
    if not spot:
        return (ON_DEMAND,)
    return (SPOT, ON_DEMAND) if spot_fallback else (SPOT,)


def candidates(
    sizes: Sequence[str],
    zones: Sequence[str],
    market_order: Sequence[str],
    selling: Mapping[str, Iterable[str]],
) -> list[Tried]:
    """Every (market, size, zone) in the order they are tried, each with "" (to try) or
    why not: `selling` (size -> the zones that sell it) leaves the zone out. `zones`
    empty: every zone selling a size, by name."""
    sold = {size: set(selling.get(size, ())) for size in sizes}
    order = list(zones) or sorted(set().union(*sold.values()))
    return [
        Tried(Candidate(size, zone, market), "" if zone in sold[size] else not_sold_in(zone))
        for market in market_order
        for size in sizes
        for zone in order
    ]


def not_sold_in(zone: str) -> str:
    """The refusal of a size `zone` does not sell: skipped, never asked for."""
    return f"not sold in {zone}"


def with_quota(every: Sequence[Tried], refusals: Mapping[tuple[str, str], str]) -> list[Tried]:
    """`every` with the candidates whose (size, market) `refusals` names (a quota too
    small) refused for that reason."""
    return [
        Tried(t.candidate, refusals[(t.candidate.size, t.candidate.market)])
        if not t.refusal and (t.candidate.size, t.candidate.market) in refusals
        else t
        for t in every
    ]


def in_order(tried: Iterable[Tried], order: Sequence[Candidate]) -> list[Tried]:
    """`tried` sorted as the candidates of `order` are (the stack's order)."""
    rank = {candidate: index for index, candidate in enumerate(order)}
    return sorted(tried, key=lambda t: rank.get(t.candidate, len(rank)))


def nothing_left(tried: Sequence[Tried], boxes: int = 1) -> str:
    """The refusal of a stack no candidate is left for: one line per candidate, and each
    of the cloud's texts said once (several candidates' in one place, under the list)."""
    words = cloud_words(t.refusal for t in tried)
    lines = [f"  - {t.candidate.label}: {on_its_line(t.refusal, words)}" for t in tried]
    return "\n".join(
        [
            f"no candidate could take {boxes} box(es); each was refused:",
            *lines,
            *said_under(words),
            "Wait and run `pulumi up` again, or add fallbackVmSizes or zones "
            "(docs/capacity.md, 'When the cloud has no GPU')",
        ]
    )


def cloud_words(refusals: Iterable[str]) -> list[str]:
    """The refusals that say more than their code ("CODE: the cloud's message") and come
    more than once, each once, in the order first seen: EC2's 200-character texts, said
    once under a table whose lines give the code alone, not on each line."""
    said: dict[str, int] = {}
    for refusal in refusals:
        if refusal and refusal_code(refusal) != refusal:
            said[refusal] = said.get(refusal, 0) + 1
    return [refusal for refusal, times in said.items() if times > 1]


def on_its_line(refusal: str, words: Collection[str]) -> str:
    """`refusal` as a list's line gives it: its code alone when its text is one of the
    cloud's `words`, said once under the list (`said_under`)."""
    return refusal_code(refusal) if refusal in words else refusal


def said_under(words: Sequence[str]) -> list[str]:
    """The lines under a list that say each of the cloud's `words` once ([] for none)."""
    return ["the cloud's words:", *[f"  {said}" for said in words]] if words else []


def refusal_code(refusal: str) -> str:
    """The cloud's error code at the head of a refusal ("InsufficientInstanceCapacity:
    ..."), or the whole refusal when it has none ("not sold in us-east-1c"): a refusal as
    one short line."""
    head, colon, _ = refusal.partition(":")
    return head if colon and head and " " not in head else refusal


def refusal_kind(code: str, message: str = "") -> str:
    """CAPACITY (retry later, or another size), RESTRICTION (another size at once: no wait
    lifts it), QUOTA (another size) or OTHER (stop)."""
    if code in RESTRICTION_CODES:
        return RESTRICTION
    if code in CAPACITY_CODES:
        return CAPACITY
    # ARM says a quota is short as OperationNotAllowed with the word in its message.
    if code in QUOTA_CODES or (code == "OperationNotAllowed" and "quota" in message.lower()):
        return QUOTA
    return OTHER


def placement_line(
    placement: Mapping[str, Any], tried: Sequence[Mapping[str, Any]], usd_per_hour: float | None
) -> str:
    """e.g. `g5.xlarge us-east-1b on-demand $1.01/h (fallback 2 of 4; g6.xlarge:
    InsufficientInstanceCapacity)`: what the boxes are on, and why not the first choice."""
    taken = Candidate.from_json(placement)
    price = f" ${usd_per_hour:.2f}/h" if usd_per_hour else ""
    head = taken.label + price
    record = [Tried.from_json(entry) for entry in tried]
    where = next((i for i, t in enumerate(record) if not t.refusal), None)
    if where is None or record[where].candidate.size != taken.size:
        return f"{head} (not what `pulumi up` took: resized by `fab start`)" if record else head
    if where == 0:
        return f"{head} (first choice)"
    return f"{head} (fallback {where + 1} of {len(record)}; {_refusals(record[:where])})"


def _refusals(refused: Sequence[Tried]) -> str:
    """Each size's refusals, once each: "g6.xlarge: InsufficientInstanceCapacity"."""
    by_size: dict[str, list[str]] = {}
    for entry in refused:
        codes = by_size.setdefault(entry.candidate.size, [])
        code = refusal_code(entry.refusal)
        if code not in codes:
            codes.append(code)
    return "; ".join(f"{size}: {'/'.join(codes)}" for size, codes in by_size.items())


def first_choice(tried: Sequence[Mapping[str, Any]]) -> str:
    """ "<size> <market>" of the first candidate of a `placementTried` record; "" none."""
    return f"{tried[0]['size']} {tried[0]['market']}" if tried else ""


def hourly_price_usd(cloud: str, taken: Mapping[str, Any]) -> float:
    """One box's hourly price on the placement `taken` (its size and market): the
    catalog's, so dollars follow the size a fallback took."""
    from stack import catalog

    return catalog.lookup(taken["size"], cloud).hourly_price_usd(taken["market"] == SPOT)


def price_table(cloud: str, sizes: Iterable[str]) -> dict[str, float]:
    """ "<size> <market>" -> one box's hourly price (the catalog's), both markets of each
    size a stack may boot on: what launch.json carries so that every boot is priced at
    its own size (trainer/reports/cost.py). {} off the clouds (a lab box, this machine)."""
    from stack import catalog

    if cloud not in catalog.CLOUDS:
        return {}
    table = {}
    for name in dict.fromkeys(sizes):
        try:
            size = catalog.lookup(name, cloud)
        except catalog.CatalogError:
            continue  # a size the catalog no longer sells: its boots take the launch price
        for market in (ON_DEMAND, SPOT):
            table[f"{size.name} {market}"] = size.hourly_price_usd(market == SPOT)
    return table
