"""The running stack's config, read from `pulumi.Config` and validated by `stack.config`."""

from __future__ import annotations

from typing import Any

import pulumi

from stack.config import KEYS, NAMESPACE, REGION_KEYS, StackConfig, validate


def load_stack_config() -> StackConfig:
    """Read `glucose-training:*` and the provider's region from the running stack."""
    runtime_config = pulumi.runtime.config

    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {key: cfg.get(key) for key in KEYS}
    # Keys set in the stack file but not known to us: typos must not pass silently.
    prefix = f"{NAMESPACE}:"
    seen = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    for full_key, value in seen.items():
        if full_key.startswith(prefix) and full_key[len(prefix) :] not in KEYS:
            raw[full_key[len(prefix) :]] = value
    cloud = raw.get("cloud")
    region = None
    if cloud in REGION_KEYS:
        namespace, key = REGION_KEYS[cloud].split(":")
        region = pulumi.Config(namespace).get(key)
    return validate(raw, region, project=pulumi.get_project(), stack=pulumi.get_stack())
