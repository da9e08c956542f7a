"""Registry logins: short-lived tokens on stdin, nothing left on disk, clear failures."""

import glob
import uuid

import pytest
from invoke.exceptions import Exit

from ops.image.build import push
from ops.image.registry import RegistryLogin, login_for, registry_kind
from ops.image.shipping import box_has_image, load_on_box, pull_on_box
from ops.remote.ssh import Box
from ops.target.resolve import load_target_file


def test_registry_kind_follows_the_host_name():
    assert registry_kind("123456789012.dkr.ecr.eu-west-1.amazonaws.com") == "ecr"
    assert registry_kind("glucosetraining.azurecr.io") == "acr"
    assert registry_kind("127.0.0.1:5000") == "plain"
    assert login_for("127.0.0.1:5000") is None


def test_ecr_token_comes_from_get_authorization_token(moto_server, monkeypatch):
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    login = login_for("123456789012.dkr.ecr.us-east-1.amazonaws.com")
    assert login.username == "AWS"
    assert login.password  # moto's token: what boto3 decoded, never a fixed string
    assert login.password not in repr(login)


@pytest.fixture
def retag(docker_engine, tiny_image):
    """Tag the tiny image for a registry; the tags go again after the test."""
    tags = []

    def tag(registry_address: str) -> str:
        remote = f"{registry_address}/fab-test/tiny:{uuid.uuid4().hex[:8]}"
        docker_engine.run(["tag", tiny_image, remote], timeout_seconds=60)
        tags.append(remote)
        return remote

    yield tag
    if tags:
        docker_engine.run(["image", "rm", *tags], timeout_seconds=60, check=False)


def _docker_shm_dirs():
    return glob.glob("/dev/shm/glucose-docker.*")


def test_push_sends_layers_once_then_finds_them_in_the_registry(retag, empty_registry):
    address = empty_registry.address
    remote = retag(address)
    first = push(remote, None, address)
    assert first.pushed_layers == 1 and first.existing_layers == 0
    second = push(remote, None, address)
    assert second.pushed_layers == 0 and second.existing_layers == 1


def test_push_with_a_login_leaves_no_credential_behind(retag, empty_auth_registry):
    registry = empty_auth_registry
    before = set(_docker_shm_dirs())
    remote = retag(registry.address)
    login = RegistryLogin(registry.address, registry.username, registry.password)
    assert push(remote, login, registry.address).pushed_layers == 1
    assert set(_docker_shm_dirs()) == before


def test_wrong_registry_token_is_a_one_line_auth_failure(retag, auth_registry):
    remote = retag(auth_registry.address)
    login = RegistryLogin(auth_registry.address, auth_registry.username, "expired-token")
    with pytest.raises(Exit, match=f"registry auth failure at {auth_registry.address}"):
        push(remote, login, auth_registry.address)


def test_push_without_login_to_a_registry_that_wants_one_fails_clearly(retag, auth_registry):
    remote = retag(auth_registry.address)
    with pytest.raises(Exit, match="registry auth failure"):
        push(remote, None, auth_registry.address)


@pytest.fixture
def box(local_box, monkeypatch):
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(local_box.known_hosts))
    return Box(load_target_file(local_box.target_file))


def test_box_pulls_with_a_token_given_on_stdin(docker_engine, retag, auth_registry, box):
    remote = retag(auth_registry.address)
    login = RegistryLogin(auth_registry.address, auth_registry.username, auth_registry.password)
    push(remote, login, auth_registry.address)
    docker_engine.run(["image", "rm", remote], timeout_seconds=60)
    assert not box_has_image(box, remote)
    pull_on_box(box, remote, login, auth_registry.address)
    assert box_has_image(box, remote)


def test_box_pull_with_a_bad_token_is_an_auth_failure(auth_registry, box):
    remote = f"{auth_registry.address}/fab-test/never-pushed:1"
    login = RegistryLogin(auth_registry.address, auth_registry.username, "wrong")
    with pytest.raises(Exit, match="registry auth failure"):
        pull_on_box(box, remote, login, auth_registry.address)


def test_image_streams_over_ssh_into_docker_load(docker_engine, tiny_image, box):
    report = load_on_box(box, tiny_image)
    assert f"Loaded image: {tiny_image}" in report.output
    assert report.bytes_sent > 2400  # the tar holds hello.txt (2.4 kB) and metadata
