"""Which stack `fab leaks` looks for: its Pulumi.<stack>.yaml, found beside Pulumi.yaml
from where `fab` runs, needs no outputs; a file that cannot say is one line."""

from __future__ import annotations

from ops.leaks.scope import scope_of, settings, stack_file
from tests.ops.conftest import assert_one_line_error
from tests.ops.leaks.conftest import STACK, write_stack


def test_the_stack_file_is_found_beside_pulumi_yaml_from_a_folder_below(tmp_path):
    path = write_stack(tmp_path, "aws", "eu-west-1")
    below = tmp_path / "runs" / "r1"
    below.mkdir(parents=True)
    assert stack_file(STACK, below) == path
    assert stack_file("prod", below) is None


def test_the_scope_is_the_stacks_tag_cloud_and_region(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_stack(tmp_path, "azure", "westeurope", stack="lab")
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", "sub-from-env")
    scope = scope_of(settings("lab", ""))
    assert (scope.stack, scope.cloud, scope.region) == ("lab", "azure", "westeurope")
    assert scope.tag == ("cost-scope", "glucose-training/lab")
    assert scope.subscription == "sub-from-env"
    assert scope_of(settings("lab", ""), region="northeurope").region == "northeurope"


def test_a_config_file_names_the_stack_after_itself(tmp_path):
    path = write_stack(tmp_path, "aws", "us-west-2", stack="night")
    scope = scope_of(settings("", str(path)))
    assert (scope.stack, scope.region) == ("night", "us-west-2")


def test_a_stack_file_without_a_region_is_one_line_naming_the_key(tmp_path, fab_leaks):
    write_stack(tmp_path, "aws", None)
    done = fab_leaks("--stack", STACK)
    assert_one_line_error(done, "fab leaks: stack dev names no region (aws:region); pass --region")


def test_a_stack_file_without_a_cloud_is_one_line(tmp_path, fab_leaks):
    path = write_stack(tmp_path, "aws", "us-east-1")
    path.write_text("config:\n  aws:region: us-east-1\n")
    done = fab_leaks("--config-file", str(path))
    assert_one_line_error(done, "fab leaks: stack dev has glucose-training:cloud None, expected")


def test_a_stack_with_no_file_here_and_no_pulumi_cli_is_one_line(tmp_path, fab_leaks):
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", "prod")  # no Pulumi.prod.yaml; the test machines have no CLI
    assert_one_line_error(done, "fab leaks: no Pulumi.prod.yaml beside Pulumi.yaml from here")
