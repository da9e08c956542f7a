"""Run a real Pulumi program under `pulumi.runtime.set_mocks` and record what it declares.

The Pulumi CLI and provider plugins cannot run here, so tests drive the program through
the SDK's mock monitor and assert on what reached it: every resource's type, logical
name, inputs (camelCase, enums as plain strings — as the engine would see them), the
options that matter for safety (parent, protect, retainOnDelete, ignoreChanges), and the
stack's exports. Shared by the Azure, AWS and policy-pack tests.

    recorder = Recorder(outputs={"azure-native:compute:VirtualMachine": vm_outputs})
    result = run_program(main, recorder, config={"glucose-training:cloud": "azure", ...})
    vm = result.one("azure-native:compute:VirtualMachine")
"""

from __future__ import annotations

import asyncio
import contextlib
import runpy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from stack.config import SECRET_KEYS
from tests.paths import PULUMI_DIR

PROGRAM = PULUMI_DIR / "__main__.py"
OutputsHook = Callable[[pulumi_mocks.MockResourceArgs], dict[str, Any]]
IdHook = Callable[[pulumi_mocks.MockResourceArgs], str]
CallHook = Callable[[pulumi_mocks.MockCallArgs], dict[str, Any]]


@dataclass
class Recorded:
    """One resource as the engine would have received it."""

    type: str
    name: str
    urn: str
    custom: bool
    inputs: dict[str, Any]
    id: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None  # the parent's URN
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    ignore_changes: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()


@dataclass
class RunResult:
    """Everything one program run declared, in name order, and its exports. The engine
    gets sibling resources in whatever order their inputs resolve, which differs from run
    to run under load: name order (glucose-box-0 before glucose-box-1) is the box's rank
    and the same in every run."""

    resources: list[Recorded]
    exports: dict[str, Any]
    calls: list[tuple[str, dict[str, Any]]]

    def of_type(self, type_: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Recorded:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, found {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> Recorded:
        found = [r for r in self.resources if r.name == name]
        assert len(found) == 1, f"expected one resource named {name}, found {len(found)}"
        return found[0]

    @property
    def custom(self) -> list[Recorded]:
        """Resources a provider would create (components left out)."""
        return [r for r in self.resources if r.custom]


class Recorder(pulumi.runtime.Mocks):
    """Mocks that echo inputs back as outputs, plus per-type computed outputs.

    A provider computes some outputs (a public IP's address, a registry's login
    server); `outputs` maps a resource type to a function returning those. The id of
    every resource is `<type>/<name>`, unique per program and easy to assert on, unless
    `ids` says otherwise (the cloud's own id formats, where a reference checks them).
    """

    def __init__(
        self,
        outputs: dict[str, OutputsHook] | None = None,
        calls: dict[str, CallHook] | None = None,
        ids: IdHook | None = None,
    ) -> None:
        self._outputs = outputs or {}
        self._calls = calls or {}
        self._ids = ids or (lambda args: f"{args.typ}/{args.name}")
        self.resources: list[Recorded] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._pending_options: dict[tuple[str, str], dict[str, Any]] = {}

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict]:
        resource_id = self._ids(args) if args.custom else None
        state = {"name": args.name, **args.inputs}
        if args.typ in self._outputs:
            state.update(self._outputs[args.typ](args))
        options = self._pending_options.pop((args.typ, args.name), {})
        self.resources.append(
            Recorded(
                type=args.typ,
                name=args.name,
                custom=bool(args.custom),
                inputs=dict(args.inputs),
                id=resource_id,
                outputs=state,
                **options,
            )
        )
        return resource_id, state

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list | None]:
        self.calls.append((args.token, dict(args.args)))
        if args.token in self._calls:
            answer = self._calls[args.token](args)
            # (outputs, [(property, reason)]): the provider refused, as a real one can.
            return answer if isinstance(answer, tuple) else (answer, [])
        return {}, []

    def note_options(self, type_: str, name: str, options: dict[str, Any]) -> None:
        self._pending_options[(type_, name)] = options


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, also keeping the request's resource options."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self.recorder = recorder

    def RegisterResource(self, request):
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type != "pulumi:pulumi:Stack":
            self.recorder.note_options(
                request.type,
                request.name,
                {
                    "urn": urn,
                    "parent": request.parent or None,
                    "protect": bool(request.protect),
                    "retain_on_delete": bool(request.retainOnDelete),
                    "delete_before_replace": bool(request.deleteBeforeReplace),
                    "ignore_changes": tuple(request.ignoreChanges),
                    "dependencies": tuple(request.dependencies),
                },
            )
        return super().RegisterResource(request)


def run_program(
    program: Callable[[], Any],
    recorder: Recorder,
    config: dict[str, str] | None = None,
    project: str = "glucose-training",
    stack: str = "test",
    secret_keys: list[str] | None = None,
) -> RunResult:
    """Run `program` once against fresh mocks and config; exceptions propagate.

    Each call starts from a clean runtime, so a test can run the program many times.
    `secret_keys`: the config keys stored as secrets; by default stack.config's
    SECRET_KEYS, as `pulumi config set --secret` stores them.
    """
    config = config or {}
    if secret_keys is None:
        secret_keys = [key for key in config if key.partition(":")[2] in SECRET_KEYS]
    with _fresh_config(config, secret_keys):
        pulumi.runtime.settings.set_root_resource(None)  # a new Stack, so no stale exports
        pulumi.runtime.set_mocks(
            recorder,
            project=project,
            stack=stack,
            preview=False,
            monitor=_RecordingMonitor(recorder),
        )
        exports: dict[str, Any] = {}

        @pulumi.runtime.test
        def body():
            program()
            root = pulumi.runtime.settings.get_root_resource()
            outputs = dict(getattr(root, "outputs", {}) or {})
            return pulumi.Output.all(**outputs).apply(exports.update) if outputs else None

        with _failures_retrieved():
            body()
    resources = sorted(recorder.resources, key=lambda r: r.name)
    return RunResult(resources=resources, exports=exports, calls=recorder.calls)


def main_program(transformation: Callable | None = None) -> Callable[[], None]:
    """pulumi/__main__.py as the engine runs it; `transformation` (a stack
    transformation, e.g. a sabotage in the policy tests) is registered first."""

    def program() -> None:
        if transformation is not None:
            pulumi.runtime.register_stack_transformation(transformation)
        runpy.run_path(str(PROGRAM))

    return program


@contextlib.contextmanager
def _failures_retrieved() -> Iterator[None]:
    """A program that raises leaves every resource waiting on the failed one holding
    an exception nobody retrieves; asyncio reports each when it is collected, often at
    interpreter exit, where the reports bury pytest's summary. The test sees the
    exception itself, so from then on the loop drops exactly those echoes."""
    try:
        yield
    except BaseException:
        asyncio.get_event_loop().set_exception_handler(_drop_unretrieved_futures)
        raise


def _drop_unretrieved_futures(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    if context.get("message") != "Future exception was never retrieved":
        loop.default_exception_handler(context)


@contextlib.contextmanager
def _fresh_config(config: dict[str, str], secret_keys: list[str]) -> Iterator[None]:
    saved = dict(pulumi.runtime.config.CONFIG.get())
    saved_secret = list(pulumi.runtime.config._SECRET_KEYS.get())
    pulumi.runtime.set_all_config(dict(config), secret_keys)
    try:
        yield
    finally:
        pulumi.runtime.set_all_config(saved, saved_secret)


def is_secret(value: Any) -> bool:
    """Whether an input reached the monitor as a secret."""
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def unwrap(value: Any) -> Any:
    """Inputs that reached the monitor as secrets or resource references, made plain."""
    if isinstance(value, dict) and rpc._special_sig_key in value:
        return unwrap(value.get("value"))
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value
