"""The trainer image on the user's machine: its tag, build, push, and the no-registry path.

The tag is the git revision, so a box runs exactly the code of a commit; uncommitted
changes to the image's inputs add `-dirty-<hash of the changes>`, so two different
uncommitted states never share a tag (and the same state rebuilds to the same tag).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from ops import CHECKOUT
from ops.image.registry import (
    RegistryLogin,
    docker_login_argv,
    login_failure_message,
    private_docker_config,
)

# What the build context holds (.dockerignore is an allow-list of these): only
# changes here make the image differ, so only they make the tag dirty.
IMAGE_INPUTS = (
    "Dockerfile",
    ".dockerignore",
    "requirements",
    "trainer",
    "box/__init__.py",
    "box/contract.py",
)
DIRTY_HASH_CHARS = 12
REVISION_CHARS = 12
BASE_IMAGE_ARG = re.compile(r"^\s*ARG\s+BASE_IMAGE=(\S+)", re.M)
DOCKER_TIMEOUT_SECONDS = 3600
LOCAL_REPOSITORY = "glucose-training"

console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class PushReport:
    """What a push moved: compare runs to see that unchanged layers stay home."""

    image: str
    seconds: float
    pushed_layers: int
    existing_layers: int


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise Exit(f"`git {' '.join(args)}` failed in {repo}: {result.stderr.strip()}")
    return result.stdout


def image_tag(repo: Path = CHECKOUT) -> str:
    """`<revision>` when the image's inputs are committed, else `<revision>-dirty-<hash>`."""
    revision = _git(repo, "rev-parse", f"--short={REVISION_CHARS}", "HEAD").strip()
    changed = _git(
        repo, "status", "--porcelain", "--untracked-files=all", "--", *IMAGE_INPUTS
    ).splitlines()
    if not changed:
        return revision
    digest = hashlib.sha256(_git(repo, "diff", "HEAD", "--binary", "--", *IMAGE_INPUTS).encode())
    for line in sorted(changed):
        if line.startswith("??"):
            path = repo / line[3:]
            digest.update(line.encode())
            if path.is_file():
                digest.update(path.read_bytes())
    return f"{revision}-dirty-{digest.hexdigest()[:DIRTY_HASH_CHARS]}"


def default_base_image(dockerfile: Path) -> str:
    match = BASE_IMAGE_ARG.search(dockerfile.read_text())
    return match.group(1) if match else ""


def warn_if_unpinned(base_image: str) -> None:
    """A tag can move under us; only a digest names the same bytes next month."""
    if base_image and "@sha256:" not in base_image:
        console.print(
            f"[yellow]warning:[/] base image {base_image} is not pinned by digest; "
            "pin it as NAME@sha256:... for a build that repeats"
        )


def docker(args: Sequence[str], *, stdin: str | None = None, hide: bool = False) -> str:
    """Run the local docker client; a one-line Exit with its last error line on failure."""
    result = subprocess.run(
        ["docker", *args],
        input=stdin,
        capture_output=hide,
        text=True,
        timeout=DOCKER_TIMEOUT_SECONDS,
        check=False,
        env=docker_env(),
    )
    if result.returncode != 0:
        detail = (result.stderr or "").strip().splitlines()[-1:] or ["see output above"]
        raise Exit(f"`docker {args[0]}` exited {result.returncode}: {detail[0]}")
    return result.stdout or ""


def docker_env() -> dict[str, str]:
    # Debian's docker.io has no buildx: the legacy builder, without its nag.
    return {**os.environ, "DOCKER_BUILDKIT": os.environ.get("DOCKER_BUILDKIT", "0")}


def image_exists(image: str) -> bool:
    result = subprocess.run(
        ["docker", "image", "inspect", image], capture_output=True, env=docker_env(), check=False
    )
    return result.returncode == 0


def build(image: str, *, build_args: dict[str, str], dockerfile: Path) -> float:
    """`docker build` the repository as `image`; returns seconds taken."""
    args = ["build", "--tag", image, "--file", str(dockerfile)]
    for name, value in build_args.items():
        args += ["--build-arg", f"{name}={value}"]
    started = time.monotonic()
    docker([*args, str(CHECKOUT)])
    return time.monotonic() - started


def push(image: str, login: RegistryLogin | None, server: str) -> PushReport:
    """Push `image`; the registry skips layers it has, and we count both kinds.

    argv lists only (the image name comes from a target file): with a login, `docker
    login` reads the token on stdin into a throw-away DOCKER_CONFIG, then `docker push`.
    """
    with private_docker_config() as config:
        env = {**docker_env(), "DOCKER_CONFIG": str(config)} if login else docker_env()
        started = time.monotonic()
        if login is not None:
            logged_in = _run_docker(docker_login_argv(login), env, stdin=login.password + "\n")
            if logged_in.returncode != 0:
                raise Exit(login_failure_message(server, logged_in.stderr + logged_in.stdout))
        result = _run_docker(["docker", "push", image], env)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise Exit(login_failure_message(server, result.stderr + result.stdout))
    return PushReport(
        image=image,
        seconds=seconds,
        pushed_layers=result.stdout.count(": Pushed"),
        existing_layers=result.stdout.count(": Layer already exists"),
    )


def _run_docker(
    argv: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=DOCKER_TIMEOUT_SECONDS,
        check=False,
        env=env,
    )


def local_image() -> str:
    """`glucose-training:<revision>[-dirty-<hash>]`, the name `build` gives the image."""
    return f"{LOCAL_REPOSITORY}:{image_tag()}"


def build_args_from(base_image: str, build_arg: list[str], extra_ca: str) -> dict[str, str]:
    """Dockerfile build args from the task flags (`NAME=VALUE` each)."""
    tag = image_tag()
    args = {"VERSION": tag, "REVISION": tag.split("-")[0]}
    if base_image:
        args["BASE_IMAGE"] = base_image
    if extra_ca:
        path = Path(extra_ca)
        if not path.is_file():
            raise Exit(f"--extra-ca {extra_ca}: no such file; expected a PEM CA bundle")
        args["EXTRA_CA_CERTS"] = path.read_text()
    for item in build_arg:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise Exit(f"--build-arg {item!r}: expected NAME=VALUE")
        args[name] = value
    return args


def ensure_built(base_image: str, build_arg: list[str], extra_ca: str, force: bool) -> str:
    """Build the image unless this exact tree is already built; returns its name."""
    name = local_image()
    if image_exists(name) and not force:
        console.print(f"image {name} already built (same git revision and changes)")
        return name
    dockerfile = CHECKOUT / "Dockerfile"
    args = build_args_from(base_image, build_arg, extra_ca)
    warn_if_unpinned(args.get("BASE_IMAGE") or default_base_image(dockerfile))
    seconds = build(name, build_args=args, dockerfile=dockerfile)
    console.print(f"built {name} in {seconds:.0f} s")
    return name


def require_image(name: str) -> str:
    """`name` (default: this tree's image) when it is built; Exit otherwise."""
    name = name or local_image()
    if not image_exists(name):
        raise Exit(f"image {name} is not built; run `fab build` first")
    return name
