"""What preflight's GPU node group row (ops/redeploy_nodegroups.py) reads from a deployed Cluster
template and computes from cdk.json, held to synths: a refactor of the stacks or constructs that moves
a property the row parses, or adds launch data it does not compute, fails here instead of silently
turning the row blind. `blocks` has every capacity type and EFA layout; dev and prod are as shipped."""

from __future__ import annotations

import pytest

from ops import redeploy_nodegroups as rolls
from synth_helpers import synth, synthesize, raw_environment

# LaunchTemplateData keys whose deployed value launch_data's keys come from.
READ = {"InstanceType", "CapacityReservationSpecification", "InstanceMarketOptions", "NetworkInterfaces",
        "Placement", "UserData", "BlockDeviceMappings", "MetadataOptions"}


@pytest.mark.parametrize("variant", ["blocks", "dev", "prod"])
def test_the_row_finds_every_gpu_group_and_computes_what_the_synth_writes(variant):
    s = synth(variant)
    template = s.template_json("cluster")
    deployed = rolls.deployed_gpu_groups(template)
    assert set(deployed) == {g.name for g in s.config.gpu_nodegroups}
    for group in s.config.gpu_nodegroups:
        found = deployed[group.name]
        assert found.logical_id == s.logical_id("cluster", s.stage.cluster.efa_nodegroups[group.name].nodegroup)
        assert found.launch == rolls.launch_data(group), group.name
        assert found.properties["CapacityType"] == rolls.capacity_type(group)
        assert found.properties["AmiType"] == rolls.GPU_AMI_TYPE
        assert "InstanceTypes" not in found.properties
        data_id = found.properties["LaunchTemplate"]["Id"]["Ref"]
        data = template["Resources"][data_id]["Properties"]["LaunchTemplateData"]
        assert set(data) <= READ, f"launch data the row neither reads nor knows: {set(data) - READ}"
    assert rolls.changes(s.config, deployed, None) == [], "a deploy of the same configuration changes nothing"


def test_the_groups_sit_in_the_subnet_the_network_stack_outputs_as_the_training_subnet():
    """The row reads the training subnet's zone from the Network stack's output (TRAINING_SUBNET_ID_OUTPUT)."""
    from config.outputs import TRAINING_SUBNET_ID_OUTPUT

    s = synth("blocks")
    [output] = [o for k, o in s.template_json("network")["Outputs"].items() if k == TRAINING_SUBNET_ID_OUTPUT]
    for group in rolls.deployed_gpu_groups(s.template_json("cluster")).values():
        [subnet] = group.properties["Subnets"]
        assert s.imported_ref(subnet) == output["Value"]["Ref"]


def test_the_row_names_exactly_what_a_second_synth_changes():
    """prod's p5 moved to p5en: the row names one change for each key of the synth's launch data that differs."""
    raw = raw_environment("prod")
    raw["gpuNodegroups"][0]["instanceType"] = "p5en.48xlarge"
    second = synthesize("prod", raw)
    first = rolls.deployed_gpu_groups(synth("prod").template_json("cluster"))
    [change] = rolls.changes(second.config, first, None)
    after = rolls.deployed_gpu_groups(second.template_json("cluster"))["p5"]
    differ = [k for k in after.launch if after.launch[k] != first["p5"].launch[k]]
    assert change.replaced == [] and len(change.rolled) == len(differ), (change.rolled, differ)
    assert change.rolled[0].startswith("instanceType p5en.48xlarge, deployed p5.48xlarge"), change.rolled
