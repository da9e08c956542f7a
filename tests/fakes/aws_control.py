"""A fake of the AWS APIs preflight reads that moto does not serve, on 127.0.0.1.

moto answers EC2, STS and Budgets; its Service Quotas knows only VPC quotas, and it has
no Cost Explorer cost-allocation tags and no IAM policy simulator. boto3 sends those
three services here through `AWS_ENDPOINT_URL_SERVICE_QUOTAS`, `..._COST_EXPLORER` and
`..._IAM` (`env`), speaking their real wire protocols (JSON 1.1 and IAM's query/XML).
Not a plugin: the preflight tests start one each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from tests.fakes.local_http import LocalHttpServer, reply

IAM_NAMESPACE = "https://iam.amazonaws.com/doc/2010-05-08/"


@dataclass
class AwsControlState:
    """Applied quota values by code (missing: NoSuchResource), tag statuses, denials."""

    quotas: dict[str, float] = field(
        default_factory=lambda: {"L-DB2E81BA": 64, "L-417A185B": 192, "L-0263D0A3": 5}
    )
    default_quotas: dict[str, float] = field(
        default_factory=lambda: {"L-3819A6DF": 64, "L-7212CCBC": 64}
    )
    cost_tags: dict[str, str] = field(default_factory=lambda: {"cost-scope": "Active"})
    cost_tags_denied: bool = False
    denied_actions: set[str] = field(default_factory=set)
    targets: list[str] = field(default_factory=list)
    """Every operation asked for, in order."""


class FakeAwsControl(LocalHttpServer):
    """The three APIs answering `state` at `endpoint`."""

    def __init__(self, state: AwsControlState | None = None) -> None:
        self.state = state or AwsControlState()
        super().__init__(_handler(self))

    @property
    def env(self) -> dict[str, str]:
        return {
            f"AWS_ENDPOINT_URL_{service}": self.endpoint
            for service in ("SERVICE_QUOTAS", "COST_EXPLORER", "IAM")
        }

    def json_call(self, target: str, body: dict) -> tuple[int, dict]:
        operation = target.rsplit(".", 1)[-1]
        self.state.targets.append(operation)
        if operation in ("GetServiceQuota", "GetAWSDefaultServiceQuota"):
            table = (
                self.state.quotas if operation == "GetServiceQuota" else self.state.default_quotas
            )
            code = body["QuotaCode"]
            if code not in table:
                return 400, {"__type": "NoSuchResourceException", "message": f"no {code}"}
            return 200, {
                "Quota": {
                    "ServiceCode": body["ServiceCode"],
                    "QuotaCode": code,
                    "Value": table[code],
                }
            }
        if operation == "ListCostAllocationTags":
            if self.state.cost_tags_denied:
                return 400, {
                    "__type": "AccessDeniedException",
                    "Message": "Linked account doesn't have access to cost allocation tags.",
                }
            wanted = body.get("TagKeys") or list(self.state.cost_tags)
            return 200, {
                "CostAllocationTags": [
                    {"TagKey": key, "Type": "UserDefined", "Status": self.state.cost_tags[key]}
                    for key in wanted
                    if key in self.state.cost_tags
                ]
            }
        return 400, {"__type": "UnknownOperationException", "message": operation}

    def query_call(self, form: dict[str, list[str]]) -> tuple[int, str]:
        action = form["Action"][0]
        self.state.targets.append(action)
        if action != "SimulatePrincipalPolicy":
            return 400, "<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>"
        members_by_index = {
            int(key.rsplit(".", 1)[1]): value[0]
            for key, value in form.items()
            if key.startswith("ActionNames.member.")
        }
        names = [members_by_index[i] for i in sorted(members_by_index)]
        members = "".join(
            "<member><EvalActionName>{}</EvalActionName><EvalResourceName>*</EvalResourceName>"
            "<EvalDecision>{}</EvalDecision></member>".format(
                escape(name),
                "implicitDeny" if name in self.state.denied_actions else "allowed",
            )
            for name in names
        )
        return 200, (
            f'<SimulatePrincipalPolicyResponse xmlns="{IAM_NAMESPACE}">'
            "<SimulatePrincipalPolicyResult><IsTruncated>false</IsTruncated>"
            f"<EvaluationResults>{members}</EvaluationResults>"
            "</SimulatePrincipalPolicyResult>"
            "<ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata>"
            "</SimulatePrincipalPolicyResponse>"
        )


def _handler(fake: FakeAwsControl) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            target = self.headers.get("X-Amz-Target")
            if target:
                status, answer = fake.json_call(target, json.loads(body or b"{}"))
                reply(self, status, json.dumps(answer).encode(), "application/x-amz-json-1.1")
            else:
                status, xml = fake.query_call(parse_qs(body.decode()))
                reply(self, status, xml.encode(), "text/xml")

        def log_message(self, *args) -> None:
            pass

    return Handler
