"""Azure's references, read offline: the azure-mgmt-* packages of the api-versions
azure-native sends.

azure-native's inputs are the REST API's JSON names with `properties` flattened away
(or the spec's `x-ms-client-name`, which is the azure-mgmt attribute camelCased), so
one model class per type maps every body input, and one request builder every input
that goes into the URL (names, scopes). What is checked:

- the body against the model, recursively: an unknown key, a read-only one, a missing
  required one, `_validation` (lengths, patterns, bounds, item counts) and the enum
  class the model's docstring names (Azure's enums are case-insensitive "known
  values"); msrest-style models and TypeSpec-style ones (azure-mgmt-consumption 11);
- the URL inputs, and the name azure-native generates where the program gives none,
  against the builder's own `_SERIALIZER.url(...)` constraints (the serializer checks
  nothing by itself any more: a validating stand-in runs them);
- that the builder's api-version is the one azure-native sends (its docstring says).
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import sys
import typing
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

from tests.pulumi.references.constraints import Constraint

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
# A resource the program gives no name is named by azure-native: the logical name and a
# random suffix, taken here as 8 lowercase letters and digits (no offline reference says
# how many; a longer one would only shorten the room the checks assume).
AUTONAME_SUFFIX = "a1b2c3d4"
_API_VERSION = re.compile(r"Uses Azure REST API version (\d{4}-\d\d-\d\d(?:-preview)?)")
_ENUM_DOC = r":vartype {attr}: (?:str or |list\[str or )~([\w.]+)"


@dataclass(frozen=True)
class Model:
    """Where one azure-native type's references are: its model and its PUT's builder."""

    models: str
    """The models module of the exact api-version, e.g. azure.mgmt.compute.models."""
    model: str
    operations: str
    """The module whose request builder `builder` makes the resource's PUT."""
    builder: str
    name_param: str
    """The builder's parameter that is the resource's own name (autonamed when absent)."""

    @property
    def model_class(self) -> type:
        return getattr(importlib.import_module(self.models), self.model)

    def builder_function(self) -> Any:
        return getattr(importlib.import_module(self.operations), self.builder)

    def url_params(self) -> list[str]:
        """The builder's URL parameters: its required arguments (the subscription too)."""
        signature = inspect.signature(self.builder_function())
        return [
            name
            for name, p in signature.parameters.items()
            if p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
        ]

    def fixed_params(self) -> dict[str, str]:
        """URL parts the builder fixes (`blob_services_name: Literal["default"]`)."""
        source = inspect.getsource(self.builder_function())
        return dict(re.findall(r'(\w+): Literal\["([^"]+)"\] = kwargs\.pop', source))


def camel(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def native_api_version(type_token: str) -> str:
    """The api-version azure-native sends for `type_token`, from its class's docstring."""
    _, module, name = type_token.split(":")
    cls = getattr(importlib.import_module(f"pulumi_azure_native.{module}"), name)
    versions = set(_API_VERSION.findall(inspect.getsource(cls)))
    assert len(versions) == 1, (type_token, versions)
    return versions.pop()


def builder_api_version(model: Model) -> str:
    """The api-version the reference's builder sends by default."""
    request = model.builder_function()(**{param: "x" for param in model.url_params()})
    query = urllib.parse.urlsplit(request.url).query
    return urllib.parse.parse_qs(query)["api-version"][0]


# --- URL inputs: the builder's own constraints --------------------------------------


class _ValidatingSerializer:
    """The operations module's serializer, with the URL constraints it no longer runs."""

    def __init__(self, serializer: Any, problems: list[str], where: str) -> None:
        self._serializer, self._problems, self._where = serializer, problems, where

    def __getattr__(self, name: str) -> Any:
        return getattr(self._serializer, name)

    def url(self, name: str, data: Any, data_type: str, **limits: Any) -> str:
        rule = Constraint(
            source=f"URL parameter {name}",
            type="string",
            pattern=limits.get("pattern"),
            pattern_anywhere=True,
            min=limits.get("min_length"),
            max=limits.get("max_length"),
        )
        self._problems += [f"{self._where} {camel(name)}: {p}" for p in rule.problems(data)]
        return self._serializer.url(name, data, data_type, **limits)


def url_problems(model: Model, inputs: dict, logical_name: str, where: str) -> list[str]:
    """The resource's URL inputs (and its generated name) against its builder."""
    problems: list[str] = []
    arguments = {}
    for param in model.url_params():
        value = SUBSCRIPTION if param == "subscription_id" else inputs.get(camel(param))
        if value is None and param == model.name_param:
            value = logical_name + AUTONAME_SUFFIX
        if value is None:
            problems.append(f"{where} {camel(param)}: missing, the URL needs it ({model.builder})")
            value = "missing"
        arguments[param] = value
    for param, fixed in model.fixed_params().items():
        if inputs.get(camel(param), fixed) != fixed:
            problems.append(
                f"{where} {camel(param)}: {inputs[camel(param)]!r}, the URL takes {fixed!r}"
            )
    operations = importlib.import_module(model.operations)
    validating = _ValidatingSerializer(operations._SERIALIZER, problems, where)
    with mock.patch.object(operations, "_SERIALIZER", validating):
        model.builder_function()(**arguments)
    return problems


# --- the body: msrest-style and TypeSpec-style models --------------------------------


def body_problems(model: Model, body: dict, where: str, excused: dict[str, str]) -> list[str]:
    """Every way `body` breaks the model (paths in `excused` are not walked)."""
    problems: list[str] = []
    module = importlib.import_module(model.models)
    _walk(model.model_class, body, "", module, excused, problems)
    return [f"{where} {p}" for p in problems]


def _walk(cls: type, value: dict, path: str, module: Any, excused: dict, out: list) -> None:
    if hasattr(cls, "_attribute_map"):
        _walk_msrest(cls, value, path, module, excused, out)
    else:
        _walk_typespec(cls, value, path, module, excused, out)


def _rest_name(key: str) -> str:
    return re.split(r"(?<!\\)\.", key)[-1].replace("\\", "")


def _walk_msrest(cls: type, value: dict, path: str, module: Any, excused: dict, out: list) -> None:
    fields = {}
    for attr, spec in cls._attribute_map.items():
        fields[_rest_name(spec["key"])] = fields[camel(attr)] = (attr, spec["type"])
    validation = getattr(cls, "_validation", {})
    for attr, rule in validation.items():
        name = _rest_name(cls._attribute_map[attr]["key"])
        if rule.get("required") and not rule.get("readonly") and name not in value:
            out.append(f"{_join(path, name)}: missing, required by {cls.__name__}")
    for key, inner in value.items():
        at = _join(path, key)
        if key not in fields:
            out.append(f"{at}: {cls.__name__} has no such property")
            continue
        attr, kind = fields[key]
        rule = validation.get(attr, {})
        if rule.get("readonly"):
            out.append(f"{at}: read-only in {cls.__name__}")
        if at in excused:
            continue
        out += [f"{at}: {p}" for p in _msrest_constraint(cls, attr, rule).problems(inner)]
        sub = getattr(module, kind.strip("[]{}"), None)
        if isinstance(sub, type) and not issubclass(sub, enum.Enum):
            for index, item in _items(inner, kind):
                if isinstance(item, dict):
                    _walk(sub, item, f"{at}{index}", module, excused, out)


def _msrest_constraint(cls: type, attr: str, rule: dict) -> Constraint:
    found = _enum_of(cls, attr)
    return Constraint(
        source=f"{cls.__module__.rsplit('.', 1)[0]} {cls.__name__}.{attr}",
        enum=tuple(m.value for m in found) if found else (),
        enum_ignores_case=True,
        pattern=rule.get("pattern"),
        pattern_anywhere=True,
        min=rule.get("minimum", rule.get("min_length")),
        max=rule.get("maximum", rule.get("max_length")),
        min_items=rule.get("min_items"),
        max_items=rule.get("max_items"),
    )


def _enum_of(cls: type, attr: str) -> type[enum.Enum] | None:
    match = re.search(_ENUM_DOC.format(attr=attr), cls.__doc__ or "")
    if not match:
        return None
    module, _, name = match.group(1).rpartition(".")
    found = getattr(importlib.import_module(module), name, None)
    return found if isinstance(found, type) and issubclass(found, enum.Enum) else None


def _items(value: Any, kind: str) -> Iterator[tuple[str, Any]]:
    if kind.startswith("[") and isinstance(value, list):
        yield from ((f"[{i}]", item) for i, item in enumerate(value))
    elif kind.startswith("{") and isinstance(value, dict):
        yield from ((f".{k}", item) for k, item in value.items())
    else:
        yield "", value


def _walk_typespec(
    cls: type, value: dict, path: str, module: Any, excused: dict, out: list
) -> None:
    """TypeSpec models: `rest_field`s (`_attr_to_rest_field`, filled on first use);
    `__flattened_items` names what azure-native sends outside `properties`."""
    cls()
    fields = {f._rest_name: (attr, f) for attr, f in cls._attr_to_rest_field.items()}
    flattened = {camel(f) for f in getattr(cls, f"_{cls.__name__}__flattened_items", [])}
    hints = _hints(cls)
    if flattened and "properties" in fields:
        inner = {k: v for k, v in value.items() if k in flattened}
        (properties,) = _model_args(hints["properties"])
        _walk_typespec(properties, inner, path, module, excused, out)
        value = {k: v for k, v in value.items() if k not in flattened}
    for key, inner in value.items():
        at = _join(path, key)
        if key not in fields:
            out.append(f"{at}: {cls.__name__} has no such property")
            continue
        hint = hints.get(fields[key][0])
        if at in excused:
            continue
        enums = [a for a in _flat_args(hint) if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums:
            rule = Constraint(f"{cls.__module__} {cls.__name__}.{key}", enum=tuple(
                m.value for m in enums[0]), enum_ignores_case=True)  # fmt: skip
            for item in inner if isinstance(inner, list) else [inner]:
                out += [f"{at}: {p}" for p in rule.problems(item)]
        for sub in _model_args(hint):
            nested = inner.items() if "dict" in str(hint).lower() else [("", inner)]
            for name, item in nested:
                if isinstance(item, dict):
                    _walk_typespec(sub, item, _join(at, name), module, excused, out)


def _hints(cls: type) -> dict[str, Any]:
    # The models import each other under TYPE_CHECKING only: resolve `_models.X` by hand.
    package = importlib.import_module(cls.__module__.rsplit(".", 1)[0])
    return typing.get_type_hints(cls, {**vars(sys.modules[cls.__module__]), "_models": package})


def _flat_args(hint: Any) -> list[Any]:
    found = []
    for arg in typing.get_args(hint) or (hint,):
        found += list(typing.get_args(arg)) or [arg]
    return found


def _model_args(hint: Any) -> list[type]:
    """The model classes in a type hint (TypeSpec models live in `<package>.models._models`)."""
    return [
        a
        for a in _flat_args(hint)
        if isinstance(a, type)
        and a.__module__.endswith("._models")
        and not issubclass(a, enum.Enum)
    ]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path and key else path or key


# --- what no model says: limits from the services' documentation --------------------


@dataclass(frozen=True)
class Documented:
    """A limit only the documentation states, at `path` (dotted, `*` for a map's values)."""

    path: str
    constraint: Constraint

    def problems(self, body: dict, where: str) -> list[str]:
        return [
            f"{where} {self.path}: {p}"
            for value in values_at(body, self.path)
            for p in self.constraint.problems(value)
        ]


def values_at(value: Any, path: str) -> Iterator[Any]:
    """Values at `path` ("a.b[]" each item, "a.*" each value of a map, "a.@keys" its keys)."""
    if not path:
        yield value
        return
    head, _, rest = path.partition(".")
    if head == "*" and isinstance(value, dict):
        for inner in value.values():
            yield from values_at(inner, rest)
    elif head == "@keys" and isinstance(value, dict):
        yield from value
    elif head.endswith("[]") and isinstance(value, dict):
        for inner in value.get(head[:-2]) or []:
            yield from values_at(inner, rest)
    elif isinstance(value, dict) and head in value:
        yield from values_at(value[head], rest)
