"""Every rule the environment parser enforces (config/environment_parser.py and the node-group,
network and data-source parsers it calls), one test each, asserting the exact error line.

Each case starts from cdk.json's committed `dev` environment and breaks one thing.
"""

import copy
import json
from pathlib import Path

import pytest

from config import ConfigError, load_environment
from config.environment import Environment

CONTEXT = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]
P = "config error: environments.dev."


def dev() -> dict:
    return copy.deepcopy(CONTEXT["environments"]["dev"])


def put(raw: dict, path: str, value) -> dict:
    """Set `a.b[0].c` in raw; value DELETE removes the key."""
    parts = path.replace("]", "").replace("[", ".").split(".")
    target = raw
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if value is DELETE:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return raw


DELETE = object()
# The FSx API's BackupId shape (botocore/data/fsx/2018-03-01/service-2.json: pattern ^(backup-[0-9a-f]{8,})$,
# 12 to 128 characters), which AWS::FSx::FileSystem BackupId takes.
BACKUP_ID_RULE = ("must be an FSx backup id: backup- and 8 to 121 lowercase hexadecimal digits, such as "
                  "backup-0123456789abcdef0 (`aws fsx describe-backups` lists them)")
GPU0 = "gpuNodegroups[0]"
NAME_RULE = ("must be 1-32 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit "
             "(Kubernetes names are made from it: capacity-block-stop-<name>, at most 52 characters), ")
ROLE_ARN_RULE = ("must be an IAM role ARN (arn:aws:iam::<12 digits>:role/<name> or :role/<path>/<name>, the name "
                 "1-64 letters, digits or +=,.@_-)")


def error_line(*changes: tuple[str, object]) -> str:
    raw = dev()
    for path, value in changes:
        put(raw, path, value)
    with pytest.raises(ConfigError) as err:
        load_environment({"dev": raw}, "dev")
    return err.value.line()


def test_committed_environments_parse():
    for name in CONTEXT["environments"]:
        assert isinstance(load_environment(CONTEXT["environments"], name), Environment)


def test_committed_dev_has_the_seed_node_groups():
    env = load_environment(CONTEXT["environments"], "dev")
    assert {g.instance_type_name for g in env.gpu_nodegroups} >= {"p4d.24xlarge", "p5.48xlarge"}
    assert all(g.desired_size == 0 for g in env.gpu_nodegroups)
    assert [g.instance_type_name for g in env.cpu_nodegroups] == ["m5.2xlarge"]
    assert load_environment(CONTEXT["environments"], "prod").removal_policy == "retain"


def test_kubernetes_version_and_upgrade_policy_default_to_1_35_and_standard():
    raw = dev()
    del raw["kubernetesVersion"]
    env = load_environment({"dev": raw}, "dev")
    assert (env.kubernetes_version, env.upgrade_policy, env.addon_versions) == ("1.35", "standard", ())
    raw["upgradePolicy"] = "extended"
    raw["addonVersions"] = {"coredns": "v1.12.4-eksbuild.1"}
    env = load_environment({"dev": raw}, "dev")
    assert env.upgrade_policy == "extended" and env.addon_version("coredns") == "v1.12.4-eksbuild.1"
    assert env.addon_version("vpc-cni") is None


def test_training_api_defaults_to_v1():
    assert load_environment(CONTEXT["environments"], "dev").training_api == "v1"
    assert load_environment(CONTEXT["environments"], "prod").training_api == "v1"
    assert load_environment({"dev": dict(dev(), trainingApi="v1")}, "dev").training_api == "v1"


def test_training_api_v2_is_accepted_now_that_its_add_ons_exist():
    assert load_environment({"dev": dict(dev(), trainingApi="v2")}, "dev").training_api == "v2"


def test_a_deployer_principal_becomes_one_more_admin_and_the_kubeconfig_command_names_the_cluster():
    raw = dict(dev(), deployerPrincipalArn="arn:aws:iam::111111111111:role/ci/Deployer")
    env = load_environment({"dev": raw}, "dev")
    assert env.admin_principal_arns == ("arn:aws:iam::111111111111:role/PlatformAdmin",
                                        "arn:aws:iam::111111111111:role/ci/Deployer")
    assert env.update_kubeconfig_command() == [
        "aws", "eks", "update-kubeconfig", "--name", "dev-training", "--region", "us-west-2"]
    assert env.update_kubeconfig_command("arn:aws:iam::111111111111:role/PlatformAdmin")[-2:] == [
        "--role-arn", "arn:aws:iam::111111111111:role/PlatformAdmin"]


def test_environment_name_must_make_a_valid_cluster_name():
    """Amazon EKS API Reference, CreateCluster `name`: 1-100 characters, ^[0-9A-Za-z][A-Za-z0-9\\-_]*$;
    the name also prefixes IAM role names (64 characters at most)."""
    for bad in ("dev env", "-dev", "d" * 33):
        with pytest.raises(ConfigError) as err:
            load_environment({bad: dev()}, bad)
        assert err.value.line() == (f"config error: environments.{bad}: environment names must be 1-32 letters, "
                                    f"digits or '-', starting with a letter, got {bad!r}")


def test_unknown_environment_name():
    with pytest.raises(ConfigError) as err:
        load_environment(CONTEXT["environments"], "staging")
    assert err.value.line() == "config error: environments.staging: unknown environment; defined environments are dev, prod"


def test_missing_environments_context():
    with pytest.raises(ConfigError) as err:
        load_environment(None, "dev")
    assert err.value.line() == "config error: environments: is missing from cdk.json context"


def test_environment_must_be_an_object():
    with pytest.raises(ConfigError) as err:
        load_environment({"dev": []}, "dev")
    assert err.value.line() == "config error: environments.dev: must be an object, got a list"


# (test id, changes, exact expected line after "config error: environments.dev.")
CASES = [
    ("unknown key", [("acount", "111111111111")],
     "acount: unknown key; allowed keys are account, addonVersions, adminRoleArns, availabilityZones, cpuNodegroups, "
     "dataSources, deployerPrincipalArn, endpointAccess, fsx, gpuNodegroups, kubernetesVersion, queueing, region, "
     "removalPolicy, systemNodegroup, trainingApi, trainingAvailabilityZone, upgradePolicy, vpcCidr"),
    ("required key missing", [("account", DELETE)], "account: is required (a string)"),
    ("wrong type", [("account", 111111111111)], "account: must be a string, got 111111111111"),
    ("boolean is not a count", [("cpuNodegroups[0].maxSize", True)],
     "cpuNodegroups[0].maxSize: must be an integer, got a boolean"),
    ("account not 12 digits", [("account", "1234")], "account: must be a 12-digit AWS account id, got '1234'"),
    ("region malformed", [("region", "uswest2")], "region: must be an AWS region such as us-west-2, got 'uswest2'"),
    ("fewer than two zones", [("availabilityZones", ["us-west-2a"]), ("trainingAvailabilityZone", "us-west-2a")],
     "availabilityZones: needs at least 2 zones (the EKS control plane spans two), got 1"),
    ("zone outside the region", [("availabilityZones[2]", "us-east-1c")],
     "availabilityZones[2]: 'us-east-1c' is not a zone of region us-west-2 (expected us-west-2a, us-west-2b, ...)"),
    ("zone listed twice", [("availabilityZones[2]", "us-west-2a")], "availabilityZones: lists a zone twice"),
    ("zone entry not a string", [("availabilityZones[1]", 2)], "availabilityZones[1]: must be a string, got 2"),
    ("training zone not listed", [("trainingAvailabilityZone", "us-west-2d")],
     "trainingAvailabilityZone: 'us-west-2d' must be one of availabilityZones (us-west-2a, us-west-2b, us-west-2c)"),
    ("unsupported kubernetes version", [("kubernetesVersion", "1.27")],
     "kubernetesVersion: must be one of 1.34, 1.35, 1.36 (the versions in EKS standard support on 2026-11-23), "
     "got '1.27'"),
    ("kubernetes version out of standard support", [("kubernetesVersion", "1.33")],
     "kubernetesVersion: 1.33 left EKS standard support on 2026-07-29 (a new cluster would pay extended-support "
     "rates); use one of 1.34, 1.35, 1.36"),
    ("training API unknown", [("trainingApi", "v3")], "trainingApi: must be one of v1, v2, got 'v3'"),
    ("training API not a string", [("trainingApi", 2)], "trainingApi: must be a string, got 2"),
    ("upgrade policy unknown", [("upgradePolicy", "lts")],
     "upgradePolicy: must be one of standard, extended, got 'lts'"),
    ("add-on version for an add-on the cluster does not run", [("addonVersions", {"aws-ebs-csi-driver": "v1.40.0-eksbuild.1"})],
     "addonVersions.aws-ebs-csi-driver: not an add-on this cluster installs; pin one of vpc-cni, kube-proxy, coredns, "
     "eks-pod-identity-agent, aws-fsx-csi-driver, amazon-cloudwatch-observability, eks-node-monitoring-agent"),
    ("add-on version malformed", [("addonVersions", {"coredns": "1.12"})],
     "addonVersions.coredns: must be an EKS add-on version such as v1.12.4-eksbuild.1, got '1.12'"),
    ("add-on version not a string", [("addonVersions", {"coredns": 1.12})],
     "addonVersions.coredns: must be a string, got 1.12"),
    ("cidr malformed", [("vpcCidr", "10.0.0.1/16")],
     "vpcCidr: must be an IPv4 CIDR block such as 10.0.0.0/16, got '10.0.0.1/16'"),
    ("cidr prefix out of VPC range", [("vpcCidr", "10.0.0.0/8")],
     "vpcCidr: prefix must be between /16 and /24 (AWS VPC limits), got /8"),
    ("cidr not private", [("vpcCidr", "8.8.0.0/16")], "vpcCidr: must be a private (RFC 1918) range, got 8.8.0.0/16"),
    ("cidr too small for the zones", [("vpcCidr", "10.0.0.0/22")],
     "vpcCidr: /22 is too small for 3 zones; use /20 or larger"),
    ("cidr too small for the node groups at max", [("vpcCidr", "10.0.0.0/20"), ("gpuNodegroups[0].maxSize", 40)],
     "vpcCidr: 10.0.0.0/20 gives each of 3 private subnets /23 (507 usable addresses), but the training AZ needs "
     "10616 with every node group at maxSize (node and pod IPs); use a larger CIDR or lower maxSize"),
    ("admin role not a role ARN", [("adminRoleArns[0]", "arn:aws:iam::111111111111:user/alice")],
     f"adminRoleArns[0]: {ROLE_ARN_RULE}, "
     "got 'arn:aws:iam::111111111111:user/alice'"),
    ("deployer given as an STS session",
     [("deployerPrincipalArn", "arn:aws:sts::111111111111:assumed-role/Deployer/alice@example.com")],
     "deployerPrincipalArn: 'arn:aws:sts::111111111111:assumed-role/Deployer/alice@example.com' is an STS session; "
     "EKS access entries need the IAM role ARN: use arn:aws:iam::111111111111:role/Deployer (with the role's path, "
     "if it has one; `python -m ops whoami` prints it)"),
    ("deployer not a principal ARN", [("deployerPrincipalArn", "arn:aws:iam::111111111111:group/admins")],
     "deployerPrincipalArn: must be an IAM role or user ARN (arn:aws:iam::<12 digits>:role/<name> or :user/<name>), "
     "got 'arn:aws:iam::111111111111:group/admins'"),
    ("deployer already an admin role", [("deployerPrincipalArn", "arn:aws:iam::111111111111:role/PlatformAdmin")],
     "deployerPrincipalArn: arn:aws:iam::111111111111:role/PlatformAdmin is already in adminRoleArns (a principal "
     "can have only one access entry); remove one of them"),
    # CDK keys access entries by principal, so a repeat merges into one entry whose policy list holds
    # the same policy twice (cfn-lint F3037 at synth); EKS gives a principal one access entry.
    ("admin role listed twice",
     [("adminRoleArns", ["arn:aws:iam::111111111111:role/PlatformAdmin", "arn:aws:iam::111111111111:role/Ops",
                         "arn:aws:iam::111111111111:role/PlatformAdmin"])],
     "adminRoleArns[2]: arn:aws:iam::111111111111:role/PlatformAdmin is already adminRoleArns[0] (a principal "
     "can have only one access entry); remove one of them"),
    ("no admin at all", [("adminRoleArns", [])],
     "deployerPrincipalArn: is required when adminRoleArns is empty: without either, no one can administer the cluster"),
    ("endpoint type unknown", [("endpointAccess.type", "open")],
     "endpointAccess.type: must be one of private, public, got 'open'"),
    ("private endpoint with public cidrs", [("endpointAccess.type", "private")],
     "endpointAccess.publicCidrs: is only allowed with type public"),
    ("public endpoint without cidrs", [("endpointAccess.publicCidrs", [])],
     "endpointAccess.publicCidrs: is required with type public: list the CIDR blocks allowed to reach the API "
     "(0.0.0.0/0 is not accepted)"),
    ("public cidr malformed", [("endpointAccess.publicCidrs[0]", "203.0.113.0/33")],
     "endpointAccess.publicCidrs[0]: must be an IPv4 CIDR block, got '203.0.113.0/33'"),
    ("public cidr is the internet", [("endpointAccess.publicCidrs[0]", "0.0.0.0/0")],
     "endpointAccess.publicCidrs[0]: 0.0.0.0/0 opens the API to the internet; list your own ranges"),
    ("public cidrs that together are the internet", [("endpointAccess.publicCidrs", ["0.0.0.0/1", "128.0.0.0/1"])],
     "endpointAccess.publicCidrs: 0.0.0.0/1, 128.0.0.0/1 together cover every IPv4 address, which opens the API to "
     "the internet like 0.0.0.0/0; list your own ranges"),
    ("public cidrs that cover the internet with overlaps",
     [("endpointAccess.publicCidrs", ["203.0.113.0/24", "0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/1"])],
     "endpointAccess.publicCidrs: 203.0.113.0/24, 0.0.0.0/2, 64.0.0.0/2, 128.0.0.0/1 together cover every IPv4 "
     "address, which opens the API to the internet like 0.0.0.0/0; list your own ranges"),
    ("negative size", [("cpuNodegroups[0].minSize", -1)], "cpuNodegroups[0].minSize: must be 0 or more, got -1"),
    ("max size zero", [("cpuNodegroups[0].maxSize", 0), ("cpuNodegroups[0].desiredSize", 0)],
     "cpuNodegroups[0].maxSize: must be at least 1 (EKS node groups need maxSize >= 1), got 0"),
    ("min above max", [("cpuNodegroups[0].minSize", 5)], "cpuNodegroups[0].minSize: must be <= maxSize (4), got 5"),
    ("desired outside min and max", [(f"{GPU0}.desiredSize", 3)],
     f"{GPU0}.desiredSize: must be between minSize (0) and maxSize (2), got 3"),
    ("unknown instance type", [(f"{GPU0}.instanceType", "p9.96xlarge")],
     f"{GPU0}.instanceType: unknown instance type 'p9.96xlarge'; known GPU types are "
     "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge, g5.xlarge, g5.2xlarge, g5.4xlarge, "
     "g5.8xlarge, g5.12xlarge, g5.16xlarge, g5.24xlarge, g5.48xlarge, g6.xlarge, g6.2xlarge, g6.4xlarge, g6.8xlarge, "
     "g6.12xlarge, g6.16xlarge, g6.24xlarge, g6.48xlarge"),
    ("gpu group with a cpu type", [(f"{GPU0}.instanceType", "m5.2xlarge")],
     f"{GPU0}.instanceType: m5.2xlarge is not a GPU type; use one of p4d.24xlarge, p4de.24xlarge, p5.48xlarge, "
     "p5e.48xlarge, p5en.48xlarge, g5.xlarge, g5.2xlarge, g5.4xlarge, g5.8xlarge, g5.12xlarge, g5.16xlarge, "
     "g5.24xlarge, g5.48xlarge, g6.xlarge, g6.2xlarge, g6.4xlarge, g6.8xlarge, g6.12xlarge, g6.16xlarge, "
     "g6.24xlarge, g6.48xlarge"),
    ("cpu group with a gpu type", [("cpuNodegroups[0].instanceType", "g5.xlarge")],
     "cpuNodegroups[0].instanceType: g5.xlarge is not a CPU type; use one of m5.large, m5.xlarge, m5.2xlarge, "
     "m5.4xlarge, m5.8xlarge, m6i.large, m6i.xlarge, m6i.2xlarge, m6i.4xlarge, c5.2xlarge, c5.4xlarge"),
    ("system group below two nodes", [("systemNodegroup.minSize", 1)],
     "systemNodegroup.minSize: must be at least 2 so cluster services survive a node loss, got 1"),
    ("system group has no desiredSize", [("systemNodegroup.desiredSize", 2)],
     "systemNodegroup.desiredSize: unknown key; allowed keys are instanceType, maxSize, minSize"),
    # EKS takes 1-63 letters, digits, '-' and '_', but the name is the nodes' nodegroup label value
    # and part of Kubernetes object names (a Kueue ResourceFlavor, claim templates, Jobs, a CronJob):
    # lowercase DNS labels, the longest capacity-block-stop-<name> of at most 52 characters.
    ("node group name malformed", [(f"{GPU0}.name", "-p4d")], f"{GPU0}.name: {NAME_RULE}got '-p4d'"),
    ("node group name ending in a dash", [(f"{GPU0}.name", "p4d-")], f"{GPU0}.name: {NAME_RULE}got 'p4d-'"),
    ("node group name in capitals", [("cpuNodegroups[0].name", "P4D")],
     f"cpuNodegroups[0].name: {NAME_RULE}got 'P4D'"),
    ("node group name with an underscore", [(f"{GPU0}.name", "p4d_big")], f"{GPU0}.name: {NAME_RULE}got 'p4d_big'"),
    ("node group name starting with a digit", [(f"{GPU0}.name", "4pd")], f"{GPU0}.name: {NAME_RULE}got '4pd'"),
    ("node group name too long for its CronJob", [(f"{GPU0}.name", "p" * 33)],
     f"{GPU0}.name: {NAME_RULE}got '{'p' * 33}'"),
    ("node group names collide", [("cpuNodegroups[0].name", "p5")],
     "cpuNodegroups[0].name: 'p5' is already used by gpuNodegroups[1]; names must be unique"),
    ("capacity type unknown", [(f"{GPU0}.capacity.type", "spot")],
     f"{GPU0}.capacity.type: must be one of onDemand, reserved, capacityBlock, got 'spot'"),
    ("on-demand with a reservation", [(f"{GPU0}.capacity.reservationId", "cr-0123456789abcdef0")],
     f"{GPU0}.capacity.reservationId: is only allowed with type reserved or capacityBlock"),
    ("reserved without a reservation", [(f"{GPU0}.capacity.type", "reserved")],
     f"{GPU0}.capacity.reservationId: is required with type reserved (cr- followed by 17 hex digits)"),
    ("reservation id malformed", [(f"{GPU0}.capacity", {"type": "capacityBlock", "reservationId": "cr-123"})],
     f"{GPU0}.capacity.reservationId: must be cr- followed by 17 hex digits, got 'cr-123'"),
    ("capacity block for a type not sold that way",
     [(f"{GPU0}.instanceType", "g5.48xlarge"),
      (f"{GPU0}.capacity", {"type": "capacityBlock", "reservationId": "cr-0123456789abcdef0"})],
     f"{GPU0}.capacity.type: capacity blocks are sold for p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, "
     "p5en.48xlarge, not g5.48xlarge"),
    ("fsx capacity not a PERSISTENT_2 size", [("fsx.storageCapacityGiB", 1800)],
     "fsx.storageCapacityGiB: PERSISTENT_2 needs 1200 or a multiple of 2400 GiB, got 1800"),
    ("fsx throughput not offered", [("fsx.throughputPerTiB", 200)],
     "fsx.throughputPerTiB: must be one of 125, 250, 500, 1000 MB/s/TiB, got 200"),
    ("s3 path not an s3 url", [("fsx.s3ImportPath", "https://bucket/prefix")],
     "fsx.s3ImportPath: must be an s3:// URL such as s3://my-bucket/prefix, got 'https://bucket/prefix'"),
    ("s3 paths nest", [("fsx.s3ImportPath", "s3://bucket/data"), ("fsx.s3ExportPath", "s3://bucket/data/out")],
     "fsx.s3ExportPath: must equal s3ImportPath or not overlap it (FSx data repository paths cannot nest)"),
    ("removal policy unknown", [("removalPolicy", "snapshot")],
     "removalPolicy: must be one of destroy, retain, got 'snapshot'"),
    ("nested unknown key", [("fsx.storageCapacityGb", 1200)],
     "fsx.storageCapacityGb: unknown key; allowed keys are backupId, s3ExportPath, s3ImportPath, storageCapacityGiB, "
     "throughputPerTiB"),
    *[(f"fsx backup id {what}", [("fsx.backupId", value)], f"fsx.backupId: {BACKUP_ID_RULE}, got {value!r}")
      for what, value in [("of a file system", "fs-0123456789abcdef0"), ("in capitals", "backup-0123456789ABCDEF0"),
                          ("too short", "backup-0123456"), ("too long", "backup-" + "0" * 122),
                          ("with a line break", "backup-01234567\n")]],
    ("fsx backup id not a string", [("fsx.backupId", 123)], "fsx.backupId: must be a string, got 123"),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in CASES])
def test_rule_reports_one_line_naming_the_field(changes, expected):
    assert error_line(*changes) == P + expected


# Node-group rules of issue 11: reserved names, the repair switch, capacity blocks at rest.
BLOCK = {"type": "capacityBlock", "reservationId": "cr-0123456789abcdef0"}
RESERVED = {"type": "reserved", "reservationId": "cr-0123456789abcdef0"}
NODEGROUP_CASES = [
    ("gpu group named system", [(f"{GPU0}.name", "system")],
     f"{GPU0}.name: 'system' is reserved (the system node group carries it); choose another name"),
    ("cpu group named system", [("cpuNodegroups[0].name", "system")],
     "cpuNodegroups[0].name: 'system' is reserved (the system node group carries it); choose another name"),
    ("repair switch not a boolean", [(f"{GPU0}.nodeAutoRepair", "yes")],
     f"{GPU0}.nodeAutoRepair: must be true or false, got 'yes'"),
    ("capacity block with nodes wanted at deploy", [(f"{GPU0}.capacity", BLOCK), (f"{GPU0}.desiredSize", 1)],
     f"{GPU0}.desiredSize: must be 0 with capacity type capacityBlock (EKS updates such groups only at "
     "desired size 0; `ops capacity-block schedule` brings nodes up when the block starts), got 1"),
    ("capacity block with a floor", [(f"{GPU0}.capacity", BLOCK), (f"{GPU0}.minSize", 1),
                                     (f"{GPU0}.desiredSize", 1)],
     f"{GPU0}.minSize: must be 0 with capacity type capacityBlock (the group must be able to rest at 0 "
     "before an update and after the block ends), got 1"),
    # A reservation holds one instance type and is an ODCR or a capacity block, never both: of two
    # groups that disagree on either, one could never launch a node from it.
    ("one reservation for two instance types",
     [(f"{GPU0}.capacity", RESERVED), ("gpuNodegroups[1].capacity", RESERVED)],
     "gpuNodegroups[1].capacity.reservationId: cr-0123456789abcdef0 is already the reservation of "
     "gpuNodegroups[0] (reserved p4d.24xlarge); a reservation holds one instance type and is either reserved "
     "or a capacityBlock, so this group (reserved p5.48xlarge) could never launch from it"),
    ("one reservation as an ODCR and as a capacity block",
     [(f"{GPU0}.capacity", BLOCK), ("gpuNodegroups[1].instanceType", "p4d.24xlarge"),
      ("gpuNodegroups[1].capacity", RESERVED)],
     "gpuNodegroups[1].capacity.reservationId: cr-0123456789abcdef0 is already the reservation of "
     "gpuNodegroups[0] (capacityBlock p4d.24xlarge); a reservation holds one instance type and is either "
     "reserved or a capacityBlock, so this group (reserved p4d.24xlarge) could never launch from it"),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in NODEGROUP_CASES])
def test_nodegroup_rule_reports_one_line_naming_the_field(changes, expected):
    assert error_line(*changes) == P + expected


def test_two_groups_of_one_instance_type_may_share_a_reservation():
    raw = put(put(dev(), f"{GPU0}.capacity", RESERVED), "gpuNodegroups[1].capacity", RESERVED)
    put(raw, "gpuNodegroups[1].instanceType", "p4d.24xlarge")
    env = load_environment({"dev": raw}, "dev")
    assert [g.capacity.reservation_id for g in env.gpu_nodegroups] == ["cr-0123456789abcdef0"] * 2


def test_node_auto_repair_is_on_unless_a_group_turns_it_off():
    raw = put(dev(), f"{GPU0}.nodeAutoRepair", False)
    env = load_environment({"dev": raw}, "dev")
    assert [g.auto_repair for g in env.gpu_nodegroups] == [False, True]
    assert all(g.auto_repair for g in env.cpu_nodegroups)


# dataSources (issue 12: data onto FSx from inside the cluster).
IMAGENET = "dataSources.imagenet"
LINKED = [("fsx.s3ImportPath", "s3://example-datasets-111111111111/imagenet")]
DATA_SOURCE_CASES = [
    ("not an object", [("dataSources", ["imagenet"])], "dataSources: must be an object, got a list"),
    ("name not a DNS label", [("dataSources.ImageNet", {"s3Uri": "s3://b1/x/"})],
     "dataSources.ImageNet: source names must be 1-40 lowercase letters, digits or '-', starting with a letter "
     "(the Job is data-NAME), got 'ImageNet'"),
    ("s3Uri missing", [(f"{IMAGENET}.s3Uri", DELETE)], f"{IMAGENET}.s3Uri: is required (a string)"),
    ("s3Uri not s3", [(f"{IMAGENET}.s3Uri", "https://bucket/x/")],
     f"{IMAGENET}.s3Uri: must be s3://BUCKET/PREFIX/ (no wildcards), got 'https://bucket/x/'"),
    ("s3Uri with a wildcard", [(f"{IMAGENET}.s3Uri", "s3://bucket/x/*")],
     f"{IMAGENET}.s3Uri: must be s3://BUCKET/PREFIX/ (no wildcards), got 's3://bucket/x/*'"),
    ("prepare unknown", [(f"{IMAGENET}.prepare", "unzip")],
     f"{IMAGENET}.prepare: must be one of none, imagenet, tokens, got 'unzip'"),
    ("fsxPath outside FSx", [(f"{IMAGENET}.fsxPath", "/data/imagenet")],
     f"{IMAGENET}.fsxPath: must be a folder below /fsx/ without '..' or '//', got '/data/imagenet'"),
    ("fsxPath climbing out", [(f"{IMAGENET}.fsxPath", "/fsx/data/../../etc")],
     f"{IMAGENET}.fsxPath: must be a folder below /fsx/ without '..' or '//', got '/fsx/data/../../etc'"),
    ("two sources in one folder", [("dataSources.c4.fsxPath", "/fsx/data/imagenet/tokens")],
     "dataSources.c4.fsxPath: /fsx/data/imagenet/tokens overlaps /fsx/data/imagenet of source imagenet; "
     "each source needs its own folders"),
    ("tokens without a tokenizer", [("dataSources.c4.tokenizer", DELETE)],
     "dataSources.c4.tokenizer: is required with prepare tokens (a tokenizer.json or a Hugging Face model "
     "directory below /fsx/)"),
    ("tokenizer without tokens", [(f"{IMAGENET}.tokenizer", "/fsx/models/x")],
     f"{IMAGENET}.tokenizer: is only allowed with prepare tokens"),
    ("workers out of range", [(f"{IMAGENET}.workers", 0)], f"{IMAGENET}.workers: must be between 1 and 256, got 0"),
    ("nodegroup not a CPU group", [(f"{IMAGENET}.nodegroup", "p4d")],
     f"{IMAGENET}.nodegroup: must be one of the CPU node groups (cpu), got 'p4d'"),
    ("no CPU node group", [("cpuNodegroups", [])],
     f"{IMAGENET}.nodegroup: the data Job runs on a CPU node group and this environment has none (add one "
     "under cpuNodegroups)"),
    ("unknown key", [(f"{IMAGENET}.s3Url", "s3://b1/x/")],
     f"{IMAGENET}.s3Url: unknown key; allowed keys are fsxPath, nodegroup, prepare, s3Uri, textField, tokenizer, "
     "workers"),
    ("linked by FSx with nothing to prepare", LINKED + [(f"{IMAGENET}.prepare", "none")],
     f"{IMAGENET}.prepare: FSx already shows s3://example-datasets-111111111111/imagenet/ILSVRC2012/ at "
     "/fsx/data/ILSVRC2012 (fsx.s3ImportPath), so with prepare none there is nothing to do; drop the source "
     "or prepare it"),
    ("prepared data inside the linked folder", LINKED + [(f"{IMAGENET}.fsxPath", "/fsx/data/ILSVRC2012/out")],
     f"{IMAGENET}.fsxPath: /fsx/data/ILSVRC2012/out overlaps /fsx/data/ILSVRC2012, where FSx shows "
     "s3://example-datasets-111111111111/imagenet/ILSVRC2012/ (fsx.s3ImportPath); put the prepared data elsewhere"),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in DATA_SOURCE_CASES])
def test_data_source_rule_reports_one_line_naming_the_field(changes, expected):
    assert error_line(*changes) == P + expected


def test_data_sources_are_optional_and_dev_names_an_imagenet_and_a_token_source():
    assert load_environment({"dev": put(dev(), "dataSources", DELETE)}, "dev").data_sources == ()
    env = load_environment(CONTEXT["environments"], "dev")
    imagenet, c4 = env.data_source("imagenet"), env.data_source("c4")
    assert (imagenet.bucket, imagenet.prefix) == ("example-datasets-111111111111", "imagenet/ILSVRC2012/")
    assert (imagenet.raw_path, imagenet.fsx_path, imagenet.copies) == ("/fsx/sources/imagenet", "/fsx/data/imagenet",
                                                                       True)
    assert (c4.fsx_path, c4.tokenizer, c4.text_field, c4.nodegroup) == ("/fsx/data/tokens", "/fsx/models/llama-3.1-8b",
                                                                         "text", "cpu")


def test_a_source_under_the_fsx_import_path_is_read_through_the_link_not_copied():
    """FSx shows s3ImportPath's objects under the association's file-system path (/data, stacks/storage.py):
    "Linking your file system to an S3 bucket", https://docs.aws.amazon.com/fsx/latest/LustreGuide/create-dra-linked-data-repo.html"""
    env = load_environment({"dev": put(dev(), *LINKED[0])}, "dev")
    imagenet, c4 = env.data_source("imagenet"), env.data_source("c4")
    assert (imagenet.copies, imagenet.raw_path) == (False, "/fsx/data/ILSVRC2012")
    assert c4.copies and c4.raw_path == "/fsx/sources/c4"  # another prefix: copied
    exact = put(put(dev(), "fsx.s3ImportPath", "s3://example-datasets-111111111111/c4/en"),
                "dataSources.c4.fsxPath", "/fsx/tokens")
    del exact["dataSources"]["imagenet"]  # it would write into /fsx/data, which now mirrors s3://.../c4/en
    assert load_environment({"dev": exact}, "dev").data_source("c4").raw_path == "/fsx/data"
    # A sibling prefix that merely starts with the same letters is not linked.
    sibling = load_environment({"dev": put(dev(), "fsx.s3ImportPath", "s3://example-datasets-111111111111/c4/e")}, "dev")
    assert sibling.data_source("c4").copies


def test_public_cidrs_that_leave_addresses_out_are_accepted():
    raw = put(dev(), "endpointAccess.publicCidrs", ["1.0.0.0/8", "2.0.0.0/7", "203.0.113.0/24"])
    env = load_environment({"dev": raw}, "dev")
    assert env.endpoint_access.public_cidrs == ("1.0.0.0/8", "2.0.0.0/7", "203.0.113.0/24")


def test_public_cidrs_take_at_most_the_40_blocks_eks_allows_a_cluster():
    """Amazon EKS User Guide, service-quotas.html: "Public endpoint access CIDR ranges per cluster",
    40 in each Region, not adjustable (config-cluster-endpoint.html points there). A 41st block
    passed config and reached the deploy, where EKS refuses the list."""
    forty = [f"198.51.100.{i}/32" for i in range(40)]
    assert load_environment({"dev": put(dev(), "endpointAccess.publicCidrs", forty)}, "dev")
    assert error_line(("endpointAccess.publicCidrs", [*forty, "203.0.113.0/24"])) == (
        P + "endpointAccess.publicCidrs: lists 41 CIDR blocks; EKS takes at most 40 per cluster (a quota that cannot "
            "be raised): merge neighbouring blocks")


# Amazon EKS User Guide, config-cluster-endpoint.html: a public access CIDR block "cannot include
# reserved addresses" (the page links the list of reserved IPv4 blocks); such a block passed config
# and reached the deploy, where EKS refuses it. The documentation blocks of that list stay accepted
# (see config/cidrs.py): the page's own example is 203.0.113.5/32.
RESERVED_CASES = [
    ("10.0.0.0/8", "10.0.0.0/8", "RFC 1918 private"),
    ("172.20.0.0/16", "172.16.0.0/12", "RFC 1918 private"),
    ("192.168.1.0/24", "192.168.0.0/16", "RFC 1918 private"),
    ("127.0.0.1/32", "127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "169.254.0.0/16", "link-local"),
    ("100.64.0.0/10", "100.64.0.0/10", "carrier-grade NAT shared"),
    ("0.0.0.0/8", "0.0.0.0/8", "this network"),
    ("224.0.0.0/4", "224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "240.0.0.0/4", "reserved for future use"),
    ("198.18.0.0/15", "198.18.0.0/15", "benchmarking"),
    ("8.0.0.0/6", "10.0.0.0/8", "RFC 1918 private"),  # a wider block holding one
    ("0.0.0.0/1", "0.0.0.0/8", "this network"),
]


@pytest.mark.parametrize("block, reserved, what", RESERVED_CASES)
def test_a_public_cidr_holding_reserved_addresses_is_refused_naming_the_reserved_block(block, reserved, what):
    assert error_line(("endpointAccess.publicCidrs", ["198.51.100.0/24", block])) == (
        P + f"endpointAccess.publicCidrs[1]: {block} includes {reserved} ({what} addresses), which EKS does not "
            "take in publicAccessCidrs; list public ranges only")


def test_documentation_ranges_stay_accepted_as_public_cidrs():
    blocks = ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"]
    env = load_environment({"dev": put(dev(), "endpointAccess.publicCidrs", blocks)}, "dev")
    assert env.endpoint_access.public_cidrs == tuple(blocks)


# Python's `$` also matches before a final newline, and `\d` and `\w` match any script's digits and
# letters: every pattern must take the whole value, in ASCII, as AWS and Kubernetes do.
ARABIC_ACCOUNT = "\u0661" * 12  # twelve ARABIC-INDIC DIGIT ONEs
WHOLE_VALUE_CASES = [
    ("account in non-ASCII digits", [("account", ARABIC_ACCOUNT)],
     f"account: must be a 12-digit AWS account id, got {ARABIC_ACCOUNT!r}"),
    ("account with a trailing newline", [("account", "111111111111\n")],
     "account: must be a 12-digit AWS account id, got '111111111111\\n'"),
    ("region with a trailing newline", [("region", "us-west-2\n")],
     "region: must be an AWS region such as us-west-2, got 'us-west-2\\n'"),
    ("admin role with a non-ASCII name", [("adminRoleArns", ["arn:aws:iam::111111111111:role/\u00c4dmin"])],
     f"adminRoleArns[0]: {ROLE_ARN_RULE}, "
     "got 'arn:aws:iam::111111111111:role/\u00c4dmin'"),
    ("deployer with a trailing newline", [("deployerPrincipalArn", "arn:aws:iam::111111111111:role/D\n")],
     "deployerPrincipalArn: must be an IAM role or user ARN (arn:aws:iam::<12 digits>:role/<name> or "
     ":user/<name>), got 'arn:aws:iam::111111111111:role/D\\n'"),
    ("add-on version with a trailing newline", [("addonVersions", {"coredns": "v1.12.4-eksbuild.1\n"})],
     "addonVersions.coredns: must be an EKS add-on version such as v1.12.4-eksbuild.1, got 'v1.12.4-eksbuild.1\\n'"),
    ("node group name with a trailing newline", [(f"{GPU0}.name", "p4d\n")], f"{GPU0}.name: {NAME_RULE}got 'p4d\\n'"),
    ("reservation id with a trailing newline",
     [(f"{GPU0}.capacity", {"type": "reserved", "reservationId": "cr-0123456789abcdef0\n"})],
     f"{GPU0}.capacity.reservationId: must be cr- followed by 17 hex digits, got 'cr-0123456789abcdef0\\n'"),
    ("s3 import path with a trailing newline", [("fsx.s3ImportPath", "s3://bucket/x\n")],
     "fsx.s3ImportPath: must be an s3:// URL such as s3://my-bucket/prefix, got 's3://bucket/x\\n'"),
    ("data source uri with a trailing newline", [(f"{IMAGENET}.s3Uri", "s3://bucket/x/\n")],
     f"{IMAGENET}.s3Uri: must be s3://BUCKET/PREFIX/ (no wildcards), got 's3://bucket/x/\\n'"),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in WHOLE_VALUE_CASES])
def test_a_pattern_must_match_the_whole_value_in_ascii(changes, expected):
    assert error_line(*changes) == P + expected


def test_a_name_holding_a_newline_is_refused_in_one_line():
    """A key comes into the error's path as it is; the line must stay one line."""
    with pytest.raises(ConfigError) as err:
        load_environment({"dev\n": dev()}, "dev\n")
    assert err.value.line() == ("config error: environments.dev\\n: environment names must be 1-32 letters, "
                                "digits or '-', starting with a letter, got 'dev\\n'")
    with pytest.raises(ConfigError) as err:
        load_environment(CONTEXT["environments"], "staging\n")
    assert err.value.line() == ("config error: environments.staging\\n: unknown environment; defined environments "
                                "are dev, prod")
    with pytest.raises(ConfigError) as err:
        load_environment({"dev": put(dev(), "dataSources", {"x\n": {"s3Uri": "s3://bucket/x/"}})}, "dev")
    assert err.value.line() == ("config error: environments.dev.dataSources.x\\n: source names must be 1-40 "
                                "lowercase letters, digits or '-', starting with a letter (the Job is data-NAME), "
                                "got 'x\\n'")


def test_fsx_backup_id_is_optional_and_names_the_backup_the_file_system_is_created_from():
    assert load_environment({"dev": dev()}, "dev").fsx.backup_id is None
    raw = put(dev(), "fsx.backupId", "backup-0123456789abcdef0")
    assert load_environment({"dev": raw}, "dev").fsx.backup_id == "backup-0123456789abcdef0"


# IAM: "Names of users, groups, roles, and instance profiles must be unique within the account. They
# aren't distinguished by case" (IAM User Guide, "IAM and AWS STS quotas, name requirements, and character
# limits", https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html), and a path is not
# part of the name (IAM User Guide, "IAM identifiers", reference_identifiers.html). EKS takes a role ARN
# with or without its path, and "An IAM principal can't be included in more than one access entry" (EKS
# User Guide, "Create access entries", https://docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html).
# So two ARNs of one account whose role names differ only by case or path name one role at most: the
# deploy fails on the second access entry (the principal is taken, or no such role) after the cluster is up.
ROLE = "arn:aws:iam::111111111111:role/"
SAME_ROLE_RULE = ("role names are unique in an account whatever their case or path, so both name one role at most, "
                  "and a principal can have only one access entry; keep the ARN `aws iam get-role` prints, once")
SAME_PRINCIPAL_CASES = [
    ("admin role differing only by case", [("adminRoleArns", [ROLE + "PlatformAdmin", ROLE + "platformadmin"])],
     f"adminRoleArns[1]: {ROLE}platformadmin names the same IAM role as adminRoleArns[0] ({ROLE}PlatformAdmin): "
     + SAME_ROLE_RULE),
    ("admin role differing only by path",
     [("adminRoleArns", [ROLE + "PlatformAdmin", ROLE + "some/path/PlatformAdmin"])],
     f"adminRoleArns[1]: {ROLE}some/path/PlatformAdmin names the same IAM role as adminRoleArns[0] "
     f"({ROLE}PlatformAdmin): " + SAME_ROLE_RULE),
    ("deployer is an admin role under a path", [("deployerPrincipalArn", ROLE + "ci/PlatformAdmin")],
     f"deployerPrincipalArn: {ROLE}ci/PlatformAdmin names the same IAM role as adminRoleArns[0] "
     f"({ROLE}PlatformAdmin): " + SAME_ROLE_RULE),
    ("deployer is an admin role in capitals", [("deployerPrincipalArn", ROLE + "PLATFORMADMIN")],
     f"deployerPrincipalArn: {ROLE}PLATFORMADMIN names the same IAM role as adminRoleArns[0] "
     f"({ROLE}PlatformAdmin): " + SAME_ROLE_RULE),
    # CreateRole: RoleName is 1-64 of [\w+=,.@-]; a path begins and ends with '/'. An ARN that ends in
    # '/' or whose name is longer names no role, and CreateAccessEntry refuses it at deploy.
    ("admin role ARN with no name after its path", [("adminRoleArns", [ROLE + "ops/"])],
     f"adminRoleArns[0]: {ROLE_ARN_RULE}, got '{ROLE}ops/'"),
    ("admin role name over 64 characters", [("adminRoleArns", [ROLE + "r" * 65])],
     f"adminRoleArns[0]: {ROLE_ARN_RULE}, got '{ROLE}{'r' * 65}'"),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in SAME_PRINCIPAL_CASES])
def test_two_arns_of_one_iam_role_are_refused_before_the_deploy_makes_two_access_entries(changes, expected):
    assert error_line(*changes) == P + expected


def test_roles_of_one_name_in_other_accounts_and_a_user_of_that_name_are_distinct_principals():
    """Names are unique per account and per kind (a user and a role may share one)."""
    raw = put(dev(), "adminRoleArns", [ROLE + "PlatformAdmin", "arn:aws:iam::222222222222:role/PlatformAdmin",
                                       ROLE + "ops/" + "r" * 64])
    raw["deployerPrincipalArn"] = "arn:aws:iam::111111111111:user/PlatformAdmin"
    env = load_environment({"dev": raw}, "dev")
    assert len(env.admin_principal_arns) == 4


# A CIDR block is passed on as written: EKS's publicAccessCidrs and CDK's IpAddresses.cidr take
# address/prefix-length only. Python's ipaddress also reads a netmask, a host mask, a zero-padded
# prefix or a bare address, which reached the deploy (a bare address: EKS refuses it) or stopped
# the synth with CDK's "x.x.x.x/Infinity is not a valid VPC CIDR range" and a traceback.
CIDR_FORM_CASES = [
    ("public cidr with a netmask", [("endpointAccess.publicCidrs[0]", "203.0.113.0/255.255.255.0")],
     "endpointAccess.publicCidrs[0]: must be written as 203.0.113.0/24 (address/prefix length), "
     "got '203.0.113.0/255.255.255.0'"),
    ("public cidr with a host mask", [("endpointAccess.publicCidrs[0]", "203.0.113.0/0.0.0.255")],
     "endpointAccess.publicCidrs[0]: must be written as 203.0.113.0/24 (address/prefix length), "
     "got '203.0.113.0/0.0.0.255'"),
    ("public cidr as a bare address", [("endpointAccess.publicCidrs[0]", "203.0.113.5")],
     "endpointAccess.publicCidrs[0]: must be written as 203.0.113.5/32 (address/prefix length), got '203.0.113.5'"),
    ("public cidr with a zero-padded prefix", [("endpointAccess.publicCidrs[0]", "203.0.113.0/024")],
     "endpointAccess.publicCidrs[0]: must be written as 203.0.113.0/24 (address/prefix length), got '203.0.113.0/024'"),
    ("public cidr listed twice", [("endpointAccess.publicCidrs", ["203.0.113.0/24", "198.51.100.0/24",
                                                                  "203.0.113.0/24"])],
     "endpointAccess.publicCidrs[2]: 203.0.113.0/24 is already publicCidrs[0]; list each block once"),
    ("vpc cidr with a netmask", [("vpcCidr", "10.0.0.0/255.255.0.0")],
     "vpcCidr: must be written as 10.0.0.0/16 (address/prefix length), got '10.0.0.0/255.255.0.0'"),
    ("vpc cidr with a zero-padded prefix", [("vpcCidr", "10.0.0.0/016")],
     "vpcCidr: must be written as 10.0.0.0/16 (address/prefix length), got '10.0.0.0/016'"),
    # ipaddress's is_private also holds loopback, link-local, "this network", reserved and benchmarking
    # blocks, none of them RFC 1918 (https://www.rfc-editor.org/rfc/rfc1918), which the rule names.
    *[(f"vpc cidr {block} is not RFC 1918", [("vpcCidr", block)],
       f"vpcCidr: must be a private (RFC 1918) range, got {block}")
      for block in ("127.0.0.0/16", "169.254.0.0/16", "0.0.0.0/16", "240.0.0.0/16", "198.18.0.0/16")],
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in CIDR_FORM_CASES])
def test_a_cidr_block_is_refused_unless_written_as_address_and_prefix_length_once(changes, expected):
    assert error_line(*changes) == P + expected


def test_every_rfc_1918_range_makes_a_vpc():
    for block in ("10.0.0.0/16", "172.16.0.0/16", "172.31.0.0/16", "192.168.0.0/16"):
        assert load_environment({"dev": put(dev(), "vpcCidr", block)}, "dev").vpc_cidr == block


def _in_region(region: str) -> dict:
    raw = put(dev(), "region", region)
    raw["availabilityZones"] = [f"{region}a", f"{region}b"]
    raw["trainingAvailabilityZone"] = f"{region}a"
    return raw


# An IAM principal belongs to one partition: ARNs begin arn:aws in the standard Regions, arn:aws-cn in
# the China Regions (AWS General Reference, ARNs.html for China) and arn:aws-us-gov in GovCloud (US)
# (GovCloud User Guide, using-govcloud-arns.html). An access entry for another partition's ARN passed
# config and reached the deploy, where EKS cannot create it; preflight even called the caller
# arn:aws:iam::...:role/X that admin, since it compared names and accounts only.
PARTITION_CASES = [
    ("deployer of china in us-west-2", "us-west-2", "deployerPrincipalArn",
     "arn:aws-cn:iam::111111111111:role/Deployer", "aws-cn", "aws"),
    ("admin role of govcloud in us-west-2", "us-west-2", "adminRoleArns[0]",
     "arn:aws-us-gov:iam::111111111111:role/PlatformAdmin", "aws-us-gov", "aws"),
    ("admin role of a made-up partition", "us-west-2", "adminRoleArns[0]",
     "arn:aws-moon:iam::111111111111:role/PlatformAdmin", "aws-moon", "aws"),
    ("standard admin role in china", "cn-north-1", "adminRoleArns[0]",
     "arn:aws:iam::111111111111:role/PlatformAdmin", "aws", "aws-cn"),
    ("standard deployer in govcloud", "us-gov-west-1", "deployerPrincipalArn",
     "arn:aws:iam::111111111111:user/bob", "aws", "aws-us-gov"),
]


@pytest.mark.parametrize("region, field, arn, partition, expected",
                         [pytest.param(*case[1:], id=case[0]) for case in PARTITION_CASES])
def test_a_principal_of_another_partition_than_the_region_is_refused(region, field, arn, partition, expected):
    raw = put(_in_region(region), field, arn)
    if field == "deployerPrincipalArn":
        raw["adminRoleArns"] = []  # dev's admin role is of the standard partition
    with pytest.raises(ConfigError) as err:
        load_environment({"dev": raw}, "dev")
    assert err.value.line() == (
        P + f"{field}: {arn} is in partition {partition}, but region {region} is in partition {expected}: "
            f"use arn:{expected}:iam::... (an IAM principal belongs to one partition)")


@pytest.mark.parametrize("region, partition", [("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov"),
                                               ("eu-west-1", "aws")])
def test_principals_of_the_regions_partition_are_accepted(region, partition):
    raw = put(_in_region(region), "adminRoleArns[0]", f"arn:{partition}:iam::111111111111:role/PlatformAdmin")
    raw["deployerPrincipalArn"] = f"arn:{partition}:iam::111111111111:user/bob"
    env = load_environment({"dev": raw}, "dev")
    assert env.admin_role_arns[0].startswith(f"arn:{partition}:")
