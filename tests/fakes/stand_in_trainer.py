"""A few-MB trainer stand-in image for real Docker engines: dash, sleep, libc, a script.

The script plays the trainer's exit contract (ARCHITECTURE.md) from its last
argument, so the real `docker run` line of ops/run/container.py starts it:
`run` trains until SIGTERM and then exits 75 (checkpointed stop), `exit-75` is
preempted after a moment, `crash` fails at once, anything else is preempted after 4 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

STAND_IN_FILES = ("/bin/sh", "/bin/sleep")
IMPORT_TIMEOUT_SECONDS = 120
ENTRYPOINT = '["/bin/sh", "/trainer.sh"]'
TRAINER_SCRIPT = """\
for last; do :; done
case "$last" in
    run) trap 'exit 75' TERM; sleep 1000 & wait $! ;;
    exit-75) sleep 1; exit 75 ;;
    crash) exit 1 ;;
    *) sleep 4; exit 75 ;;
esac
"""


def _shared_libraries(binary: str) -> list[str]:
    listing = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [part for part in listing.split() if part.startswith("/")]


def write_stand_in_tree(root: Path) -> None:
    """The image's file tree under `root`, for `docker import`."""
    files = {path for binary in STAND_IN_FILES for path in [binary, *_shared_libraries(binary)]}
    for path in files:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(path).resolve(), target)
    (root / "trainer.sh").write_text(TRAINER_SCRIPT)


def import_stand_in_image(root: Path, docker_env: dict[str, str]) -> str:
    """Build the tree under `root` and `docker import` it; returns the image name."""
    write_stand_in_tree(root)
    name = f"glucose-box-test-stand-in:{uuid.uuid4().hex[:8]}"
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(
        ["docker", "import", "--change", f"ENTRYPOINT {ENTRYPOINT}", "-", name],
        stdin=tar.stdout,
        env={**os.environ, **docker_env},
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_SECONDS,
        check=False,
    )
    tar.stdout.close()
    tar.wait()
    if imported.returncode != 0:
        raise RuntimeError(f"docker import of the stand-in failed: {imported.stderr.strip()}")
    return name
