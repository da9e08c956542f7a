"""What `fab preflight` found: problems (each with its fix) and notes, in one list.

Shared by the per-cloud checks (ops/preflight/aws.py, ops/preflight/azure.py) and the
task that prints them; plain data, no cloud SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Findings:
    """Problems block `pulumi up`; notes are worth knowing but block nothing."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def problem(self, what: str, fix: str) -> None:
        """Record one problem as a single line: what was seen; what to do."""
        self.problems.append(f"{what}; fix: {fix}")

    def problem_if(self, line: str | None) -> None:
        """Record a ready-made problem line (e.g. a quota shortfall), if there is one."""
        if line:
            self.problems.append(line)

    def note(self, line: str) -> None:
        self.notes.append(line)

    def extend(self, other: Findings) -> None:
        self.problems += other.problems
        self.notes += other.notes

    def render(self, stack: str) -> str:
        """Notes first, then every problem numbered; the verdict last."""
        lines = [f"  note: {note}" for note in self.notes]
        lines += [f"  {n}. {problem}" for n, problem in enumerate(self.problems, 1)]
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s): `pulumi up` of {stack} would fail")
        else:
            lines.append(f"no problems found: `pulumi up` of {stack} should get its boxes")
        return "\n".join(lines)
