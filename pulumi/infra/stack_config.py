"""The running stack's config, read from `pulumi.Config` and validated by `stack.config`."""

from __future__ import annotations

from typing import Any

import pulumi

from stack.config import (
    FIELDS_BY_KEY,
    NAMESPACE,
    REGION_KEYS,
    SECRET_KEYS,
    ConfigError,
    StackConfig,
    validate,
)


def load_stack_config() -> StackConfig:
    """Read `glucose-training:*` and the provider's region from the running stack."""
    runtime_config = pulumi.runtime.config

    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {key: cfg.get(key) for key in FIELDS_BY_KEY if key not in SECRET_KEYS}
    # Read as they are stored: the program keeps them secret (box_user_data, the outputs).
    raw |= {key: runtime_config.get_config(f"{NAMESPACE}:{key}") for key in SECRET_KEYS}
    plain = [
        key
        for key in SECRET_KEYS
        if raw[key] is not None and not runtime_config.is_config_secret(f"{NAMESPACE}:{key}")
    ]
    if plain:
        raise ConfigError(
            [
                f"{key}: stored in plain text in the stack file, expected a secret (whoever has "
                f"it may use it): `pulumi config set --secret {NAMESPACE}:{key} VALUE`"
                for key in plain
            ]
        )
    # Keys set in the stack file but not known to us: typos must not pass silently.
    prefix = f"{NAMESPACE}:"
    seen = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    for full_key, value in seen.items():
        if full_key.startswith(prefix) and full_key[len(prefix) :] not in FIELDS_BY_KEY:
            raw[full_key[len(prefix) :]] = value
    cloud = raw.get("cloud")
    region = None
    if cloud in REGION_KEYS:
        namespace, key = REGION_KEYS[cloud].split(":")
        region = pulumi.Config(namespace).get(key)
    return validate(raw, region, project=pulumi.get_project(), stack=pulumi.get_stack())
