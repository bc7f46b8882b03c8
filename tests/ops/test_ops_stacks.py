"""`python -m ops stacks`: which stacks `make deploy/diff/destroy` address, and who deploys them."""

from __future__ import annotations

import json

import pytest

from ops_fakes import CDK_JSON, isolated_aws_env, run_ops, write_context
from test_ops_cli import assert_one_line_error


@pytest.fixture
def offline(tmp_path):
    return isolated_aws_env(tmp_path)


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_an_environment_in_promotion_is_the_pipelines_stage(offline, env_name):
    result = run_ops(["stacks", "--env", env_name], offline)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Pipeline/{env_name}/*\n"


def test_deploying_by_hand_what_the_pipeline_deploys_is_refused_in_one_line(offline):
    line = assert_one_line_error(run_ops(["stacks", "--env", "prod", "--deploy"], offline),
                                 "prod is deployed by the pipeline", "push to main", "FORCE=1")
    assert "example-org/eks-distributed-training@main" in line and "dev -> prod" in line


def test_forced_deploy_by_hand_ships_the_pipelines_stage(offline):
    result = run_ops(["stacks", "--env", "prod", "--deploy", "--force"], offline)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Pipeline/prod/*\n"


def test_without_a_pipeline_the_environment_is_deployed_by_hand(offline, tmp_path):
    context = write_context(tmp_path, "prod")  # environments only: no pipeline, no promotion
    result = run_ops(["stacks", "--env", "prod", "--deploy", "--context-file", str(context)], offline)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "prod/*\n"


def test_an_environment_outside_promotion_is_deployed_by_hand(offline, tmp_path):
    context = json.loads(CDK_JSON.read_text())["context"]
    context["environments"]["sandbox"] = dict(context["environments"]["dev"])
    path = tmp_path / "context.json"
    path.write_text(json.dumps({"context": context}))
    result = run_ops(["stacks", "--env", "sandbox", "--deploy", "--context-file", str(path)], offline)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "sandbox/*\n"


def test_a_bad_pipeline_setting_is_one_config_line(offline, tmp_path):
    context = json.loads(CDK_JSON.read_text())["context"]
    context["promotion"] = ["dev", "staging"]
    path = tmp_path / "context.json"
    path.write_text(json.dumps({"context": context}))
    assert_one_line_error(run_ops(["stacks", "--env", "dev", "--context-file", str(path)], offline), "promotion[1]")


def test_promotion_without_a_pipeline_is_one_config_line(offline, tmp_path):
    context = json.loads(CDK_JSON.read_text())["context"]
    context["pipline"] = context.pop("pipeline")  # misspelt: the pipeline would silently vanish
    path = tmp_path / "context.json"
    path.write_text(json.dumps({"context": context}))
    result = run_ops(["stacks", "--env", "prod", "--deploy", "--context-file", str(path)], offline)
    assert_one_line_error(result, "config error: promotion: is set but pipeline is not")


def test_a_context_file_that_repeats_an_environment_is_refused_in_one_line(offline, tmp_path):
    """Two "dev" entries: every JSON reader keeps the second and drops the first without a word (the
    cdk CLI too, so app.py cannot tell); ops, which `make deploy`, `make synth` and `make local`
    run first, refuses the file."""
    dev = json.loads(CDK_JSON.read_text())["context"]["environments"]["dev"]
    path = tmp_path / "context.json"
    path.write_text('{"context": {"environments": {"dev": %s, "dev": %s}}}'
                    % (json.dumps(dev), json.dumps(dict(dev, kubernetesVersion="1.34"))))
    result = run_ops(["stacks", "--env", "dev", "--context-file", str(path)], offline)
    assert_one_line_error(result, f"--context-file: {path} repeats the key 'dev' in context.environments")
    assert result.stdout == ""
