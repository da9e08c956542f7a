"""A hostile target file (they are shared like lab configs) against `fab`: every field
is checked with a one-line error, and what reaches `docker`/`ssh` is an argv list,
recorded here by fake binaries on PATH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from ops.image.build import push
from ops.image.registry import RegistryLogin, login_for, registry_kind
from ops.target.resolve import load_target_file
from tests.ops.conftest import assert_one_line_error

GOOD = {
    "cloud": "aws",
    "hosts": ["10.0.0.5"],
    "sshUser": "ubuntu",
    "sshPort": 22,
    "storageUri": "s3://bucket/stack",
    "registry": "123456789012.dkr.ecr.eu-west-1.amazonaws.com",
    "imageRepository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/glucose-training",
    "vmSize": "p3.2xlarge",
    "gpuCount": 1,
    "hourlyPriceUsd": 3.06,
    "spot": False,
    "boxRoot": "/var/lib/glucose-training",
    "containerEnv": {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"},
    "dockerNetwork": "host",
}

HOSTILE = [
    ("cloud", "aws; rm -rf ~"),
    ("hosts", ["-oProxyCommand=touch /tmp/pwned"]),
    ("hosts", ["box;id"]),
    ("hosts", [5]),
    ("sshUser", "-oProxyCommand=touch /tmp/pwned"),
    ("sshUser", "root;id"),
    ("sshUser", 1000),
    ("sshPort", "22"),
    ("sshPort", 0),
    ("sshPort", 70000),
    ("sshPort", True),
    ("sshKeyPath", ["id_ed25519"]),
    ("storageUri", "s3://bucket/p;touch /tmp/pwned"),
    ("storageUri", "http://example.com/bucket"),
    ("storageUri", "s3://bucket/../other-stack"),
    ("registry", "attacker.example/.azurecr.io"),
    ("registry", "-H tcp://evil"),
    ("registry", "host:5000:1"),
    ("imageRepository", "x;touch /tmp/pwned;#"),
    ("imageRepository", "--privileged"),
    ("imageRepository", "Glucose"),
    ("vmSize", "p3;id"),
    ("gpuCount", "1"),
    ("gpuCount", -1),
    ("hourlyPriceUsd", "cheap"),
    ("hourlyPriceUsd", -1),
    ("hourlyPriceUsd", float("nan")),
    ("spot", "yes"),
    ("boxRoot", "relative/root"),
    ("boxRoot", "/var/lib/x;id"),
    ("boxRoot", "/var/lib/../../etc"),
    ("boxRoot", "/a b"),
    ("containerEnv", ["A=1"]),
    ("containerEnv", {"NOT A NAME": "x"}),
    ("containerEnv", {"LD_PRELOAD;id": "x"}),
    ("containerEnv", {"A": {"nested": 1}}),
    ("dockerNetwork", "host --privileged"),
    ("dockerNetwork", "-x"),
    ("privateHosts", "10.0.0.5"),
    ("privateHosts", [5]),
    ("privateHosts", ["-oProxyCommand=touch /tmp/pwned"]),
    ("privateHosts", ["54.12.1.1"]),  # a rendezvous on a public address
]


def _target_file(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "lab.json"
    path.write_text(json.dumps({**GOOD, **changes}))
    return path


def test_the_good_target_file_loads(tmp_path: Path) -> None:
    assert load_target_file(_target_file(tmp_path)).host == "10.0.0.5"


@pytest.mark.parametrize(("key", "value"), HOSTILE, ids=lambda v: str(v)[:30])
def test_each_hostile_field_is_refused_in_one_line_naming_it(
    tmp_path: Path, key: str, value
) -> None:
    path = _target_file(tmp_path, **{key: value})
    with pytest.raises(Exit) as refused:
        load_target_file(path)
    message = str(refused.value.message)
    assert message.startswith(f"target file {path}: {key}"), message
    assert "\n" not in message


def test_a_secret_in_container_env_is_never_shown_in_the_error(tmp_path: Path) -> None:
    path = _target_file(tmp_path, containerEnv={"AWS_SECRET_ACCESS_KEY": "s3cr3t\nsecond"})
    with pytest.raises(Exit, match="containerEnv value of 'AWS_SECRET_ACCESS_KEY'") as refused:
        load_target_file(path)
    assert "s3cr3t" not in str(refused.value.message)


def test_fab_refuses_a_hostile_target_before_running_anything(
    tmp_path: Path, local_box, recording_tool
) -> None:
    docker, ssh = recording_tool("docker"), recording_tool("ssh")
    local_box.write_target(imageRepository="x;touch /tmp/pwned;#", registry="127.0.0.1:5000")
    assert_one_line_error(local_box.fab("push", "--image-name", "img:1"), "imageRepository")
    local_box.write_target(sshUser=f"-oProxyCommand=touch {tmp_path}/pwned")
    assert_one_line_error(local_box.fab("ssh", "--command", "true"), "sshUser")
    assert not [call for call in docker.calls() if call["argv"][:1] != ["image"]]
    assert ssh.calls() == []
    assert not (tmp_path / "pwned").exists()


def test_fab_ssh_passes_user_and_host_where_they_cannot_be_options(local_box, recording_tool):
    ssh = recording_tool("ssh")
    result = local_box.fab("ssh", "--command", "uptime")
    assert result.returncode == 0, result.stderr
    (call,) = ssh.calls()
    argv = call["argv"]
    assert argv[-5:] == ["-l", local_box.server.user, "--", local_box.server.host, "uptime"]


def test_push_is_argv_only_and_the_token_goes_on_stdin(recording_tool, monkeypatch):
    docker = recording_tool("docker")
    monkeypatch.setattr("ops.image.registry.RAM_DIR", Path("/no/dev/shm/here"))  # as on macOS
    login = RegistryLogin("registry.example:5000", "robot", "t0ken")
    push("registry.example:5000/glucose:1", login, "registry.example:5000")
    login_call, push_call = docker.calls()
    assert login_call["argv"] == [
        "login", "--username", "robot", "--password-stdin", "registry.example:5000"
    ]  # fmt: skip
    assert login_call["stdin"] == "t0ken\n"
    assert push_call["argv"] == ["push", "registry.example:5000/glucose:1"]
    assert login_call["docker_config"] == push_call["docker_config"]
    assert login_call["config_mode"] == "0o700"
    assert not Path(login_call["docker_config"]).exists()  # removed after the push
    assert all("t0ken" not in " ".join(call["argv"]) for call in docker.calls())


@pytest.mark.parametrize(
    ("server", "kind"),
    [
        ("glucosetraining.azurecr.io", "acr"),
        ("attacker.example/.azurecr.io", "plain"),
        ("glucosetraining.azurecr.io.attacker.example", "plain"),
        ("user@glucosetraining.azurecr.io", "plain"),
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com", "ecr"),
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com.evil.example", "plain"),
    ],
)
def test_registries_are_classified_by_their_parsed_host(server: str, kind: str) -> None:
    assert registry_kind(server) == kind


def test_a_registry_that_only_ends_in_azurecr_gets_no_azure_token() -> None:
    assert login_for("attacker.example/.azurecr.io") is None


def test_a_run_id_never_reaches_the_box_shell(local_box) -> None:
    result = local_box.fab("logs", "--run", "x; touch /tmp/pwned")
    assert_one_line_error(result, "--run 'x; touch /tmp/pwned' is not a usable run id")
