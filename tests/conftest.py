"""Shared test setup: every module in tests/fixtures/ is a pytest plugin.

Each fixture module starts one real server (sshd, dockerd, registry, Azurite,
moto) on 127.0.0.1 and skips loudly when the server's binary is missing;
`tests/system-deps.sh` (run by `make test` and CI) installs them all.

`make test` runs the suite in parallel processes (pytest-xdist, `--dist loadgroup`):
each process starts its own servers on free ports, but a Docker engine, its image
store and the box engines' named bridge are the machine's, so every test that uses
one runs in one process, one after another.
"""

import signal
from pathlib import Path

import pytest

pytest_plugins = sorted(
    f"tests.fixtures.{path.stem}"
    for path in (Path(__file__).parent / "fixtures").glob("*.py")
    if path.stem != "__init__"
)

# Fixtures of the machine's Docker engines; a test's fixturenames hold every fixture it
# uses through others too (trainer_image through docker_engine).
MACHINE_DOCKER_FIXTURES = {"docker_engine", "box_engine", "restartable_engine"}


def pytest_configure(config: pytest.Config) -> None:
    # A shell that starts `make test &` ignores SIGINT in that job, and an ignored signal
    # stays ignored across exec: the tests that press Ctrl-C on `fab` would wait forever.
    # A handler of Python's own is reset to the default at exec instead.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# tryfirst: pytest-xdist reads the group marks in a hook of its own, which must see them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if MACHINE_DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("docker"))
