"""The forms a target's values may take, narrow on purpose.

A target's values reach ssh's option parser, `docker` argv lists, remote shell lines
and registry logins: a host is an IP address or a DNS name, a user a POSIX-style name,
a registry `host[:port]`, a box root a plain absolute path; none can begin with `-`
or hold a shell metacharacter. `ops.target.schema` holds each field to its form.
"""

from __future__ import annotations

import ipaddress
import re

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
# Docker's reference grammar for a repository path (distribution/reference).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_PATH = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DOCKER_NETWORK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
BOX_ROOT = re.compile(r"^(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)+$")
TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
STORAGE_URI_CHARS = re.compile(r"^[A-Za-z0-9:/._~%@+=-]+$")
# An EC2 instance id, or an Azure VM's resource id (ARM paths: never a shell word).
BOX_ID = re.compile(
    r"^(?:i-[0-9a-f]{8,17}|/subscriptions/[A-Za-z0-9-]{1,64}/resourceGroups/[\w.()-]{1,90}"
    r"/providers/Microsoft\.Compute/virtualMachines/[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
)
# An EventBridge schedule's name, or an Azure VM's DevTestLab shutdown schedule id.
SCHEDULE = re.compile(
    r"^(?:[A-Za-z0-9_.-]{1,64}|/subscriptions/[A-Za-z0-9-]{1,64}/resourceGroups/[\w.()-]{1,90}"
    r"/providers/Microsoft\.DevTestLab/schedules/shutdown-computevm-[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
)
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def is_host(host: str) -> bool:
    """An IP address (v4 or v6) or a DNS name: never an ssh option, never a shell word."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(HOST_NAME.match(host))
    return True


def is_private_address(host: str) -> bool:
    """A private (or loopback) IP address: where the boxes of one stack meet."""
    try:
        return ipaddress.ip_address(host).is_private
    except ValueError:
        return False


def registry_host(registry: str) -> str | None:
    """The lowercase host of a registry written `host[:port]`; None for any other form
    (a path, a user, a scheme): the caller must not guess which host it means."""
    host, sep, port = registry.rpartition(":") if ":" in registry else (registry, "", "")
    if sep and not (port.isdigit() and 0 < int(port) < 65536):
        return None
    return host.lower() if is_host(host) else None


def image_reference_ok(reference: str) -> bool:
    """`[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]`, Docker's grammar: never an option."""
    name, _, digest = reference.partition("@")
    if digest and not DIGEST.match(digest):
        return False
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    return repository_ok(repository) and (not tag or bool(TAG.match(tag)))


def storage_uri_ok(uri: str) -> bool:
    from trainer.storage import StorageError, parse_uri

    if not STORAGE_URI_CHARS.match(uri):
        return False
    try:
        location = parse_uri(uri)
    except StorageError:
        return False
    return ".." not in f"{location.path}/{location.prefix}".split("/")


def repository_ok(repository: str) -> bool:
    """A repository path, optionally after a registry host (the stacks export
    `REGISTRY/glucose-training`): Docker's rule, a first part with '.' or ':' is a host."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return registry_host(first) is not None and bool(REPOSITORY_PATH.match(rest))
    return bool(REPOSITORY_PATH.match(repository))


def box_root_ok(box_root: str) -> bool:
    return bool(BOX_ROOT.match(box_root)) and ".." not in box_root.split("/")
