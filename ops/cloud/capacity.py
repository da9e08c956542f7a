"""`fab start`: the stopped boxes started, from the stack's first choice, where there is room.

A stopped box keeps its zone and disk; whether its size has room is the cloud's to say
again at each start. Every `fab start` walks the stack's candidate sizes from the first
(`vmSize`, then `fallbackVmSizes`, as `placementTried` recorded them), whatever size an
earlier start left the boxes on: one night without room never narrows the next day's
choice. A size the boxes' zone does not sell is skipped with its reason. For each other
size, every box is resized in place (disk, addresses and zone kept), the cloud's change
followed to its end before the start (`resize` of the cloud's module), and started
(EC2's InsufficientInstanceCapacity, ARM's AllocationFailed: only the start's async
operation tells). Each refusal is sorted by `stack.placement.refusal_kind`:

- capacity: the same size again every RETRY_SECONDS for `capacityWaitMinutes` (the first
  size tried), every try printed; then the next size;
- a restriction (`stack.placement.RESTRICTION_CODES`): the next size at once, with the
  cloud's reason: no wait lifts it;
- quota: the next size at once (another family may have room);
- anything else: stop at once, with the cloud's words.

Only stopped boxes are resized (Azure reboots a running VM onto another size, EC2
refuses it): a box already up keeps its size, and the stopped ones start on it. A spot
box keeps its size (its request does). A box still stopping is waited for (at most
STOPPING_WAIT_SECONDS), then started. The boxes are told when they are left on another
size than the first choice, and how they go back. Each try is one short line, its
refusal's code: the cloud's own text (EC2's runs to 200 characters) is said the first
time it comes, not at every try. When nothing starts: a table of every try and every
size skipped, the cloud's texts once under it (`stack.placement.cloud_words`), and the
two ways out, waiting or `fab start --move`. Nothing here moves a box to another zone:
only `--move` does (ops/cloud/move.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

from invoke.exceptions import Exit

from ops.cloud.power import GONE, GONE_FIX, RUNNING, STARTING, STOPPED, STOPPING, BoxPower
from ops.target.schema import Target
from stack import placement
from stack.placement import (
    CAPACITY,
    NOT_TRIED,
    ON_DEMAND,
    OTHER,
    RESTRICTION,
    SPOT,
    placement_line,
    refusal_kind,
)

RETRY_SECONDS = 30
# An EC2 stop or an Azure deallocation takes a minute or two; one that has not ended in
# ten may be stuck (EC2 then offers a forced stop:
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StopInstances.html).
STOPPING_POLL_SECONDS = 10
STOPPING_WAIT_SECONDS = 10 * 60


@dataclass(frozen=True)
class Try:
    """One start request: the size and zone asked for, and the cloud's refusal ("" none);
    or a size skipped untried (`tried` False), and why."""

    size: str
    zone: str
    refusal: str
    tried: bool = True


def start(
    cloud: ModuleType,
    target: Target,
    say: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[BoxPower]:
    """Start every stopped box of `target` through `cloud`'s verbs (`states`, `try_start`,
    `where`, `not_sold`, `resize`); the boxes' power afterwards. Exit when none of it works."""
    boxes = _none_stopping(cloud, target, say, sleep, clock)
    if not any(box.state == STOPPED for box in boxes):
        return boxes
    return _Walk(cloud, target, say, sleep, clock, boxes).run()


def candidate_sizes(target: Target, current: str) -> list[str]:
    """The stack's sizes in the order `pulumi up` tried them (its market's), or the
    boxes' own when the stack does not say."""
    market = (target.placement or {}).get("market", SPOT if target.spot else ON_DEMAND)
    sizes = [t["size"] for t in target.placement_tried if t.get("market", market) == market]
    return list(dict.fromkeys(sizes)) or [current]


def _none_stopping(
    cloud: ModuleType,
    target: Target,
    say: Callable[[str], None],
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> list[BoxPower]:
    """Every box's power once none is stopping: a stop under way (the idle watchdog's,
    the daily one) must end before the cloud starts the box again."""
    boxes, give_up, told = cloud.states(target), clock() + STOPPING_WAIT_SECONDS, False
    while stopping := [box for box in boxes if box.state == STOPPING]:
        if clock() >= give_up:
            raise Exit(
                f"{stopping[0].line()} still, after {STOPPING_WAIT_SECONDS // 60} minutes: "
                "run `fab start` again once it has stopped (`fab status` shows it)"
            )
        if not told:
            say(f"{stopping[0].line()}: waiting for it to stop, then starting it")
            told = True
        sleep(STOPPING_POLL_SECONDS)
        boxes = cloud.states(target)
    for box in boxes:
        if box.state == GONE:
            raise Exit(f"{box.line()}: {GONE_FIX}")
    return boxes


@dataclass
class _Walk:
    """One `fab start`: the stack's sizes in order, the boxes resized and started on the
    first that takes them."""

    cloud: ModuleType
    target: Target
    say: Callable[[str], None]
    sleep: Callable[[float], None]
    clock: Callable[[], float]
    boxes: list[BoxPower]
    tries: list[Try] = field(default_factory=list)
    stopped_ids: list[str] = field(default_factory=list)
    was: str = ""
    """The size the boxes were on."""
    on: str = ""
    """The size they are on now."""
    first: str = ""
    """The first size of the walk: the stack's first choice."""
    zone: str = ""
    untried: str = NOT_TRIED
    """Why the stack's sizes before the boxes' own were not tried, when the walk is of
    their own size alone."""
    said: set[str] = field(default_factory=set)
    """The cloud's texts said so far: each once."""

    def run(self) -> list[BoxPower]:
        up = [box for box in self.boxes if box.state in (RUNNING, STARTING)]
        stopped = [box for box in self.boxes if box.state == STOPPED]
        self.stopped_ids = [box.box_id for box in stopped]
        self.was, self.zone = self.cloud.where(self.target, (up or stopped)[0].node)
        self.on = self.was
        sizes = self._sizes(up)
        self.first = sizes[0]
        # The size the boxes are on is asked for as it is: the cloud's refusal says more.
        others = [size for size in sizes if size != self.was]
        unsold = self.cloud.not_sold(self.target, self.zone, others) if others else {}
        give_up = self.clock() + self.target.capacity_wait_minutes * 60
        for size in sizes:
            if size in unsold:
                self.tries.append(Try(size, self.zone, unsold[size], tried=False))
                self.say(f"skipping {size} {self.zone}: {unsold[size]}")
                continue
            if self._started_on(size, give_up):
                self.say(self._started_line())
                if self.on != self.first:
                    self.say(self._left_on("now run"))
                return self.cloud.states(self.target)
            give_up = self.clock()  # one try for each later size: you waited
        raise Exit(self._nothing_started())

    def _sizes(self, up: list[BoxPower]) -> list[str]:
        """The sizes to walk, first choice first; the boxes' own alone when one of them is
        up or they are spot."""
        if up:
            self.say(
                f"box {up[0].node} is up on {self.was}: the stopped boxes start on that size "
                "(a box that is up is never resized)"
            )
            self.untried = f"not tried: box {up[0].node} is up on {self.was}"
            return [self.was]
        if self.target.spot:
            self.untried = "not tried: a spot box keeps its size"
            return [self.was]
        return candidate_sizes(self.target, self.was)

    def _started_on(self, size: str, give_up: float) -> bool:
        """Whether the boxes started on `size` (resized to it first); False when it is
        refused for capacity past `give_up`, a restriction or quota. Exit for anything
        else."""
        if size != self.on:
            self.say(
                f"resizing every box from {self.on} to {size} in place "
                f"(zone {self.zone}, disk kept)"
            )
            refusal = self.cloud.resize(self.target, size, self.stopped_ids)
            if refusal is not None:
                self._refused(size, refusal, give_up, resizing=True)
                return False
            self.on = size
        while True:
            refusal = self.cloud.try_start(self.target)
            self.tries.append(Try(size, self.zone, "" if refusal is None else ": ".join(refusal)))
            if refusal is None:
                self.say(f"try {self._tried()}: {size} {self.zone}: started")
                return True
            if not self._refused(size, refusal, give_up):
                return False

    def _refused(
        self, size: str, refusal: tuple[str, str], give_up: float, resizing: bool = False
    ) -> bool:
        """Say the refusal; True when the same size is worth another try (after the
        wait), False to move on. Exit for a refusal no other size fixes."""
        code, message = refusal
        kind = refusal_kind(code, message)
        doing = "resize" if resizing else f"try {self._tried()}"
        self.say(f"{doing}: {size} {self.zone}: {code} ({kind})")
        if message and f"{code}: {message}" not in self.said:
            self.said.add(f"{code}: {message}")
            self.say(f"  the cloud's words: {message}")
        if kind == OTHER:
            raise Exit(
                f"{self.target.source}: the cloud refused to "
                f"{'resize the boxes to' if resizing else 'start'} {size} ({code}: {message})"
                + (f"; {self._left_on('are left')}" if self.on != self.first else "")
            )
        if resizing:
            self.tries.append(Try(size, self.zone, f"{code}: {message}", tried=False))
            return False
        if kind == RESTRICTION:
            self.say(f"  {size}: a restriction, which no wait lifts: the next size")
        if kind == CAPACITY and self.clock() < give_up:
            minutes = (give_up - self.clock()) / 60
            self.say(
                f"  {size} again in {RETRY_SECONDS} s ({minutes:.1f} of capacityWaitMinutes left)"
            )
            self.sleep(RETRY_SECONDS)
            return True
        return False

    def _tried(self) -> int:
        return sum(t.tried for t in self.tries)

    def _left_on(self, verb: str) -> str:
        """The boxes are not on the first choice: where they are, and the way back."""
        return (
            f"the boxes {verb} on {self.on}, not the stack's first choice {self.first}: once "
            f"they stop, the next `fab start` tries {self.first} first again"
        )

    def _started_line(self) -> str:
        """The placement line of the boxes now: size, zone, market, price, and why not the
        first size (stack.placement.placement_line)."""
        taken = self.tries[-1]
        market = SPOT if self.target.spot else ON_DEMAND
        taken_json = {"size": taken.size, "zone": taken.zone, "market": market}
        refused: dict[str, str] = {}
        for t in self.tries[:-1]:
            refused.setdefault(t.size, t.refusal)
        sizes = candidate_sizes(self.target, taken.size)
        earlier = sizes[: sizes.index(taken.size)] if taken.size in sizes else []
        record = [
            {
                "size": s,
                "zone": taken.zone,
                "market": market,
                "refusal": refused.get(s, self.untried),
            }
            for s in earlier
        ]
        record.append({**taken_json, "refusal": ""})
        price = placement.hourly_price_usd(self.target.cloud, taken_json)
        return placement_line(taken_json, record, price)

    def _nothing_started(self) -> str:
        """Every try and every size skipped as a table, the cloud's texts once under it,
        where the boxes are left, and the two ways out."""
        rows = _grouped(self.tries)
        words = placement.cloud_words(t.refusal for t in self.tries)
        width = max(len(f"{size} {zone}") for size, zone, _, _ in rows)
        lines = [
            f"  {f'{s} {z}':<{width}}  "
            + f"{_count(n):>9}"
            + f"  {placement.on_its_line(r, words)}"
            for s, z, n, r in rows
        ]
        spot = " (a spot box keeps its size)" if self.target.spot else ""
        left = f"\n{self._left_on('are left').capitalize()}." if self.on != self.first else ""
        return (
            f"{self.target.source}: the boxes did not start; every try{spot}:\n"
            + "\n".join([*lines, *placement.said_under(words)])
            + left
            + "\nTwo ways out: wait and run `fab start` again (the boxes keep their disks and "
            "zone), or `fab start --move` (another zone: the boxes and their disks are made "
            "again; a run resumes from storage with `fab train --run ID`)."
        )


def _count(tries: int) -> str:
    """ "1 try", "3 tries", or "skipped" for a size never asked to start."""
    return f"{tries} tr{'y' if tries == 1 else 'ies'}" if tries else "skipped"


def _grouped(tries: list[Try]) -> list[tuple[str, str, int, str]]:
    """(size, zone, tries, last refusal), in the order first tried (0 tries: skipped)."""
    seen: dict[tuple[str, str], list] = {}
    for t in tries:
        entry = seen.setdefault((t.size, t.zone), [0, ""])
        entry[0] += 1 if t.tried else 0
        entry[1] = t.refusal
    return [(size, zone, n, refusal) for (size, zone), (n, refusal) in seen.items()]
