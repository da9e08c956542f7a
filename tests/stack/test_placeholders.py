"""stack.config.placeholder_problems: the example stack files' CHANGE values, left in,
are problems that say how to set your own, for `pulumi up` and `fab preflight` alike."""

from __future__ import annotations

import json

import pytest
import yaml

from stack.config import ConfigError, validate
from tests.paths import REPO

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1Y29zZS10cmFpbmluZy10ZXN0LWtleQ me@laptop"
YOURS = {"sshPublicKey": KEY, "sshAllowedCidr": "198.18.0.7/32", "alertEmails": "ana@lab.dev"}
EXAMPLES = ("Pulumi.azure-example.yaml", "Pulumi.aws-example.yaml")


def _example(name: str) -> tuple[dict[str, str], str]:
    """An example file's config as Pulumi hands it to the program, and its region."""
    config = yaml.safe_load((REPO / name).read_text())["config"]
    raw = {
        key.split(":", 1)[1]: value if isinstance(value, str) else json.dumps(value)
        for key, value in config.items()
        if key.startswith("glucose-training:")
    }
    return raw, config.get("azure-native:location") or config["aws:region"]


def _problems(raw: dict, region: str = "eastus") -> list[str]:
    with pytest.raises(ConfigError) as refused:
        validate(raw, region)
    return refused.value.problems


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_stack_as_it_stands_names_each_placeholder_with_its_fix(name):
    raw, region = _example(name)
    key, cidr, emails = _problems(raw, region)
    assert key.startswith("sshPublicKey is the example's placeholder (ChangeMe...)")
    assert "pulumi config set glucose-training:sshPublicKey" in key
    assert cidr.startswith("sshAllowedCidr '203.0.113.7/32' is a documentation address")
    assert "checkip" in cidr
    assert emails.startswith("alertEmails you@example.org: example domains")
    assert "git config user.email" in emails


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_stack_with_its_change_lines_filled_is_valid(name):
    raw, region = _example(name)
    assert validate({**raw, **YOURS}, region).alert_emails == ("ana@lab.dev",)


@pytest.mark.parametrize("cidr", ["192.0.2.1", "198.51.100.0/28", "203.0.113.7/32"])
def test_every_documentation_network_is_refused_as_ssh_source(cidr):
    (problem,) = _problems({"cloud": "azure", **YOURS, "budgetAmount": "9", "sshAllowedCidr": cidr})
    assert problem.startswith(f"sshAllowedCidr {cidr!r} is a documentation address")


@pytest.mark.parametrize(
    "email",
    ["me@example.com", "me@mail.example.net", "me@lab.test", "me@x.invalid", "me@box.example"],
)
def test_every_reserved_mail_domain_is_refused_for_alerts(email):
    (problem,) = _problems({"cloud": "azure", **YOURS, "budgetAmount": "9", "alertEmails": email})
    assert problem.startswith(f"alertEmails {email}: example domains")


def test_an_address_that_only_resembles_an_example_domain_is_kept():
    config = {"cloud": "azure", **YOURS, "budgetAmount": "9", "alertEmails": "me@myexample.org"}
    assert validate(config, "eastus").alert_emails == ("me@myexample.org",)
