"""Storage: FSx for Lustre next to the GPUs, in the training subnet, reachable only from nodes."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from constructs import Construct

from config import Environment
from config.environment import FSX_DEPLOYMENT_TYPE
from config.data_sources import FSX_IMPORT_DIR
from config.outputs import FSX_DNS_NAME_OUTPUT, FSX_FILE_SYSTEM_ID_OUTPUT, FSX_MOUNT_NAME_OUTPUT
from cdk_constructs.security_group_rules import allow_from, allow_to, pin_rule, port_id
from cdk_constructs.teardown import FsxFinalBackup
from stacks.removal import KEPT_FILE_SYSTEM_GUARD, apply_removal_policy, keep_when_replaced

# Lustre: 988 for LNet, 1018-1023 for the client/server RPC ports. Both directions, because
# Lustre servers also open connections back to clients.
LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))
# The range LustreFileSystem opens from the group to itself.
LUSTRE_PORT_SPAN = (988, 1023)
BACKUP_RETENTION_DAYS = 14
IMPORT_FS_PATH = FSX_IMPORT_DIR  # config/data_sources.py finds linked sources under it
EXPORT_FS_PATH = "/export"
S3_EVENTS = ["NEW", "CHANGED", "DELETED"]


class StorageStack(cdk.Stack):
    """Attributes: `file_system` (LustreFileSystem), `file_system_id`, `dns_name`, `mount_name`,
    `security_group`, `kms_key`, `data_repository_associations` (CfnDataRepositoryAssociation list),
    `backups_enabled`."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, vpc: ec2.IVpc, training_subnet: ec2.ISubnet,
                 cluster_security_group: ec2.ISecurityGroup, efa_security_group: ec2.ISecurityGroup, **kwargs) -> None:
        """`cluster_security_group` is the one every node carries; `efa_security_group` the one on
        every EFA interface."""
        super().__init__(scope, id, **kwargs)
        self.config = config
        settings = config.fsx

        self.kms_key = kms.Key(self, "FsxKey", enable_key_rotation=True,
                               description=f"{config.name}: FSx for Lustre data at rest")
        self.security_group = ec2.SecurityGroup(
            self, "FsxSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="FSx for Lustre: Lustre ports with cluster nodes and between file servers only",
        )
        node_groups = {"ClusterNodes": (cluster_security_group, "cluster nodes"),
                       "EfaInterfaces": (efa_security_group, "EFA interfaces")}
        # File servers also talk to each other: LustreFileSystem itself lets the group in from
        # itself (988-1023); only the way out is ours to open. Every rule is named by its place in
        # this stack (cdk_constructs/security_group_rules.py), never by a peer's construct path.
        sg = self.security_group
        for port in LUSTRE_PORTS:
            ports = port_id(port)
            allow_to(sg, f"ToItself{ports}", group=sg, destination=sg, port=port,
                     description="Lustre between file servers")
            for name, (peer, what) in node_groups.items():
                allow_from(sg, f"From{name}{ports}", group=sg, source=peer, port=port, description=f"Lustre from {what}")
                allow_to(sg, f"To{name}{ports}", group=sg, destination=peer, port=port, description=f"Lustre to {what}")
            # Every node carries the cluster security group; let the servers' connections in.
            allow_from(self, f"NodesFromFsx{port.to_string().replace(' ', '')}", group=cluster_security_group,
                       source=sg, port=port, description="Lustre from FSx file servers")

        # A file system linked to S3 has no backups, and only its export path reaches S3.
        self.backups_enabled = config.fsx_backups
        self.file_system = fsx.LustreFileSystem(
            self, "FileSystem",
            vpc=vpc, vpc_subnet=training_subnet, security_group=self.security_group,
            storage_capacity_gib=settings.storage_capacity_gib, kms_key=self.kms_key,
            # Create-only: ops/redeploy.py fails a deploy that would change it under a deployed file system.
            backup_id=settings.backup_id,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=fsx.LustreDeploymentType(FSX_DEPLOYMENT_TYPE),
                per_unit_storage_throughput=settings.throughput_per_tib,
                data_compression_type=fsx.LustreDataCompressionType.LZ4,
                automatic_backup_retention=cdk.Duration.days(BACKUP_RETENTION_DAYS if self.backups_enabled else 0),
                copy_tags_to_backups=self.backups_enabled or None,
                daily_automatic_backup_start_time=fsx.DailyAutomaticBackupStartTime(hour=3, minute=0)
                if self.backups_enabled else None,
            ),
        )
        pin_rule(sg, peer=sg, port=ec2.Port.tcp_range(*LUSTRE_PORT_SPAN), direction="ingress",
                 logical_id="FsxSecurityGroupFromItselfTcp988To1023", description="Lustre between file servers")
        # FSx checks the group's Lustre rules when it creates the file system. The rules are
        # resources of their own, which CloudFormation would otherwise create in parallel with it
        # (InvalidNetworkSettings: "...does not permit Lustre LNET network traffic on port 988").
        for rule in self.security_group.node.find_all():
            if isinstance(rule, (ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress)):
                self.file_system.node.default_child.node.add_dependency(rule)
        self.file_system_id: str = self.file_system.file_system_id
        self.dns_name: str = self.file_system.dns_name
        self.mount_name: str = self.file_system.mount_name
        self.data_repository_associations = self._link_repositories()

        # A kept file system with backups gets a final one as the stack goes.
        self.final_backup = FsxFinalBackup(self, "FinalBackup", file_system=self.file_system) \
            if self.backups_enabled else None
        apply_removal_policy(self, config, also_kept=KEPT_FILE_SYSTEM_GUARD)
        keep_when_replaced(self.file_system.node.default_child)
        cdk.CfnOutput(self, FSX_FILE_SYSTEM_ID_OUTPUT, value=self.file_system_id, description="FSx for Lustre file system id")
        cdk.CfnOutput(self, FSX_DNS_NAME_OUTPUT, value=self.dns_name, description="FSx DNS name for the Lustre mount")
        cdk.CfnOutput(self, FSX_MOUNT_NAME_OUTPUT, value=self.mount_name, description="FSx Lustre mount name")

    def _link_repositories(self) -> list[fsx.CfnDataRepositoryAssociation]:
        """One association when import and export are the same S3 path (both directions), else one
        per direction on separate file-system directories (FSx paths cannot nest)."""
        imp, exp = self.config.fsx.s3_import_path, self.config.fsx.s3_export_path
        links: list[tuple[str, str, str, bool, bool]] = []
        if imp and imp == exp:
            links.append(("DataRepository", IMPORT_FS_PATH, imp, True, True))
        else:
            if imp:
                links.append(("ImportRepository", IMPORT_FS_PATH, imp, True, False))
            if exp:
                links.append(("ExportRepository", EXPORT_FS_PATH, exp, False, True))
        associations = []
        for id, fs_path, s3_path, auto_import, auto_export in links:
            dra = fsx.CfnDataRepositoryAssociation(
                self, id,
                file_system_id=self.file_system_id, file_system_path=fs_path,
                data_repository_path=s3_path + "/", batch_import_meta_data_on_create=auto_import,
                s3=fsx.CfnDataRepositoryAssociation.S3Property(
                    auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=S3_EVENTS)
                    if auto_import else None,
                    auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=S3_EVENTS)
                    if auto_export else None,
                ),
            )
            associations.append(dra)
        return associations

