"""Build the trainer image and push it to the stack's registry."""

from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit
from rich.console import Console

from ops.image import build as image
from ops.image.registry import login_for
from ops.target.resolve import resolve_target

LOCAL_REPOSITORY = "glucose-training"
TARGET_HELP = "target file (default: $GLUCOSE_TARGET, else the Pulumi stack's outputs)"
STACK_HELP = "Pulumi stack to read outputs from (default: the selected stack)"
IMAGE_HELP = "a built image (default: this tree's, glucose-training:<git revision>)"
BUILD_HELP = {
    "base-image": "base image (default: the Dockerfile's pinned PyTorch CUDA runtime)",
    "build-arg": "extra docker build arg NAME=VALUE (repeatable)",
    "extra-ca": "PEM file of extra CA certificates (networks that intercept TLS)",
}

console = Console(stderr=True, soft_wrap=True)


def local_image() -> str:
    """`glucose-training:<revision>[-dirty-<hash>]`, the name `build` gives the image."""
    return f"{LOCAL_REPOSITORY}:{image.image_tag()}"


def build_args_from(base_image: str, build_arg: list[str], extra_ca: str) -> dict[str, str]:
    """Dockerfile build args from the task flags (`NAME=VALUE` each)."""
    tag = image.image_tag()
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
    if image.image_exists(name) and not force:
        console.print(f"image {name} already built (same git revision and changes)")
        return name
    dockerfile = image.REPO_ROOT / "Dockerfile"
    args = build_args_from(base_image, build_arg, extra_ca)
    image.warn_if_unpinned(args.get("BASE_IMAGE") or image.default_base_image(dockerfile))
    seconds = image.build(name, build_args=args, dockerfile=dockerfile)
    console.print(f"built {name} in {seconds:.0f} s")
    return name


@task(
    iterable=["build_arg"],
    help={**BUILD_HELP, "force": "rebuild even when this tree's image exists"},
)
def build(c, base_image="", build_arg=None, extra_ca="", force=False):
    """Build the trainer image, tagged with the git revision."""
    # A dirty tree gets `-dirty-<hash of the changes>`: the tag always names one state.
    print(ensure_built(base_image, build_arg or [], extra_ca, force))


def push_image(target, name: str) -> str:
    """Tag `name` for the target's registry and push it; returns the remote name."""
    if not target.registry:
        raise Exit(
            f"{target.source} has no registry; `fab train` ships the image over SSH "
            "instead (docker save | docker load)"
        )
    remote = f"{target.image_name}:{name.rsplit(':', 1)[1]}"
    image.docker(["tag", name, remote])
    report = image.push(remote, login_for(target.registry), target.registry)
    console.print(
        f"pushed {remote} in {report.seconds:.1f} s: {report.pushed_layers} layers sent, "
        f"{report.existing_layers} already in the registry"
    )
    return remote


def require_image(name: str) -> str:
    """`name` (default: this tree's image) when it is built; Exit otherwise."""
    name = name or local_image()
    if not image.image_exists(name):
        raise Exit(f"image {name} is not built; run `fab build` first")
    return name


def image_on_box(box, image_name: str, base_image: str, build_arg: list, extra_ca: str) -> str:
    """`image_name` (else this tree's image, built when missing) pushed to the stack's
    registry if it has one and brought onto the box; the name the box knows it by."""
    return image_on_boxes([box], image_name, base_image, build_arg, extra_ca)


def image_on_boxes(
    boxes: list, image_name: str, base_image: str, build_arg: list, extra_ca: str
) -> str:
    """`image_on_box` for every box of a stack: built and pushed once, then brought onto
    each box."""
    from ops.run import launch

    local = (
        require_image(image_name)
        if image_name
        else ensure_built(base_image, build_arg, extra_ca, force=False)
    )
    target = boxes[0].target
    remote = push_image(target, local) if target.registry else None
    return {launch.ship_image(box, local, remote) for box in boxes}.pop()


@task(help={"image-name": IMAGE_HELP, "target": TARGET_HELP, "stack": STACK_HELP})
def push(c, image_name="", target="", stack=""):
    """Push the image to the registry with a short-lived token."""
    name = require_image(image_name)
    print(push_image(resolve_target(target or None, stack or None), name))
