"""Pulumi's provider host for a dynamic provider, as the engine runs it: the provider
shipped the way Pulumi ships it (dill, base64) and called in a fresh Python process
outside the program's directory, so it may import only what is installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pulumi import dynamic
from pulumi.dynamic.dynamic import serialize_provider

PROVIDER_HOST_TIMEOUT_SECONDS = 60
# What the provider host does: load the shipped provider and call one of its methods.
HOST = """
import base64, json, sys, dill
call = json.loads(sys.stdin.read())
provider = dill.loads(base64.b64decode(call["provider"]))
result = getattr(provider, call["method"])(*call["args"])
print(json.dumps(getattr(result, "__dict__", result)))
"""


def run_in_provider_host(
    provider: dynamic.ResourceProvider, method: str, *args, env: dict[str, str], cwd: Path
) -> object:
    """`provider.method(*args)` in a provider host; its result as JSON."""
    completed = subprocess.run(
        [sys.executable, "-c", HOST],
        # On stdin, not argv: the props may be larger than one argument may be.
        input=json.dumps(
            {"provider": serialize_provider(provider), "method": method, "args": list(args)}
        ),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=PROVIDER_HOST_TIMEOUT_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)
