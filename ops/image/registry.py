"""Short-lived registry tokens, handed to `docker login --password-stdin`.

ECR: boto3 `get_authorization_token` (12 h). ACR: an AAD access token exchanged at
the registry's `/oauth2/exchange` for a refresh token (3 h), the same exchange `az acr
login --expose-token` performs. A registry that is neither (a lab's, or the tests'
127.0.0.1 one) is used without login. Which one a registry is follows from its parsed
host name only (`ops.target.forms.registry_host`): `attacker.example/.azurecr.io`
ends in `.azurecr.io` but is no Azure registry, and never gets the user's Azure token.
Tokens travel on stdin only, and docker's config that `docker login` writes goes to a
throw-away directory (in RAM under `/dev/shm` where there is one; macOS has none, so
there the private temp dir) that is removed right after the pull/push.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shlex
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from invoke.exceptions import Exit

from ops import azure_login
from ops.target.forms import registry_host

ECR_HOST = re.compile(r"^(\d+)\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
ACR_SUFFIX = ".azurecr.io"
# ACR names are 5-50 letters and digits (Microsoft.ContainerRegistry naming rules).
ACR_HOST = re.compile(r"^[a-z0-9]{5,50}\.azurecr\.io$")
RAM_DIR = Path("/dev/shm")
ACR_NULL_USER = "00000000-0000-0000-0000-000000000000"
HTTP_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class RegistryLogin:
    """Credentials for one registry; `password` never appears in a repr or a log."""

    server: str
    username: str
    password: str = field(repr=False)


def registry_kind(server: str) -> str:
    """`ecr`, `acr` or `plain` (no login) for a registry, by its parsed host name."""
    host = registry_host(server)
    if host is not None and ECR_HOST.match(host):
        return "ecr"
    if host is not None and ACR_HOST.match(host):
        return "acr"
    return "plain"


def login_for(server: str) -> RegistryLogin | None:
    """A fresh short-lived login for `server`, or None when it needs none."""
    kind = registry_kind(server)
    if kind == "ecr":
        return _ecr_login(server)
    if kind == "acr":
        return _acr_login(server)
    return None


def _ecr_login(server: str) -> RegistryLogin:
    import boto3
    import botocore.exceptions

    region = ECR_HOST.match(registry_host(server)).group(2)
    try:
        response = boto3.client("ecr", region_name=region).get_authorization_token()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        raise Exit(
            f"registry auth failure: ECR refused a token for {server} ({error}); "
            "check `aws sts get-caller-identity` and that you may ecr:GetAuthorizationToken"
        ) from None
    data = response["authorizationData"][0]
    username, password = base64.b64decode(data["authorizationToken"]).decode().split(":", 1)
    return RegistryLogin(server=server, username=username, password=password)


def _acr_login(server: str) -> RegistryLogin:
    from azure.core.exceptions import ClientAuthenticationError

    try:
        aad_token = azure_login.arm_token()
    except ClientAuthenticationError as error:
        first_line = str(error).splitlines()[0]
        raise Exit(
            f"registry auth failure: no Azure credential for {server} ({first_line}); "
            "run `az login`"
        ) from None
    body = urllib.parse.urlencode(
        {"grant_type": "access_token", "service": server, "access_token": aad_token}
    ).encode()
    request = urllib.request.Request(f"https://{server}/oauth2/exchange", data=body)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
            refresh_token = json.load(response)["refresh_token"]
    except (OSError, KeyError, json.JSONDecodeError) as error:
        raise Exit(
            f"registry auth failure: {server} refused the AAD token exchange ({error}); "
            "check you have AcrPush on the registry (`az acr login --name "
            f"{server.removesuffix(ACR_SUFFIX)}` shows the same error)"
        ) from None
    return RegistryLogin(server=server, username=ACR_NULL_USER, password=refresh_token)


@contextlib.contextmanager
def private_docker_config() -> Iterator[Path]:
    """A throw-away DOCKER_CONFIG directory (0700), in RAM where the system has it."""
    directory = tempfile.mkdtemp(
        prefix="glucose-docker.", dir=RAM_DIR if RAM_DIR.is_dir() else None
    )
    try:
        yield Path(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def docker_login_argv(login: RegistryLogin) -> list[str]:
    """`docker login` reading the token from stdin (never an argument)."""
    return ["docker", "login", "--username", login.username, "--password-stdin", login.server]


def with_docker_login(login: RegistryLogin | None, command: str) -> tuple[str, str | None]:
    """A shell line for the box that runs `command` logged in via a throw-away
    DOCKER_CONFIG, and its stdin. Without a login the command runs as is. With one,
    `docker login` reads the token from stdin into a directory under /dev/shm (the
    temp dir where there is none) that the trap removes on exit. Every word of the
    line is quoted by the caller or here.
    """
    if login is None:
        return command, None
    line = (
        "set -e; "
        "cfg=$(mktemp -d /dev/shm/glucose-docker.XXXXXX 2>/dev/null || mktemp -d); "
        "trap 'rm -rf \"$cfg\"' EXIT; "
        'export DOCKER_CONFIG="$cfg"; '
        f"{shlex.join(docker_login_argv(login))} >/dev/null; "
        f"{command}"
    )
    return line, login.password + "\n"


def login_failure_message(server: str, output: str) -> str:
    """One line for a `docker login` / push / pull that the registry refused."""
    last_line = (output.strip().splitlines() or ["no output"])[-1]
    return (
        f"registry auth failure at {server}: {last_line}; "
        "check your cloud login (`aws sts get-caller-identity` / `az account show`) "
        "and that the stack's registry output is the registry you may push to"
    )
