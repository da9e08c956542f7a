"""Shared test setup: every module in tests/fixtures/ is a pytest plugin.

Each fixture module starts one real server (sshd, dockerd, registry, Azurite,
moto) on 127.0.0.1 and skips loudly when the server's binary is missing;
`tests/system-deps.sh` (run by `make test` and CI) installs them all.
"""

from pathlib import Path

pytest_plugins = sorted(
    f"tests.fixtures.{path.stem}"
    for path in (Path(__file__).parent / "fixtures").glob("*.py")
    if path.stem != "__init__"
)
