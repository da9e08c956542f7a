"""A stack's EC2 boxes as EC2 has them now: found from the record, the requests and the
launch's tag, read back rank by rank, and let go.

The record (the boxes' resource's `instanceIds` and `spotRequestIds`) is not enough:

- a persistent spot request outlives its instance: terminated by hand or by EC2, the
  instance is replaced by a new one, under a new id, which the request names
  (stack/spot_requests.py); a box is found through its request too;
- each launch tags what it makes, instances, volumes and spot requests, with
  `LAUNCH_TAG` = the launch's id, in the launch request itself (stack/ec2_launch.py): a
  box whose id never reached the record is found by that tag. By the launch's tag, not
  the stack's: a replacement's new boxes carry the same stack tags, and the old set's
  delete must leave them alone;
- EC2 is eventually consistent: a call about an instance RunInstances just returned may
  answer `InvalidInstanceID.NotFound`, which "does not mean the instance does not
  exist", nor, after TerminateInstances, that it was terminated; AWS's advice is to
  retry with an exponential backoff from a couple of seconds up to a few minutes
  (https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html).
  `until_found` does, bounded; terminations are confirmed by DescribeInstances.

Letting go cancels every live request first (else each launches a new box), then
terminates every instance still there, then waits until EC2 says terminated, so that
the subnets and groups the boxes sit in can go after them. Idempotent: what is already
gone is skipped. Runs in Pulumi's provider host (pulumi/infra/aws/boxes.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from stack import spot_requests

LAUNCH_TAG = "glucose-training:launch"
# Instance states after which an instance bills no compute and never comes back.
GONE_STATES = ("shutting-down", "terminated")
NOT_FOUND = "InvalidInstanceID.NotFound"
# The backoff on NOT_FOUND: 1, 2, 4, 8, 16, 30, 30, 30 s between 9 tries, about 2 minutes
# in all (AWS: "starting with a couple of seconds ... up to a few minutes").
NOT_FOUND_TRIES = 9
NOT_FOUND_FIRST_WAIT_SECONDS = 1.0
NOT_FOUND_LONGEST_WAIT_SECONDS = 30.0
# How long letting go waits for the terminations, in 5 s polls: 10 minutes.
TERMINATE_POLL_SECONDS = 5.0
TERMINATE_POLLS = 120

T = TypeVar("T")


class NotListed(LookupError):
    """DescribeInstances does not list an instance EC2 has just launched (not yet)."""


def until_found(call: Callable[[], T]) -> T:
    """`call()`, again with a growing wait while EC2 answers NOT_FOUND or does not list an
    instance yet (it has not seen it); the last refusal is raised after NOT_FOUND_TRIES."""
    wait = NOT_FOUND_FIRST_WAIT_SECONDS
    for _ in range(NOT_FOUND_TRIES - 1):
        try:
            return call()
        except Exception as error:
            if not isinstance(error, NotListed) and error_code(error) != NOT_FOUND:
                raise
        time.sleep(wait)
        wait = min(wait * 2, NOT_FOUND_LONGEST_WAIT_SECONDS)
    return call()


def error_code(error: Exception) -> str:
    """EC2's error code of a botocore ClientError, "" for anything else."""
    response = getattr(error, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "")


def describe(ec2: Any, ids: Iterable[str] = (), tag: tuple[str, str] | None = None) -> dict:
    """Instance id -> EC2's description (any state) of `ids` and of those carrying `tag`
    (key, value); an id not (yet) listed is left out."""
    pages = spot_requests.pages_matching(ec2, "describe_instances", [("instance-id", ids)], tag)
    return {
        instance["InstanceId"]: instance
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    }


def describe_all(ec2: Any, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Each of `ids` as EC2 describes it, in order; NotListed while one is missing."""
    found = describe(ec2, ids)
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotListed(f"EC2 does not list {', '.join(missing)} yet")
    return [found[i] for i in ids]


def is_live(instance: dict[str, Any] | None) -> bool:
    return instance is not None and instance["State"]["Name"] not in GONE_STATES


@dataclass(frozen=True)
class Holdings:
    """What one launch of boxes holds now: its instances and spot requests, any state."""

    instances: dict[str, dict[str, Any]]
    requests: dict[str, dict[str, Any]]

    @property
    def live_instances(self) -> list[str]:
        return sorted(i for i, instance in self.instances.items() if is_live(instance))

    @property
    def live_requests(self) -> list[str]:
        return spot_requests.live(self.requests)

    def by_rank(self, instance_ids: Sequence[str], request_ids: Sequence[str]) -> list:
        """Rank r's live instance: the recorded one, else the one its request launched
        since (None: neither is left)."""
        boxes = []
        for rank, recorded in enumerate(instance_ids):
            request = self.requests.get(request_ids[rank] if rank < len(request_ids) else "")
            since = self.instances.get((request or {}).get("InstanceId", ""))
            own = self.instances.get(recorded)
            boxes.append(own if is_live(own) else since if is_live(since) else None)
        return boxes


def holdings(
    ec2: Any, instance_ids: Iterable[str], request_ids: Iterable[str], launch_id: str
) -> Holdings:
    """The instances and requests of one launch: recorded, behind each other, or tagged."""
    instance_ids, tag = list(instance_ids), (LAUNCH_TAG, launch_id)
    requests = spot_requests.find_requests(ec2, request_ids, instance_ids, tag)
    launched = [r.get("InstanceId", "") for r in requests.values()]
    return Holdings(describe(ec2, instance_ids + launched, tag), requests)


@dataclass(frozen=True)
class Released:
    """What letting go did: the requests cancelled and the instances terminated."""

    cancelled: list[str]
    terminated: list[str]

    def __str__(self) -> str:
        said = [f"terminated {', '.join(self.terminated)}"] if self.terminated else []
        said += [f"cancelled {', '.join(self.cancelled)}"] if self.cancelled else []
        return "; ".join(said) or "nothing was left"


def release(
    ec2: Any,
    instance_ids: Iterable[str],
    request_ids: Iterable[str],
    launch_id: str,
    *,
    just_launched: bool = False,
) -> Released:
    """Cancel every live request of the launch, then terminate every instance of it still
    there, and wait until EC2 says each is terminated. Idempotent. `just_launched`: the
    ids came from RunInstances or CreateFleet a moment ago, so one EC2 does not list yet
    is terminated all the same (an old record's unlisted id is long gone)."""
    instance_ids, request_ids = list(instance_ids), list(request_ids)
    before = holdings(ec2, instance_ids, request_ids, launch_id)
    cancelled = spot_requests.cancel(ec2, before.live_requests)
    # Read again once cancelled: a request may have launched an instance meanwhile.
    launched = [r.get("InstanceId", "") for r in before.requests.values()]
    after = holdings(ec2, [*instance_ids, *launched], [*request_ids, *before.requests], launch_id)
    unseen = [i for i in instance_ids if i not in after.instances] if just_launched else []
    doomed = sorted({*after.live_instances, *unseen})
    if doomed:
        # Confirmed below by DescribeInstances: a NOT_FOUND here may be a running instance.
        until_found(lambda: ec2.terminate_instances(InstanceIds=doomed))
        _wait_terminated(ec2, doomed)
    return Released(cancelled, doomed)


def _wait_terminated(ec2: Any, ids: list[str]) -> None:
    """Poll until every one of `ids` is listed as terminated; TimeoutError naming the rest."""
    for _ in range(TERMINATE_POLLS):
        seen = describe(ec2, ids)
        left = [i for i in ids if (seen.get(i) or {}).get("State", {}).get("Name") != "terminated"]
        if not left:
            return
        time.sleep(TERMINATE_POLL_SECONDS)
    raise TimeoutError(
        f"EC2 did not say terminated for {', '.join(left)} within "
        f"{TERMINATE_POLLS * TERMINATE_POLL_SECONDS:.0f} s; they may still bill: "
        "terminate them in the EC2 console"
    )
