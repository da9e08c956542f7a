"""The stacks whose declared values are checked: the issue's matrix, and config at its limits.

Both clouds x on-demand/spot x 1/2 boxes x budgetStopsBoxes on/off x
keepStorageOnDestroy off/on (32 stacks), plus stacks that push every value the config
decides to the edge validation allows (most alert addresses, longest owner and stack
name, a zone with a long Windows id) and the AWS stack whose cost-scope tag Billing
already knows (the only one declaring the cost-allocation tag). Each runs the real
program under the mocks once per test session, with ids in the clouds' own formats.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from stack.config import COST_SCOPE_TAG
from tests.fakes import aws_program, azure_program
from tests.fakes.pulumi_mocks import RunResult, main_program, run_program, unwrap

# Validation's limits (stack/config.py): the edge stacks sit exactly on them.
LONGEST_STACK_NAME = ("team_a.dev-" * 10)[:100]  # Pulumi: letters, digits, "-_.", 100 at most
LONGEST_OWNER = ("Ana María Núñez-Ortiz ana@lab.example+gpu " * 4)[:128]


@dataclass(frozen=True)
class Stack:
    """One stack of the matrix: the overrides of the fake cloud's good config."""

    cloud: str
    spot: bool = False
    nodes: int = 1
    budget_stops_boxes: bool = True
    keep_storage: bool = False
    overrides: tuple[tuple[str, str], ...] = ()
    name: str = "test"
    known_tags: tuple[str, ...] = ()
    zone: str = "Europe/Berlin"
    location: str = ""
    """The region, when not the fake cloud's own (us-east-1, eastus)."""
    label: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        if self.label:
            return f"{self.cloud}-{self.label}"
        capacity = "spot" if self.spot else "on-demand"
        stop = "budget-stops" if self.budget_stops_boxes else "budget-mails"
        keep = "keep-storage" if self.keep_storage else "drop-storage"
        return f"{self.cloud}-{capacity}-{self.nodes}box-{stop}-{keep}"

    @property
    def region(self) -> str:
        default = aws_program.REGION if self.cloud == "aws" else azure_program.LOCATION
        return self.location or default

    def settings(self) -> dict[str, str]:
        config = {
            "spot": str(self.spot).lower(),
            "nodeCount": str(self.nodes),
            "budgetStopsBoxes": str(self.budget_stops_boxes).lower(),
            "keepStorageOnDestroy": str(self.keep_storage).lower(),
            "autoShutdownTimeZone": self.zone,
            **dict(self.overrides),
        }
        if self.cloud == "aws":
            return {**aws_program.stack_settings(**config), "aws:region": self.region}
        return azure_program.stack_settings(self.region, **config)

    def run(self) -> RunResult:
        """The program's run for this stack, once per test session."""
        return _cached_run(self)

    def run_afresh(self) -> RunResult:
        """A run of its own (for a program or config a test has changed)."""
        return _run(self)


@functools.cache
def _cached_run(stack: Stack) -> RunResult:
    return _run(stack)


def _run(stack: Stack) -> RunResult:
    if stack.cloud == "aws":
        recorder = aws_program.aws_recorder(cloud_ids=True, known_tags=stack.known_tags)
        return _plain(run_program(main_program(), recorder, stack.settings(), stack=stack.name))
    with azure_program.arm_at(azure_program.fake_arm()):
        recorder = azure_program.azure_recorder(cloud_ids=True)
        return _plain(run_program(main_program(), recorder, stack.settings(), stack=stack.name))


def _plain(result: RunResult) -> RunResult:
    """Inputs as the provider receives them: secrets and references unwrapped."""
    for resource in result.resources:
        resource.inputs = unwrap(resource.inputs)
    return result


def _emails(count: int) -> str:
    return ",".join(f"alerts-{n:02d}@lab.dev" for n in range(count))


# Zones taken in turn: the three whose Windows ids CLDR changed for tz 2026f among them.
ZONES = ("Europe/Berlin", "America/Vancouver", "America/Edmonton", "America/Winnipeg")
MATRIX = tuple(
    Stack(cloud, spot, nodes, stops, keep, zone=ZONES[index % len(ZONES)])
    for index, (cloud, spot, nodes, stops, keep) in enumerate(
        itertools.product(("aws", "azure"), (False, True), (1, 2), (True, False), (False, True))
    )
)
EDGES = (
    Stack(
        "aws",
        spot=True,
        nodes=16,
        overrides=(("alertEmails", _emails(11)), ("owner", LONGEST_OWNER)),
        name=LONGEST_STACK_NAME,
        known_tags=(COST_SCOPE_TAG,),
        label="at-the-limits",
    ),
    Stack(
        "azure",
        spot=True,
        nodes=16,
        overrides=(
            ("vmSize", "Standard_NC4as_T4_v3"),  # 16 boxes within the fake's spot quota
            ("alertEmails", _emails(50)),
            ("owner", LONGEST_OWNER),
        ),
        zone="America/Argentina/ComodRivadavia",  # the longest name CLDR maps
        name=LONGEST_STACK_NAME,
        label="at-the-limits",
    ),
)
STACKS = MATRIX + EDGES
