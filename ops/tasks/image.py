"""Build the trainer image and push it to the stack's registry."""

from __future__ import annotations

from ops.image import build as image
from ops.image.shipping import push_image
from ops.target.resolve import resolve_target
from ops.tasks.flags import BUILD_HELP, IMAGE_HELP, STACK_HELP, TARGET_HELP, task


@task(
    iterable=["build_arg"],
    help={**BUILD_HELP, "force": "rebuild even when this tree's image exists"},
)
def build(c, base_image="", build_arg=None, extra_ca="", force=False):
    """Build the trainer image, tagged with the git revision."""
    # A dirty tree gets `-dirty-<hash of the changes>`: the tag always names one state.
    print(image.ensure_built(base_image, build_arg or [], extra_ca, force))


@task(help={"image-name": IMAGE_HELP, "target": TARGET_HELP, "stack": STACK_HELP})
def push(c, image_name="", target="", stack=""):
    """Push the image to the registry with a short-lived token."""
    name = image.require_image(image_name)
    print(push_image(resolve_target(target or None, stack or None), name))
