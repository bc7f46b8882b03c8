"""Storage stack: FSx for Lustre PERSISTENT_2 in the training subnet, encrypted, fenced, linked to S3."""

import pytest

from synth_helpers import FINAL_BACKUP, only, synth

LUSTRE = {(988, 988), (1018, 1023)}


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def storage(dev):
    return dev.templates["storage"]


@pytest.fixture(scope="module")
def file_system(storage):
    return only(storage.find_resources("AWS::FSx::FileSystem"))


def test_persistent_2_lustre_with_the_configured_capacity_and_throughput(dev, file_system):
    props = file_system["Properties"]
    assert props["FileSystemType"] == "LUSTRE"
    assert props["StorageCapacity"] == dev.config.fsx.storage_capacity_gib
    lustre = props["LustreConfiguration"]
    assert lustre["DeploymentType"] == "PERSISTENT_2"
    assert lustre["PerUnitStorageThroughput"] == dev.config.fsx.throughput_per_tib
    assert lustre["DataCompressionType"] == "LZ4"


def test_file_system_lives_in_the_training_subnet_only(dev, file_system):
    subnets = file_system["Properties"]["SubnetIds"]
    assert [dev.imported_ref(s) for s in subnets] == [dev.logical_id("network", dev.stage.network.training_subnet)]


def test_encrypted_with_a_rotating_customer_key(dev, storage, file_system):
    key_id = file_system["Properties"]["KmsKeyId"]["Ref"]
    key = dev.template_json("storage")["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True


def _rules(dev, kind):
    sg = {"Fn::GetAtt": [dev.logical_id("storage", dev.stage.storage.security_group), "GroupId"]}
    return [r["Properties"] for r in dev.template_json("storage")["Resources"].values()
            if r["Type"] == kind and r["Properties"]["GroupId"] == sg]


def test_security_group_admits_only_lustre_ports_from_node_security_groups(dev):
    stack = dev.stage.storage
    sg = {"Fn::GetAtt": [dev.logical_id("storage", stack.security_group), "GroupId"]}
    nodes = {dev.logical_id("cluster", dev.stage.cluster.efa_security_group)}
    ingress = _rules(dev, "AWS::EC2::SecurityGroupIngress")
    assert ingress and all("CidrIp" not in r and "CidrIpv6" not in r for r in ingress)
    from_nodes = [r for r in ingress if r["SourceSecurityGroupId"] != sg]
    assert {(r["FromPort"], r["ToPort"]) for r in from_nodes} == LUSTRE
    assert all(r["IpProtocol"] == "tcp" for r in ingress)
    sources = {dev.imported_ref(r["SourceSecurityGroupId"]) for r in from_nodes}
    # the cluster security group (every node) and the EFA group (every EFA interface)
    assert nodes < sources and len(sources) == 2
    # File servers reach each other; aws-cdk-lib's LustreFileSystem opens its own range to itself.
    assert {(r["FromPort"], r["ToPort"]) for r in ingress if r["SourceSecurityGroupId"] == sg} == {(988, 1023)}


def test_security_group_sends_only_lustre_ports(dev):
    props = dev.template_json("storage")["Resources"][dev.logical_id("storage", dev.stage.storage.security_group)]
    assert all(r.get("CidrIp") == "255.255.255.255/32" for r in props["Properties"].get("SecurityGroupEgress", []))
    egress = _rules(dev, "AWS::EC2::SecurityGroupEgress")
    assert {(r["FromPort"], r["ToPort"]) for r in egress} == LUSTRE
    assert all("CidrIp" not in r for r in egress)


def test_nodes_accept_lustre_connections_from_the_file_servers(dev):
    sg = {"Fn::GetAtt": [dev.logical_id("storage", dev.stage.storage.security_group), "GroupId"]}
    back = [r["Properties"] for r in dev.template_json("storage")["Resources"].values()
            if r["Type"] == "AWS::EC2::SecurityGroupIngress" and r["Properties"].get("SourceSecurityGroupId") == sg
            and r["Properties"]["GroupId"] != sg]
    assert {(r["FromPort"], r["ToPort"]) for r in back} == LUSTRE


def test_destroy_environment_deletes_file_system_and_key_without_backups(storage, file_system):
    assert file_system["DeletionPolicy"] == "Delete"
    assert file_system["Properties"]["LustreConfiguration"]["AutomaticBackupRetentionDays"] == 0
    storage.has_resource("AWS::KMS::Key", {"DeletionPolicy": "Delete"})


def test_retain_environment_without_s3_link_keeps_daily_backups():
    blocks = synth("blocks")
    fs = only(blocks.templates["storage"].find_resources("AWS::FSx::FileSystem"))
    assert fs["DeletionPolicy"] == "Retain" and fs["UpdateReplacePolicy"] == "Retain"
    lustre = fs["Properties"]["LustreConfiguration"]
    assert lustre["AutomaticBackupRetentionDays"] == 14
    assert lustre["CopyTagsToBackups"] is True and lustre["DailyAutomaticBackupStartTime"] == "03:00"
    blocks.templates["storage"].has_resource("AWS::KMS::Key", {"DeletionPolicy": "Retain"})


def test_retain_environment_linked_to_s3_keeps_the_file_system_without_backups():
    """FSx backs up only persistent file systems not linked to S3 ("Working with backups",
    https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html)."""
    linked = synth("linked")
    fs = only(linked.templates["storage"].find_resources("AWS::FSx::FileSystem"))
    assert fs["DeletionPolicy"] == "Retain"
    assert fs["Properties"]["LustreConfiguration"]["AutomaticBackupRetentionDays"] == 0
    assert linked.stage.storage.backups_enabled is False
    assert not linked.templates["storage"].find_resources("Custom::FsxFinalBackup")


def test_a_backup_id_creates_the_file_system_from_that_backup(file_system):
    """AWS::FSx::FileSystem BackupId: the file system is created from that backup
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-fsx-filesystem.html;
    FSx CreateFileSystemFromBackup). Its StorageCapacity stays the configured one, which preflight holds to
    the backup's (ops/redeploy.py); without backupId the file system starts empty."""
    restored = synth("restored")
    fs = only(restored.templates["storage"].find_resources("AWS::FSx::FileSystem"))
    assert fs["Properties"]["BackupId"] == restored.config.fsx.backup_id == FINAL_BACKUP
    assert fs["Properties"]["StorageCapacity"] == restored.config.fsx.storage_capacity_gib
    assert fs["DeletionPolicy"] == "Retain" and fs["UpdateReplacePolicy"] == "Retain"
    assert "BackupId" not in file_system["Properties"]


def test_same_import_and_export_path_is_one_two_way_association():
    linked = synth("linked")
    dra = only(linked.templates["storage"].find_resources("AWS::FSx::DataRepositoryAssociation"))
    props = dra["Properties"]
    assert props["DataRepositoryPath"] == linked.config.fsx.s3_import_path + "/"
    assert props["FileSystemPath"] == "/data"
    assert props["S3"]["AutoImportPolicy"]["Events"] == ["NEW", "CHANGED", "DELETED"]
    assert props["S3"]["AutoExportPolicy"]["Events"] == ["NEW", "CHANGED", "DELETED"]
    assert props["BatchImportMetaDataOnCreate"] is True
    assert dra["DeletionPolicy"] == "Retain"


def test_different_import_and_export_paths_are_two_one_way_associations():
    split = synth("split")
    dras = [r["Properties"] for r in split.templates["storage"].find_resources("AWS::FSx::DataRepositoryAssociation").values()]
    by_path = {d["FileSystemPath"]: d for d in dras}
    assert set(by_path) == {"/data", "/export"}
    assert by_path["/data"]["DataRepositoryPath"] == "s3://example-data/in/"
    assert "AutoExportPolicy" not in by_path["/data"]["S3"]
    assert by_path["/export"]["DataRepositoryPath"] == "s3://example-results/out/"
    assert "AutoImportPolicy" not in by_path["/export"]["S3"]


def test_no_s3_link_when_no_paths_configured(storage):
    storage.resource_count_is("AWS::FSx::DataRepositoryAssociation", 0)


def test_typed_attributes_for_the_kubernetes_layer(dev):
    stack = dev.stage.storage
    for name in ("file_system_id", "dns_name", "mount_name"):
        assert isinstance(getattr(stack, name), str), name
    assert stack.file_system.file_system_id == stack.file_system_id


def test_outputs_for_humans(storage):
    assert {"FileSystemId", "FileSystemDnsName", "FileSystemMountName"} <= set(storage.find_outputs("*"))


def test_file_system_waits_for_every_rule_of_its_security_group(dev, file_system):
    """Amazon FSx for Lustre User Guide, "File system access control with Amazon VPC"
    (https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html): the
    file system's security group must allow Lustre traffic on port 988 (and 1018-1023); FSx checks
    it at CreateFileSystem. Rules that are separate resources are created in parallel with the file
    system unless it depends on them, and creation then fails with InvalidNetworkSettings."""
    sg = {"Fn::GetAtt": [dev.logical_id("storage", dev.stage.storage.security_group), "GroupId"]}
    resources = dev.template_json("storage")["Resources"]
    rules = {k for k, r in resources.items()
             if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
             and r["Properties"]["GroupId"] == sg}
    lnet = {k for k in rules if resources[k]["Type"] == "AWS::EC2::SecurityGroupIngress"
            and resources[k]["Properties"]["FromPort"] <= 988 <= resources[k]["Properties"]["ToPort"]}
    assert len(lnet) >= 3, "port 988 from cluster nodes, EFA interfaces and the file servers"
    assert rules - set(file_system.get("DependsOn", [])) == set()
