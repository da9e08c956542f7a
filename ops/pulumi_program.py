"""The Pulumi program's pure modules, for the tasks that must agree with it exactly.

`fab preflight` validates a stack file with the program's own `infra.config`, and
`fab box-update` renders a box's files with its own `infra.cloud_init`; neither module
imports the Pulumi SDK. The program keeps them in `pulumi/infra/` (run from `pulumi/`
by the engine), so they are imported from there by path.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

PROGRAM_DIR = Path(__file__).resolve().parents[1] / "pulumi"


def infra_module(name: str) -> ModuleType:
    """`infra.<name>` of the Pulumi program, e.g. `infra_module("cloud_init")`."""
    if str(PROGRAM_DIR) not in sys.path:
        # Appended, not prepended: nothing in pulumi/ may shadow an installed package.
        sys.path.append(str(PROGRAM_DIR))
    return importlib.import_module(f"infra.{name}")
