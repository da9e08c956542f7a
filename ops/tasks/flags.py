"""Help for the flags many `fab` tasks share, in one place (each task module reads it)."""

TARGET_HELP = "target file (default: $GLUCOSE_TARGET, else the Pulumi stack's outputs)"
STACK_HELP = "Pulumi stack to read outputs from (default: the selected stack)"
IMAGE_HELP = "a built image (default: this tree's, glucose-training:<git revision>)"
BUILD_HELP = {
    "base-image": "base image (default: the Dockerfile's pinned PyTorch CUDA runtime)",
    "build-arg": "extra docker build arg NAME=VALUE (repeatable)",
    "extra-ca": "PEM file of extra CA certificates (networks that intercept TLS)",
}
