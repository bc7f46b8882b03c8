"""The two deploy paths, `make deploy` (app.py's stage, id = the environment's name) and the pipeline
(the stage inside the PipelineStack), give an environment the same CloudFormation stacks.

CloudFormation identifies a stack by its name and a resource by its logical id. A different stack
name would be a second copy of the environment; a different logical id makes the next deploy by the
other path replace the resource. For security-group rules that replacement revokes the rule: the
new resource is created while EC2 already has the rule, then the old one is deleted, which removes
it (EFA and Lustre traffic lost). One synth of the app with the pipeline context builds both.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from config import load_environment, outputs
from config.outputs import PIPELINE_STACK_ID
from config.pipeline import load_pipeline, stack_selector
from k8s.pods.images import IMAGE_VARIANTS
from synth_helpers import CONTEXT

PROMOTION = CONTEXT["promotion"]
STACKS = ("network", "cluster", "storage", "registry", "workloads", "validation")


@pytest.fixture(scope="module")
def paths():
    """env name -> (app.py's stage, the pipeline's stage), from one app and one synth."""
    import app as app_module
    from stacks.pipeline import PipelineStack

    environments = CONTEXT["environments"]
    settings = load_pipeline(CONTEXT["pipeline"], PROMOTION, environments)
    flags = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
    app = cdk.App(outdir=tempfile.mkdtemp(prefix="synth-paths-"), context=flags)
    by_hand = {name: app_module.environment_stage(app, load_environment(environments, name), settings)
               for name in PROMOTION}
    pipeline = PipelineStack(app, PIPELINE_STACK_ID, settings=settings)
    app.synth()
    return {name: (by_hand[name], pipeline.stages[name]) for name in PROMOTION}, settings


def shape(stack: cdk.Stack) -> dict:
    """What CloudFormation matches between deploys: logical ids with their types, outputs, parameters."""
    template = Template.from_stack(stack).to_json()
    return {
        "Resources": {k: r["Type"] for k, r in template.get("Resources", {}).items()},
        "Outputs": sorted(template.get("Outputs", {})),
        "Parameters": sorted(template.get("Parameters", {})),
        "Conditions": sorted(template.get("Conditions", {})),
    }


@pytest.mark.parametrize("env_name", PROMOTION)
def test_both_paths_name_the_same_stacks(paths, env_name):
    by_hand, pipeline = paths[0][env_name]
    for name in STACKS:
        assert getattr(by_hand, name).stack_name == getattr(pipeline, name).stack_name == f"{env_name}-{name.title()}"


@pytest.mark.parametrize("env_name", PROMOTION)
@pytest.mark.parametrize("stack", STACKS)
def test_both_paths_give_every_resource_and_output_the_same_logical_id(paths, env_name, stack):
    by_hand, pipeline = paths[0][env_name]
    mine, theirs = shape(getattr(by_hand, stack)), shape(getattr(pipeline, stack))
    only_by_hand = {k: v for k, v in mine["Resources"].items() if theirs["Resources"].get(k) != v}
    only_pipeline = {k: v for k, v in theirs["Resources"].items() if mine["Resources"].get(k) != v}
    assert (only_by_hand, only_pipeline) == ({}, {})
    assert mine == theirs


@pytest.mark.parametrize("env_name", PROMOTION)
def test_no_logical_id_carries_the_stages_place_in_the_app(paths, env_name):
    """The ids above are equal because none embeds a construct path: neither the stage's id nor the
    pipeline's appears in any of them."""
    _, pipeline = paths[0][env_name]
    for name in STACKS:
        for logical_id in Template.from_stack(getattr(pipeline, name)).to_json()["Resources"]:
            assert PIPELINE_STACK_ID + env_name not in logical_id and f"from{env_name}" not in logical_id, logical_id


def test_make_deploy_addresses_the_pipelines_stage_for_the_environments_it_owns(paths):
    stages, settings = paths
    for env_name, (_, pipeline) in stages.items():
        selector = stack_selector(settings, env_name)
        assert selector == f"{PIPELINE_STACK_ID}/{env_name}/*"
        prefix = selector.removesuffix("*")
        assert all(getattr(pipeline, name).node.path.startswith(prefix) for name in STACKS)
    assert stack_selector(None, "prod") == "prod/*"


def _declared(suffix: str) -> set[str]:
    return {value for name, value in vars(outputs).items() if name.endswith(suffix)}


def test_every_stack_id_and_output_key_is_the_one_config_outputs_declares(paths):
    """ops/ and dist/ find stacks and outputs by these names: a stack that renamed one would leave
    them looking for the old name."""
    stack_ids, output_keys = set(), set()
    for env_name in PROMOTION:
        for stage in paths[0][env_name]:
            stack_ids |= {child.node.id for child in stage.node.children if isinstance(child, cdk.Stack)}
            for name in STACKS:
                keys = Template.from_stack(getattr(stage, name)).to_json().get("Outputs", {})
                # Cross-stack references CDK exports on its own, named for what they export.
                output_keys |= {key for key in keys if not key.startswith("ExportsOutput")}
    assert stack_ids == _declared("_STACK_ID") - {outputs.PIPELINE_STACK_ID}
    images = {outputs.trainer_image_output(variant) for variant in IMAGE_VARIANTS}
    assert output_keys - images <= _declared("_OUTPUT") and images <= output_keys
    # No committed environment names a deployer principal, so its kubeconfig command is not output here.
    assert _declared("_OUTPUT") - output_keys == {outputs.KUBECONFIG_COMMAND_DEPLOYER_OUTPUT}
