"""az-recommend and kubeconfig against a real moto server; reservations from a Stubber."""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest

from ops import aws as ops_aws
from ops import az, kubeconfig
from ops.envconfig import load
from ops.errors import OpsError
from ops_fakes import fake_tool, isolated_aws_env, run_ops, stubbed

ROLE = "arn:aws:iam::222222222222:role/eks"


@pytest.fixture(scope="module")
def moto_clients(moto_endpoint):
    return ops_aws.clients("us-east-1")


def with_reservations(clients, *items):
    client, stub = stubbed("ec2")
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": list(items)},
                      {"Filters": [{"Name": "instance-type", "Values": ["p5.48xlarge"]},
                                   {"Name": "state", "Values": ["active", "scheduled", "pending"]}]})
    stub.activate()
    return replace(clients, reservations=client)


def test_az_recommend_lists_every_offering_zone_with_its_id_and_reservations(aws, moto_clients):
    block = {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaaa", "InstanceType": "p5.48xlarge",
             "AvailabilityZone": "us-east-1b", "State": "scheduled", "ReservationType": "capacity-block",
             "TotalInstanceCount": 4, "AvailableInstanceCount": 4}
    rec = az.recommend(with_reservations(moto_clients, block), "p5.48xlarge", "us-east-1")
    zones = {z.name: z for z in rec.zones}
    assert sorted(zones) == [f"us-east-1{c}" for c in "abcdef"]
    assert zones["us-east-1a"].zone_id == "use1-az6" and zones["us-east-1b"].zone_id == "use1-az1"
    assert zones["us-east-1b"].reservations == ["cr-0aaaaaaaaaaaaaaaa (block, scheduled, 4/4 free)"]
    text = az.render(rec)
    assert "us-east-1b      use1-az1    cr-0aaaaaaaaaaaaaaaa" in text


def test_az_recommend_leaves_out_zones_that_lack_the_type(aws, moto_clients):
    client, stub = stubbed("ec2")
    stub.add_client_error("describe_capacity_reservations", "UnauthorizedOperation", "no")
    stub.activate()
    rec = az.recommend(replace(moto_clients, reservations=client), "p4d.24xlarge", "us-east-1")
    assert [z.name for z in rec.zones] == ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    assert "reservations not listed" in rec.reservations_note and "not permitted" in rec.reservations_note


def test_az_recommend_for_a_type_no_zone_offers_is_an_error(aws, moto_clients):
    with pytest.raises(OpsError, match="p9.96xlarge is not offered in any AZ of us-east-1"):
        az.recommend(moto_clients, "p9.96xlarge", "us-east-1")


def test_az_recommend_command_prints_the_table(aws, tmp_path):
    result = run_ops(["az-recommend", "--instance-type", "p5.48xlarge", "--region", "us-west-2"],
                     isolated_aws_env(tmp_path, aws))
    assert result.returncode == 0, result.stderr
    assert "us-west-2b      usw2-az1" in result.stdout
    assert "reservations not listed" in result.stdout  # moto does not answer them: said, not crashed


def make_cluster(name: str, stack: str | None) -> dict:
    eks = boto3.client("eks", region_name="us-east-1")
    tags = {"aws:cloudformation:stack-name": stack} if stack else {}
    return eks.create_cluster(name=name, roleArn=ROLE, resourcesVpcConfig={"subnetIds": []}, tags=tags)["cluster"]


def test_kubeconfig_finds_the_cluster_of_the_environments_cluster_stack(aws, moto_clients):
    make_cluster("Cluster9EE0221C-dev", "dev-Cluster")
    make_cluster("Cluster9EE0221C-prod", "prod-Cluster")
    make_cluster("unrelated", None)
    assert kubeconfig.find_cluster(moto_clients.eks, load("prod"))["name"] == "Cluster9EE0221C-prod"


def test_kubeconfig_finds_the_cluster_by_the_name_the_stack_gives_it(aws, moto_clients):
    """stacks/cluster.py names the cluster after the environment (its log groups need the name),
    so the lookup is one DescribeCluster; clusters without the tag are found too."""
    make_cluster("prod-training", None)
    make_cluster("Cluster9EE0221C-prod", "prod-Cluster")  # an older, generated-name cluster loses
    assert kubeconfig.find_cluster(moto_clients.eks, load("prod"))["name"] == "prod-training"


def test_kubeconfig_without_a_cluster_of_the_environment_says_how_to_proceed(aws, moto_clients):
    make_cluster("someone-elses", "prod-Clusterless")
    with pytest.raises(kubeconfig.NoCluster, match="no EKS cluster of environment prod .* pass --cluster-name"):
        kubeconfig.find_cluster(moto_clients.eks, load("prod"))


def test_no_cluster_is_a_type_of_its_own_so_preflight_tells_it_from_a_lookup_that_failed(aws, moto_clients):
    """Preflight's Kubernetes-version and training-API rows pass with no cluster yet and warn when
    the lookup failed; they told the two apart by the words of the message."""
    assert issubclass(kubeconfig.NoCluster, OpsError)
    with pytest.raises(kubeconfig.NoCluster):
        kubeconfig.find_cluster(moto_clients.eks, load("prod"), "ghost")
    make_cluster("Cluster9EE0221C-prod", "prod-Cluster")
    make_cluster("Cluster1A2B3C4D-prod", "prod-Cluster")
    with pytest.raises(OpsError, match="several clusters belong to environment prod") as err:
        kubeconfig.find_cluster(moto_clients.eks, load("prod"))
    assert not isinstance(err.value, kubeconfig.NoCluster)


def recording_aws(tmp_path, script: str = ""):
    """A fake `aws` first on PATH that records its arguments, one per line."""
    record = tmp_path / "aws-args"
    fake_tool(tmp_path / "bin", "aws", f'printf "%s\\n" "$@" > {record}\n{script}')
    return record


def test_kubeconfig_runs_the_stacks_update_kubeconfig_command_for_the_found_cluster(aws, tmp_path):
    """The caller (moto's user) is no admin principal, so kubectl assumes prod's first admin role."""
    make_cluster("Cluster9EE0221C-prod", "prod-Cluster")
    record = recording_aws(tmp_path, 'echo "Added new context arn:aws:eks:us-east-1:222222222222:cluster/x to /k"')
    env = isolated_aws_env(tmp_path, aws)
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    result = run_ops(["kubeconfig", "--env", "prod", "--kubeconfig", str(tmp_path / "config")], env)
    assert result.returncode == 0, result.stderr
    assert record.read_text().splitlines() == [
        "eks", "update-kubeconfig", "--name", "Cluster9EE0221C-prod", "--region", "us-east-1",
        "--role-arn", "arn:aws:iam::222222222222:role/PlatformAdmin", "--kubeconfig", str(tmp_path / "config")]
    assert result.stdout.splitlines()[-1] == "Added new context arn:aws:eks:us-east-1:222222222222:cluster/x to /k"


def test_kubeconfig_fills_an_empty_kubeconfig_file(aws, tmp_path):
    """`aws eks update-kubeconfig` starts a new kubeconfig in a file that holds no YAML document
    (awscli/customizations/eks/kubeconfig.py: Kubeconfig content None is a new one), as after `touch`."""
    make_cluster("prod-training", None)
    record = recording_aws(tmp_path)
    (tmp_path / "config").write_text("")
    env = isolated_aws_env(tmp_path, aws)
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    result = run_ops(["kubeconfig", "--env", "prod", "--kubeconfig", str(tmp_path / "config")], env)
    assert result.returncode == 0, result.stderr
    assert record.read_text().splitlines()[-2:] == ["--kubeconfig", str(tmp_path / "config")]


def test_kubeconfig_without_the_aws_cli_is_one_line(aws, tmp_path):
    make_cluster("prod-training", None)
    env = isolated_aws_env(tmp_path, aws)
    env["PATH"] = str(tmp_path / "empty")
    result = run_ops(["kubeconfig", "--env", "prod"], env)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "the AWS CLI (aws) is not on PATH; install AWS CLI v2" in result.stderr
    assert "aws eks update-kubeconfig --name prod-training --region us-east-1 --role-arn" in result.stderr


def test_a_failing_update_kubeconfig_is_its_last_error_line(aws, tmp_path):
    make_cluster("prod-training", None)
    recording_aws(tmp_path, 'echo "noise" >&2; echo "An error occurred (AccessDeniedException)" >&2; exit 254')
    env = isolated_aws_env(tmp_path, aws)
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    result = run_ops(["kubeconfig", "--env", "prod", "--role-arn", "arn:aws:iam::222222222222:role/Other"], env)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("--role-arn arn:aws:iam::222222222222:role/Other` failed: "
                                          "An error occurred (AccessDeniedException)")


def test_kubeconfig_with_an_unknown_cluster_name_is_one_line(aws, tmp_path):
    result = run_ops(["kubeconfig", "--env", "prod", "--cluster-name", "ghost", "--kubeconfig",
                      str(tmp_path / "config")], isolated_aws_env(tmp_path, aws))
    assert result.returncode == 2 and result.stderr.strip() == "error: no EKS cluster named 'ghost' in us-east-1"
