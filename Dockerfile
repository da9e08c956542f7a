# The trainer image: `python -m trainer ...` on the official CUDA PyTorch runtime.
#
#   docker build -t glucose-training-trainer \
#       --build-arg VERSION="$(git describe --always)" \
#       --build-arg REVISION="$(git rev-parse HEAD)" .
#   docker run --gpus all --stop-timeout 120 \
#       -v "$PWD/runs/r1:/workspace/runs/r1" glucose-training-trainer train ...
#   docker stop -t 120 <container>   # SIGTERM: checkpoint, upload, exit 75
#
# Layers go from rarely to often changed, so a code-only change rebuilds and
# pushes just the last COPY (tens of kB): base -> CA certs + locked deps + user
# -> runtime settings -> labels -> code.

# torch 2.13.0 built for CUDA 12.6: its kernels still cover sm_70 (V100, AWS p3)
# as well as T4, A10G, A100 and H100 (sm_75/86/80/90); the CUDA 13 builds dropped
# Volta. It is the torch the project supports (the Makefile pins 2.13.0 locally).
# Pin by digest for reproducible builds:
#   docker pull pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime
#   docker inspect --format '{{index .RepoDigests 0}}' pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime
#   docker build --build-arg BASE_IMAGE=pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime@sha256:<digest> .
# checkov cannot expand ARGs, so it sees no tag; tests/trainer/image/test_lint.py
# checks the default's tag instead.
# checkov:skip=CKV_DOCKER_7: FROM ${BASE_IMAGE}, whose default is version-tagged
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime
FROM ${BASE_IMAGE}

# Every instruction below is one build step, and the legacy builder (the only
# one Debian's docker.io has) copies the whole image for each step on the vfs
# driver: steps are merged where nothing is lost by it.

# Networks that intercept TLS (this project's CI machine, many companies) need
# their CA before pip can reach PyPI, and at run time for S3/Blob. Pass PEM text:
#   --build-arg EXTRA_CA_CERTS="$(cat /usr/local/share/ca-certificates/*.crt)"
# CA certificates are public, so a build arg (kept in the image history) is fine.
ARG EXTRA_CA_CERTS=""
COPY requirements/image.txt /opt/glucose-training/requirements.txt
# Runtime deps go hash-locked into a venv that still sees the base's packages:
# torch stays the base's CUDA build (the lock holds no torch and --no-deps stops
# pip from pulling one in), and the base's own site-packages stay untouched.
# The packages' own test suites (~100 MB, pandas' and scipy's mostly) are never
# imported at run time: they go before the import check below.
# The trainer runs as uid 10001 (high: Ubuntu 24.04 bases already own uid 1000);
# run dirs live under /workspace/runs/<run_id>, a volume on the box that must be
# writable by that uid. `fab` runs it as the box user's uid with HOME=/tmp, a fresh
# folder each container: matplotlib's font cache is built here once, in a folder any
# uid may write (MPLCONFIGDIR; matplotlib makes a temporary one, with a warning, where
# it cannot write), not at every run's first plot.
RUN if [ -n "${EXTRA_CA_CERTS}" ]; then \
        command -v update-ca-certificates >/dev/null \
            || { echo "EXTRA_CA_CERTS needs update-ca-certificates (package ca-certificates) in BASE_IMAGE" >&2; exit 1; }; \
        printf '%s\n' "${EXTRA_CA_CERTS}" > /tmp/extra-ca.pem; \
        awk '/-BEGIN CERTIFICATE-/ { n++ } n { print > ("/usr/local/share/ca-certificates/glucose-training-extra-" n ".crt") }' /tmp/extra-ca.pem; \
        rm /tmp/extra-ca.pem; \
        update-ca-certificates; \
    fi \
    && test -s /etc/ssl/certs/ca-certificates.crt \
    && python3 -m venv --system-site-packages /opt/glucose-training/venv \
    && /opt/glucose-training/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes \
        --disable-pip-version-check --cert /etc/ssl/certs/ca-certificates.crt \
        -r /opt/glucose-training/requirements.txt \
    && find /opt/glucose-training/venv/lib -depth -type d -path "*/site-packages/*/tests" -exec rm -rf {} + \
    && /opt/glucose-training/venv/bin/python -c "import torch, numpy, scipy, vitaldb, matplotlib, tensorboard, rich, boto3, azure.storage.blob, azure.identity, optuna" \
    && useradd --create-home --uid 10001 --user-group trainer \
    && mkdir -p /workspace/runs \
    && chown -R trainer:trainer /workspace \
    && mkdir -m 1777 /var/cache/matplotlib \
    && MPLCONFIGDIR=/var/cache/matplotlib \
        /opt/glucose-training/venv/bin/python -c "import matplotlib.font_manager"
# pip, requests (Azure), botocore and Python's ssl each carry their own idea of
# the trusted roots; point all of them at the system bundle holding the extras.
ENV VIRTUAL_ENV=/opt/glucose-training/venv \
    PATH="/opt/glucose-training/venv/bin:${PATH}" \
    PYTHONPATH=/opt/glucose-training/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/var/cache/matplotlib \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    AWS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /workspace
USER 10001:10001
# On SIGTERM the trainer writes and uploads a checkpoint and exits 75 (Azure's
# spot notice leaves 30 s; it takes under 25 s). Stop with `docker stop -t 120`
# (`docker run --stop-timeout 120`) so a big upload is not cut off by SIGKILL.
STOPSIGNAL SIGTERM
# A batch job serves nothing to probe; a hung trainer is caught by the box's
# watchdog from status.json's updated_at (ARCHITECTURE.md), not by docker.
HEALTHCHECK NONE
ENTRYPOINT ["python", "-m", "trainer"]

# Last, what changes with every commit: labels, then the code (tens of kB),
# owned by root so the trainer cannot rewrite itself.
ARG VERSION=dev REVISION=unknown SOURCE=https://github.com/glucose-training/glucose-training
LABEL org.opencontainers.image.title="glucose-training-trainer" \
      org.opencontainers.image.description="ResNet34-1D PPG->glucose trainer (python -m trainer)" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}"
COPY trainer /opt/glucose-training/app/trainer
# The run dir's names and records, shared with the box and `fab` (box/contract.py:
# standard library only): of the box programs, the trainer imports this one alone.
COPY box/__init__.py box/contract.py /opt/glucose-training/app/box/
