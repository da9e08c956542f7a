"""`fab preflight --config-file`: what it reads of a stack file."""

from __future__ import annotations

import yaml

from ops.preflight import checks as preflight


def test_a_secret_value_is_left_to_pulumi_preview(tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    secret = {"secure": "v1:AAABAC2kZ0+notreal"}
    config = {"glucose-training:notifyWebhook": secret, "glucose-training:cloud": "aws"}
    path.write_text(yaml.safe_dump({"config": config}))
    assert preflight.settings_from_file(path).values == {"glucose-training:cloud": "aws"}
