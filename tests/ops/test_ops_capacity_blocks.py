"""`ops capacity-block`: nodes come up when a capacity block starts, and a group rests at 0 before
an update. EKS and Auto Scaling come from a moto server; the block itself from a botocore Stubber
(moto cannot answer describe-capacity-reservations).

"Create a managed node group with Capacity Blocks for ML", Amazon EKS User Guide,
https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html: with desiredSize 0 at
create time, scale up when the reservation becomes active with "a scheduled scaling policy for the
ASG that aligns to the Capacity Block reservation start time" or `eks update-nodegroup-config`;
"When upgrading managed node groups with Capacity Blocks, make sure that the desired size of the
node group is set to 0"; EKS itself scales the group to 0 forty minutes before the block ends.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from config.kubernetes import NODEGROUP_LABEL
from ops import aws as ops_aws
from ops import capacity_blocks
from ops.envconfig import load
from ops.errors import OpsError
from ops_fakes import isolated_aws_env, run_ops, stubbed, write_context

BLOCK = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
START = datetime(2026, 12, 1, 11, 30, tzinfo=timezone.utc)
END = START + timedelta(days=7)
GROUPS = [
    {"name": "p5", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 4, "desiredSize": 0,
     "capacity": {"type": "capacityBlock", "reservationId": BLOCK}},
    {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "maxSize": 2, "desiredSize": 0},
]


@pytest.fixture
def env(tmp_path):
    return load("prod", write_context(tmp_path, "prod", gpuNodegroups=GROUPS))


@pytest.fixture
def deployed(aws):
    """The prod cluster as CloudFormation leaves it: tagged with its stack, one managed node group
    per config group, labelled with the config name."""
    eks = boto3.client("eks", region_name="us-east-1")
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.16.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.16.0.0/20", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    role = "arn:aws:iam::222222222222:role/node"
    cluster = "prod-cluster-a1b2c3"
    eks.create_cluster(name=cluster, roleArn=role, resourcesVpcConfig={"subnetIds": [subnet]},
                       tags={"aws:cloudformation:stack-name": "prod-Cluster"})
    names = {}
    for group in ("p5", "p4d"):
        names[group] = f"{group}-nodegroup-x9y8"
        eks.create_nodegroup(clusterName=cluster, nodegroupName=names[group], nodeRole=role, subnets=[subnet],
                             scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 0},
                             labels={NODEGROUP_LABEL: group})
    asg = eks.describe_nodegroup(clusterName=cluster, nodegroupName=names["p5"])["nodegroup"]["resources"][
        "autoScalingGroups"][0]["name"]
    return {"cluster": cluster, "nodegroups": names, "asg": asg, "eks": eks}


def block(**changes) -> dict:
    cr = {"CapacityReservationId": BLOCK, "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
          "State": "scheduled", "TotalInstanceCount": 8, "AvailableInstanceCount": 8,
          "ReservationType": "capacity-block", "StartDate": START, "EndDate": END, "EndDateType": "limited"}
    cr.update(changes)
    return cr


def clients_with(block_answer: dict | None):
    clients = replace(ops_aws.clients("us-east-1"))
    client, stub = stubbed("ec2")
    if block_answer is not None:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [block_answer]},
                          {"CapacityReservationIds": [BLOCK]})
    stub.activate()
    clients.reservations = client
    return clients, stub


def scheduled_actions(asg: str) -> list[dict]:
    autoscaling = boto3.client("autoscaling", region_name="us-east-1")
    return autoscaling.describe_scheduled_actions(AutoScalingGroupName=asg)["ScheduledUpdateGroupActions"]


def test_a_block_that_has_not_started_gets_a_scale_up_at_its_start(env, deployed):
    clients, stub = clients_with(block())
    results = capacity_blocks.schedule(env, clients, now=NOW)
    stub.assert_no_pending_responses()
    [action] = [a for a in scheduled_actions(deployed["asg"]) if a["ScheduledActionName"] == "eks-distributed-training-p5-block-start"]
    assert action["StartTime"] == START
    # The block holds 8; the group may grow to 4.
    assert action["DesiredCapacity"] == 4
    [result] = results
    assert result.ok and "starts 2026-12-01 11:30 UTC" in result.message and "ends 2026-12-08 11:30 UTC" in result.message
    # Nothing is scaled now: the block cannot launch instances before it starts.
    ng = deployed["eks"].describe_nodegroup(clusterName=deployed["cluster"], nodegroupName=deployed["nodegroups"]["p5"])
    assert ng["nodegroup"]["scalingConfig"]["desiredSize"] == 0


def test_an_active_block_scales_the_group_up_now(env, deployed):
    clients, _ = clients_with(block(State="active", StartDate=NOW - timedelta(hours=1)))
    [result] = capacity_blocks.schedule(env, clients, now=NOW)
    ng = deployed["eks"].describe_nodegroup(clusterName=deployed["cluster"], nodegroupName=deployed["nodegroups"]["p5"])
    assert ng["nodegroup"]["scalingConfig"]["desiredSize"] == 4
    assert result.ok and "active" in result.message and "desired size 4 now" in result.message


def test_an_ended_block_schedules_nothing_and_says_so(env, deployed):
    clients, _ = clients_with(block(State="expired", StartDate=NOW - timedelta(days=8), EndDate=NOW - timedelta(days=1)))
    [result] = capacity_blocks.schedule(env, clients, now=NOW)
    assert not result.ok and "ended 2026-11-30 09:00 UTC" in result.message
    assert scheduled_actions(deployed["asg"]) == []


def test_scale_to_zero_sets_the_desired_size_an_update_needs(env, deployed):
    deployed["eks"].update_nodegroup_config(clusterName=deployed["cluster"], nodegroupName=deployed["nodegroups"]["p5"],
                                            scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 3})
    clients, stub = clients_with(None)
    message = capacity_blocks.scale_to_zero(env, clients, group="p5")
    ng = deployed["eks"].describe_nodegroup(clusterName=deployed["cluster"], nodegroupName=deployed["nodegroups"]["p5"])
    assert ng["nodegroup"]["scalingConfig"]["desiredSize"] == 0
    assert "desired size 0" in message


def test_a_group_that_is_not_a_capacity_block_is_refused(env):
    with pytest.raises(OpsError, match="p4d is not a capacityBlock group"):
        capacity_blocks.scale_to_zero(env, None, group="p4d")


def test_a_group_the_cluster_lacks_says_to_deploy_first(env, aws):
    eks = boto3.client("eks", region_name="us-east-1")
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.16.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.16.0.0/20")["Subnet"]["SubnetId"]
    eks.create_cluster(name="c", roleArn="arn:aws:iam::222222222222:role/r", resourcesVpcConfig={"subnetIds": [subnet]},
                       tags={"aws:cloudformation:stack-name": "prod-Cluster"})
    clients, _ = clients_with(None)
    with pytest.raises(OpsError, match="no node group labelled .*=p5 in cluster c; deploy first"):
        capacity_blocks.scale_to_zero(env, clients, group="p5")


def test_cli_refuses_an_environment_without_capacity_blocks_in_one_line(tmp_path):
    result = run_ops(["capacity-block", "schedule", "--env", "prod"], isolated_aws_env(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == ("error: environments.prod has no gpuNodegroups with capacity type "
                                     "capacityBlock; nothing to schedule")


def test_make_deploy_s_call_is_a_no_op_without_capacity_blocks(tmp_path):
    result = run_ops(["capacity-block", "schedule", "--env", "prod", "--if-any"], isolated_aws_env(tmp_path))
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""


def test_scale_to_zero_without_a_group_is_one_line(tmp_path, env):
    context = write_context(tmp_path, "prod", gpuNodegroups=GROUPS)
    result = run_ops(["capacity-block", "scale-to-zero", "--env", "prod", "--context-file", str(context)],
                     isolated_aws_env(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == "error: scale-to-zero needs --group: the capacity-block group to take to 0"


# --- the stop CronJob: runs end suspended, with a checkpoint, before EKS drains the group ---------

OPERATOR = "/apis/apps/v1/namespaces/kubeflow/deployments/training-operator"
CRONJOBS = "/apis/batch/v1/namespaces/training/cronjobs"


def kube_with_operator(image: str = "123.dkr.ecr.us-east-1.amazonaws.com/kubectl:1.35"):
    from kube_fakes import FakeApiServer, api_client_on

    server = FakeApiServer()
    server.on("GET", OPERATOR, {"metadata": {"name": "training-operator"}, "spec": {
        "selector": {}, "template": {"spec": {"containers": [{"name": "training-operator", "image": "op:1", "args": [
            "--leader-elect", f"--mpi-kubectl-delivery-image={image}"]}]}}}})
    server.on("POST", CRONJOBS, {"metadata": {"name": "capacity-block-stop-p5"}}, status=201)
    return api_client_on(server), server


def test_schedule_creates_the_groups_stop_cronjob_with_the_clusters_kubectl_image(env, deployed):
    from k8s.pods.capacity_block_stop import group_grace_s, stop_at

    clients, stub = clients_with(block())
    kube, server = kube_with_operator()
    [result] = capacity_blocks.schedule(env, clients, now=NOW, kube_client=kube)
    stop = stop_at(END, group_grace_s(env, "p5"))
    assert result.ok and f"its runs are suspended with a checkpoint at {stop:%Y-%m-%d %H:%M} UTC" in result.message
    # Replaced, not duplicated: the old one (absent here, 404) is deleted first.
    assert [(c.method, c.path) for c in server.calls if c.path.startswith(CRONJOBS)] == [
        ("DELETE", f"{CRONJOBS}/capacity-block-stop-p5"), ("POST", CRONJOBS)]
    [created] = [c.body for c in server.calls if c.method == "POST"]
    container = created["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "123.dkr.ecr.us-east-1.amazonaws.com/kubectl:1.35"
    assert stop <= END - timedelta(minutes=45)


def test_schedule_without_a_deployed_operator_says_deploy_first(env, deployed):
    from kube_fakes import FakeApiServer, api_client_on

    clients, _ = clients_with(block())
    with pytest.raises(OpsError, match="cannot read deployment kubeflow/training-operator for the kubectl image "
                                       "\\(HTTP 404 .*not found\\); deploy first"):
        capacity_blocks.schedule(env, clients, now=NOW, kube_client=api_client_on(FakeApiServer()))


# --- the command: schedule reaches the cluster first, so no scale-up goes without its stop -------

def schedule_command(monkeypatch, tmp_path, kube, *flags: str):
    """`ops capacity-block schedule` on the capacity-block prod, its AWS calls answered by moto
    and the block stub, the cluster by `kube`; returns the Auto Scaling group's scheduled actions."""
    from ops import arguments
    from ops.commands import capacity_block

    clients, _ = clients_with(block())
    monkeypatch.setattr(ops_aws, "clients", lambda region: clients)
    monkeypatch.setattr(capacity_blocks, "datetime", type("FixedNow", (datetime,), {"now": staticmethod(lambda tz=None: NOW)}))
    monkeypatch.setattr(arguments.ClusterOptions, "api_client", lambda self: kube)
    options = capacity_block.Options(action="schedule", env="prod",
                                     context_file=str(write_context(tmp_path, "prod", gpuNodegroups=GROUPS)),
                                     no_stop="--no-stop" in flags)
    return capacity_block.run(options), clients


def test_schedule_creates_the_stop_cronjob_by_default(monkeypatch, tmp_path, deployed, capsys):
    kube, server = kube_with_operator()
    rc, _ = schedule_command(monkeypatch, tmp_path, kube)
    assert rc == 0 and "its runs are suspended with a checkpoint at" in capsys.readouterr().out
    assert ("POST", CRONJOBS) in [(c.method, c.path) for c in server.calls]


def test_schedule_refuses_before_scheduling_anything_when_the_cluster_has_no_operator(monkeypatch, tmp_path, deployed):
    from kube_fakes import FakeApiServer, api_client_on

    with pytest.raises(OpsError, match="deploy first"):
        schedule_command(monkeypatch, tmp_path, api_client_on(FakeApiServer()))
    actions = boto3.client("autoscaling", region_name="us-east-1").describe_scheduled_actions(
        AutoScalingGroupName=deployed["asg"])["ScheduledUpdateGroupActions"]
    assert actions == [], "a scale-up without its stop would end its runs uncleanly"


def test_no_stop_schedules_the_scale_up_alone(monkeypatch, tmp_path, deployed, capsys):
    rc, _ = schedule_command(monkeypatch, tmp_path, None, "--no-stop")
    out = capsys.readouterr().out
    assert rc == 0 and "scales to" in out and "suspended" not in out
