"""Preflight's rows for the cdk.json edits only the deployed environment can judge.

The configuration alone cannot tell a change from a first value, so these read what is deployed (the
Network and Storage stacks' outputs, the file system, the subnet and VPC they name, the cluster) and
compare it with the configuration:
- `fsx.storageCapacityGiB` below the file system's: FSx storage can only grow (MANAGING_CAPACITY);
  CloudFormation fails the update and rolls back, after the other stacks' long wait.
- A file system FSx cannot change in place: its subnet (trainingAvailabilityZone, or the zone list
  and vpcCidr that place the training subnet), its deployment type, CopyTagsToBackups: each is
  "Update requires: Replacement" in the CloudFormation reference (FSX_FILE_SYSTEM_PAGE for SubnetIds,
  aws-properties-fsx-filesystem-lustreconfiguration.html for the other two), and none is in the FSx
  API's UpdateFileSystemLustreConfiguration. cfn-lint's schema lists only SubnetIds of the three as
  create-only, so the template tests (tests/stacks/test_second_deploy.py) cannot see the others.
  The deploy succeeds and replaces it with a new, empty file system: every run resumes from step 0.
  The old one is kept (stacks/removal.py keep_when_replaced), outside the stack.
  Such a deploy fails here unless the file system is named as abandoned (--abandon-file-system,
  `make deploy ABANDON_FSX=fs-...`): naming it, not a yes/no flag, so an acknowledgement given for
  one file system never lets another go.
  The pipeline takes no acknowledgement (nobody types one there): its preflight step fails, and the row
  says to deploy that one change by hand, where the file system can be named.
- `fsx.backupId` other than the deployed file system's: BackupId is create-only too (FSX_FILE_SYSTEM_PAGE),
  so adding it to an environment whose file system exists, changing it or removing it is the same
  replacement. FSx DescribeFileSystems does not say what a file system was created from; the Storage
  stack's deployed template does.
- Before the restore deploy (fsx.backupId set, no Storage stack yet), the backup itself: ops/fsx_backup.py.
- `kubernetesVersion` below the cluster's (EKS cannot downgrade) or more than one minor version above
  it (EKS updates one minor version at a time): UPDATE_CLUSTER.
- `vpcCidr` other than the VPC's: a VPC's CIDR block cannot change, so CloudFormation would replace the
  VPC, and refuses because other stacks import its exports ("Export ... cannot be updated as it is in
  use by ...").
- `adminRoleArns` (or `deployerPrincipalArn`) edits that move a principal to another access entry:
  the entries' construct ids are positions (Environment.admin_access_entries), and PrincipalArn is
  create-only ("Update requires: Replacement", ACCESS_ENTRY_PAGE; cfn-lint's schema lists it in
  createOnlyProperties). CloudFormation creates the replacement before it deletes the old entry,
  which still holds the principal, and EKS allows one entry per principal (ResourceInUseException):
  the Cluster stack fails and rolls back. Read from the Cluster stack's deployed template. For the
  same reason an entry the deploy creates for a principal that already holds one made outside the
  stack (the console, `aws eks create-access-entry`) fails it: read from the cluster's own list
  (eks:ListAccessEntries, CREATE_ACCESS_ENTRY_PAGE).
- A GPU node group this deploy rolls or replaces while it has nodes: ops/redeploy_nodegroups.py.
Nothing deployed yet (a first deploy) passes. The throughput per TiB, like the rest of the file
system's settings we change, is updated in place (LustreConfiguration: "Update requires: No interruption").
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Callable, Iterable

from config import Environment
from config.environment import ADMIN_ENTRY, DEPLOYER_ENTRY, FSX_DEPLOYMENT_TYPE
from config.outputs import (CLUSTER_STACK_ID, FSX_FILE_SYSTEM_ID_OUTPUT, NETWORK_STACK_ID, STORAGE_STACK_ID, VPC_ID_OUTPUT,
                            stack_name)
from ops import redeploy_nodegroups
from ops.aws import AwsClients, api_failure_types, error_code, explain
from ops.checks import FAIL, PASS, WARN, Check
from ops.errors import OpsError
from ops.fsx_backup import backup_row
from ops.stacks import deployed_stack_for, deployed_template, stack_output

CAPACITY_ROW = "fsx.storageCapacityGiB"
FILE_SYSTEM_ROW = "FSx replacement"
KUBERNETES_ROW = "kubernetesVersion"
VPC_ROW = "vpcCidr"
ADMINS_ROW = "adminRoleArns"

MANAGING_CAPACITY = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html"
FSX_FILE_SYSTEM_PAGE = ("https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
                        "aws-resource-fsx-filesystem.html")
LUSTRE_CONFIGURATION_PAGE = ("https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
                             "aws-properties-fsx-filesystem-lustreconfiguration.html")
UPDATE_CLUSTER = "https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html"
CREATE_ACCESS_ENTRY_PAGE = "https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessEntry.html"
ACCESS_ENTRY_PAGE = ("https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
                     "aws-resource-eks-accessentry.html")
# cdk's logical id of the Cluster stack's entry Cluster/<construct id>: the path's ids, then 8 hex
# digits of its hash (tests/stacks/test_cluster.py holds it to a synth).
_ACCESS_ENTRY_ID = re.compile(rf"Cluster({ADMIN_ENTRY}\d+|{DEPLOYER_ENTRY})[0-9A-F]{{8}}")


def steps(env: Environment, aws: AwsClients, abandon: str | None = None, *,
          pipeline: bool = False) -> list[tuple[str, Callable[[], Iterable[Check]]]]:
    """Preflight's steps (ops/preflight.py guarded) for the six rows; `abandon` is the file system
    the user lets this deploy replace, or None; `pipeline`: the pipeline's preflight step runs them."""
    return [
        (FILE_SYSTEM_ROW, lambda: file_system_rows(env, aws, abandon, pipeline=pipeline)),
        (KUBERNETES_ROW, lambda: [kubernetes_row(env, aws.eks)]),
        (VPC_ROW, lambda: [vpc_row(env, aws)]),
        (ADMINS_ROW, lambda: [admin_entries_row(env, aws.cloudformation, aws.eks)]),
        (redeploy_nodegroups.ROW, lambda: [redeploy_nodegroups.nodegroup_row(env, aws)]),
    ]


def file_system_rows(env: Environment, aws: AwsClients, abandon: str | None = None, *,
                     pipeline: bool = False) -> list[Check]:
    """The capacity row and the replacement row, from the file system the Storage stack made."""
    name = stack_name(env.name, STORAGE_STACK_ID)
    stack, unknown = deployed_stack_for(CAPACITY_ROW, aws.cloudformation, env, STORAGE_STACK_ID)
    if unknown:
        return _both(WARN, unknown.reason)
    if stack is None:
        rows = [Check(CAPACITY_ROW, PASS, f"no {name} stack yet: the deploy creates {env.fsx.storage_capacity_gib} GiB"),
                _unused(abandon, f"no {name} stack yet, so no file system to replace")]
        return rows + ([backup_row(env, aws.fsx)] if env.fsx.backup_id else [])
    fs_id = stack_output(stack, FSX_FILE_SYSTEM_ID_OUTPUT)
    if not fs_id:
        return _both(WARN, f"stack {stack['StackName']} has no output {FSX_FILE_SYSTEM_ID_OUTPUT}; "
                           "the deployed file system was not compared")
    try:
        found = aws.fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"]
    except api_failure_types() as err:
        if error_code(err) != "FileSystemNotFound":
            raise
        found = []
    if not found:
        return _both(WARN, f"{fs_id}, the file system stack {stack['StackName']} names, does not exist "
                           "(deleted outside CloudFormation?); the deploy cannot update it")
    fs = found[0]
    return [_capacity_row(env, fs), _replacement_row(env, aws, stack["StackName"], fs, abandon, pipeline)]


def _both(status: str, reason: str) -> list[Check]:
    return [Check(CAPACITY_ROW, status, reason), Check(FILE_SYSTEM_ROW, status, reason)]


def _unused(abandon: str | None, reason: str) -> Check:
    if abandon:
        return Check(FILE_SYSTEM_ROW, WARN, f"--abandon-file-system {abandon} given, but this deploy replaces no "
                                            f"file system ({reason})")
    return Check(FILE_SYSTEM_ROW, PASS, reason)


def _capacity_row(env: Environment, fs: dict) -> Check:
    fs_id, deployed, configured = fs["FileSystemId"], fs.get("StorageCapacity", 0), env.fsx.storage_capacity_gib
    if configured < deployed:
        return Check(CAPACITY_ROW, FAIL,
                     f"environments.{env.name}.fsx.storageCapacityGiB is {configured}, the deployed file system "
                     f"{fs_id} has {deployed} GiB: FSx storage can only grow ({MANAGING_CAPACITY}), so the deploy "
                     f"would fail and roll back; set it to {deployed} or more")
    if configured > deployed:
        return Check(CAPACITY_ROW, PASS, f"grows {fs_id} from {deployed} to {configured} GiB, in place")
    return Check(CAPACITY_ROW, PASS, f"{fs_id} stays at {deployed} GiB")


def _deployed_backup(cloudformation: Any, name: str) -> tuple[str | None, str | None]:
    """The BackupId the file system in stack `name`'s deployed template was created from (None: none),
    and why it could not be read (None: it was)."""
    try:
        template = deployed_template(cloudformation, name)
    except api_failure_types() as err:
        return None, explain(err)
    if template is None:
        return None, f"the template of {name} is not JSON"
    systems = [r for r in (template.get("Resources") or {}).values() if r.get("Type") == "AWS::FSx::FileSystem"]
    if len(systems) != 1:
        return None, f"the template of {name} holds {len(systems)} AWS::FSx::FileSystem resources, not one"
    backup_id = (systems[0].get("Properties") or {}).get("BackupId")
    if backup_id is not None and not isinstance(backup_id, str):
        return None, f"the BackupId in the template of {name} is not a literal id"
    return backup_id, None


def _backup_change(env: Environment, fs_id: str, deployed: str | None) -> str | None:
    configured, field = env.fsx.backup_id, f"environments.{env.name}.fsx.backupId"
    if deployed == configured:
        return None
    if deployed is None:
        return (f"{field} is {configured}, but {fs_id} exists, created empty: a file system is created from a backup "
                "only when it is made")
    keep = f"keep fsx.backupId {deployed} as deployed"
    if configured is None:
        return f"{field} is not set, {fs_id} was created from {deployed}: {keep}"
    return f"{field} is {configured}, {fs_id} was created from {deployed}: {keep}"


def _replacement_row(env: Environment, aws: AwsClients, stack: str, fs: dict, abandon: str | None,
                     pipeline: bool) -> Check:
    fs_id = fs["FileSystemId"]
    lustre = fs.get("LustreConfiguration") or {}
    changes, pages = [], []
    [subnet] = aws.ec2.describe_subnets(SubnetIds=fs["SubnetIds"][:1])["Subnets"]
    zone, cidr = subnet.get("AvailabilityZone"), subnet.get("CidrBlock")
    if zone != env.training_availability_zone:
        changes.append(f"environments.{env.name}.trainingAvailabilityZone is {env.training_availability_zone}, "
                       f"{fs_id} is in {zone}")
        pages.append(FSX_FILE_SYSTEM_PAGE)
    elif cidr != env.training_subnet_cidr:
        changes.append(f"the training subnet's range becomes {env.training_subnet_cidr} (from "
                       f"environments.{env.name}.availabilityZones and vpcCidr), {fs_id} is in {cidr}")
        pages.append(FSX_FILE_SYSTEM_PAGE)
    deployment_type = lustre.get("DeploymentType")
    if deployment_type != FSX_DEPLOYMENT_TYPE:
        changes.append(f"the deployed file system is {deployment_type}, this deploy creates {FSX_DEPLOYMENT_TYPE}")
        pages.append(LUSTRE_CONFIGURATION_PAGE)
    if bool(lustre.get("CopyTagsToBackups")) != env.fsx_backups:
        changes.append(f"environments.{env.name}.removalPolicy and fsx.s3ImportPath/s3ExportPath turn backups "
                       f"{'on' if env.fsx_backups else 'off'}, which sets CopyTagsToBackups")
        pages.append(LUSTRE_CONFIGURATION_PAGE)
    deployed_backup, unread = _deployed_backup(aws.cloudformation, stack)
    backup_change = None if unread else _backup_change(env, fs_id, deployed_backup)
    if backup_change:
        changes.append(backup_change)
        pages.append(FSX_FILE_SYSTEM_PAGE)
    if not changes:
        if unread:
            return Check(FILE_SYSTEM_ROW, WARN, f"{fs_id} stays ({zone}, {deployment_type}) unless fsx.backupId differs "
                                                f"from what it was created from: fsx.backupId was not compared "
                                                f"({unread})")
        return _unused(abandon, f"{fs_id} stays ({zone}, {deployment_type})")
    cited = ", ".join(dict.fromkeys(pages))
    new = f"a new file system created from {env.fsx.backup_id}" if env.fsx.backup_id else "a new, empty file system"
    lost = (f"every run would go back to what {env.fsx.backup_id} holds" if env.fsx.backup_id else
            "every run would start again from step 0")
    replaced = (f"this deploy replaces {fs_id} with {new} ({'; '.join(changes)}; \"Update requires: Replacement\", "
                f"{cited}): {lost}")
    if abandon == fs_id:
        return Check(FILE_SYSTEM_ROW, WARN, f"{replaced}; acknowledged (--abandon-file-system {fs_id}): {fs_id} is "
                                            "kept outside the stack; copy what you need from it to the new one, then "
                                            f"`aws fsx delete-file-system --file-system-id {fs_id}`")
    if abandon:
        return Check(FILE_SYSTEM_ROW, FAIL, f"{replaced}; --abandon-file-system names {abandon}, but the deployed "
                                            f"file system is {fs_id}")
    if pipeline:
        # `make deploy ... FORCE=1` deploys the pipeline's own stage from a checkout (ops/stacks.py), so
        # deploying the pipeline's commit by hand is the same deploy, with the file system named.
        return Check(FILE_SYSTEM_ROW, FAIL, f"{replaced}. The pipeline cannot acknowledge a replacement: undo the "
                                            "change on the pipeline's branch, or deploy this commit once by hand with "
                                            f"`make deploy ENV={env.name} FORCE=1 ABANDON_FSX={fs_id}` (the old file "
                                            "system is kept, outside the stack); the pipeline's next run then finds "
                                            "nothing to replace")
    return Check(FILE_SYSTEM_ROW, FAIL, f"{replaced}. Undo the change, or start over on a new file system with "
                                        f"`make deploy ENV={env.name} ABANDON_FSX={fs_id}` (the old one is kept, "
                                        "outside the stack)")


def kubernetes_row(env: Environment, eks: Any) -> Check:
    from ops.kubeconfig import NoCluster, find_cluster

    configured = env.kubernetes_version
    try:
        cluster = find_cluster(eks, env)
    except NoCluster:
        return Check(KUBERNETES_ROW, PASS, f"{configured}: no cluster of {env.name} yet")
    except OpsError as err:
        return Check(KUBERNETES_ROW, WARN, f"could not tell which cluster is {env.name}'s ({err})")
    name, deployed = cluster["name"], cluster.get("version", "")
    field = f"environments.{env.name}.kubernetesVersion is {configured}, the cluster {name} runs {deployed}"
    (major, minor), (was_major, was_minor) = _version(configured), _version(deployed)
    if (major, minor) < (was_major, was_minor):
        return Check(KUBERNETES_ROW, FAIL, f"{field}: EKS cannot downgrade a cluster ({UPDATE_CLUSTER}); set "
                                           f"kubernetesVersion to {deployed}")
    if major != was_major or minor > was_minor + 1:
        step = f"{was_major}.{was_minor + 1}"
        return Check(KUBERNETES_ROW, FAIL, f"{field}: EKS updates one minor version at a time ({UPDATE_CLUSTER}); "
                                           f"set {step}, deploy, then {configured}")
    if minor == was_minor:
        return Check(KUBERNETES_ROW, PASS, f"{name} runs {deployed}, unchanged")
    return Check(KUBERNETES_ROW, PASS, f"updates {name} from {deployed} to {configured}, one minor version")


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def vpc_row(env: Environment, aws: AwsClients) -> Check:
    name = stack_name(env.name, NETWORK_STACK_ID)
    stack, unknown = deployed_stack_for(VPC_ROW, aws.cloudformation, env, NETWORK_STACK_ID)
    if unknown:
        return unknown
    if stack is None:
        return Check(VPC_ROW, PASS, f"{env.vpc_cidr}: no {name} stack yet")
    vpc_id = stack_output(stack, VPC_ID_OUTPUT)
    if not vpc_id:
        return Check(VPC_ROW, WARN, f"stack {stack['StackName']} has no output {VPC_ID_OUTPUT}; "
                                    "the VPC was not compared")
    [vpc] = aws.ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"]
    deployed = vpc.get("CidrBlock")
    if deployed != env.vpc_cidr:
        return Check(VPC_ROW, FAIL, f"environments.{env.name}.vpcCidr is {env.vpc_cidr}, the deployed VPC {vpc_id} is "
                                    f"{deployed}: a VPC's range cannot change, so CloudFormation would replace the "
                                    "network and refuses because the other stacks use its exports (\"Export ... "
                                    f"cannot be updated as it is in use\"); set vpcCidr back to {deployed} (another "
                                    "range is another environment)")
    return Check(VPC_ROW, PASS, f"{vpc_id} is {deployed}, unchanged")


def admin_entries_row(env: Environment, cloudformation: Any, eks: Any) -> Check:
    name = stack_name(env.name, CLUSTER_STACK_ID)
    configured = dict(env.admin_access_entries)
    stack, unknown = deployed_stack_for(ADMINS_ROW, cloudformation, env, CLUSTER_STACK_ID)
    if unknown:
        return unknown
    if stack is None:
        return Check(ADMINS_ROW, PASS, f"no {name} stack yet: the deploy creates {len(configured)} admin access entries")
    name = stack["StackName"]
    template = deployed_template(cloudformation, name)
    if template is None:
        return Check(ADMINS_ROW, WARN, f"the template of {name} is not JSON; the access entries were not compared")
    deployed = deployed_access_entries(template)
    moves = access_entry_conflicts(deployed, configured)
    if moves:
        admins, deployer = first_of_two_deploys(deployed, configured)
        first = f"adminRoleArns [{', '.join(admins)}]"
        if not admins and not deployer:
            first += (" and deployerPrincipalArn set to a principal outside the new list (adminRoleArns may be empty "
                      "only with deployerPrincipalArn)")
        elif DEPLOYER_ENTRY in deployed:
            first += f" and deployerPrincipalArn {deployer}" if deployer else " and no deployerPrincipalArn"
        moved = "; ".join(f"{arn} moves from {_field(held)} to {_field(to)}" for arn, held, to in moves)
        return Check(ADMINS_ROW, FAIL, f"environments.{env.name}.adminRoleArns: {moved} ({name}): the access entries "
                                       "are keyed by position and an entry's PrincipalArn cannot change in place "
                                       f"(\"Update requires: Replacement\", {ACCESS_ENTRY_PAGE}), so CloudFormation "
                                       "creates the moved entry while the old one still holds the role, EKS refuses a "
                                       "second entry for it (ResourceInUseException) and the stack rolls back. Keep "
                                       "each deployed role at its place (add roles at the end, remove roles only from "
                                       f"the end), or deploy twice: first with {first}, then with the new list")
    created = [arn for cid, arn in configured.items() if deployed.get(cid) != arn]
    outside = entries_outside_the_stack(env, eks, created)
    if isinstance(outside, Check):
        return outside
    if outside:
        cluster, arns = outside
        deletes = "; ".join(f"aws eks delete-access-entry --cluster-name {cluster} --principal-arn {arn}"
                            for arn in arns)
        return Check(ADMINS_ROW, FAIL, f"environments.{env.name}.adminRoleArns: {', '.join(arns)} already "
                                       f"{'has an access entry' if len(arns) == 1 else 'have access entries'} on "
                                       f"cluster {cluster} that {name} did not create (made with the console or "
                                       "the CLI?), and EKS holds one entry per principal (\"You can't specify the "
                                       f"same ARN in more than one access entry\", {CREATE_ACCESS_ENTRY_PAGE}): the "
                                       "deploy's creation fails with ResourceInUseException and the stack rolls "
                                       f"back. Delete {'it' if len(arns) == 1 else 'them'} first ({deletes}); the "
                                       "deploy's entry gives the same cluster admin policy")
    changes = [f"adds {arn} ({_field(cid)})" for cid, arn in configured.items() if cid not in deployed]
    changes += [f"gives {_field(cid)} to {arn}" for cid, arn in configured.items() if deployed.get(cid, arn) != arn]
    removed = [cid for cid in deployed if cid not in configured]
    if removed:
        changes.append(f"removes {', '.join(map(_field, removed))} ({', '.join(deployed[c] for c in removed)})")
    if not changes:
        return Check(ADMINS_ROW, PASS, f"the {len(deployed)} admin access entries keep their principals ({name})")
    return Check(ADMINS_ROW, PASS, f"{'; '.join(changes)}: no principal moves to another entry ({name})")


def entries_outside_the_stack(env: Environment, eks: Any,
                              created: list[str]) -> tuple[str, list[str]] | Check | None:
    """(cluster, the principals of `created` that already hold an access entry on the cluster) for
    the entries a deploy creates: an entry made outside CloudFormation is not in the template, so
    only the cluster's own list shows it. None: nothing to create, no cluster, or no such principal;
    a warn row when the list could not be read."""
    from ops.kubeconfig import NoCluster, find_cluster

    if not created:
        return None
    try:
        cluster = find_cluster(eks, env)["name"]
        pages = eks.get_paginator("list_access_entries").paginate(clusterName=cluster)
        held = {arn for page in pages for arn in page.get("accessEntries", [])}
    except NoCluster:
        return None
    except (OpsError, *api_failure_types()) as err:
        return Check(ADMINS_ROW, WARN, f"the cluster's access entries were not read ({explain(err)}), so an entry "
                                       f"made outside the stack for {', '.join(created)} would fail the deploy "
                                       "unseen (EKS holds one entry per principal)")
    found = [arn for arn in created if arn in held]
    return (cluster, found) if found else None


def deployed_access_entries(template: dict) -> dict[str, str]:
    """Construct id (Environment.admin_access_entries) to principal ARN of each admin access entry
    in a Cluster stack template; the kubectl handler's own entry (a GetAtt) is not one."""
    found = {}
    for logical_id, resource in (template.get("Resources") or {}).items():
        match = _ACCESS_ENTRY_ID.fullmatch(logical_id)
        principal = (resource.get("Properties") or {}).get("PrincipalArn")
        if match and resource.get("Type") == "AWS::EKS::AccessEntry" and isinstance(principal, str):
            found[match[1]] = principal
    return found


def access_entry_conflicts(deployed: dict[str, str], configured: dict[str, str]) -> list[tuple[str, str, str]]:
    """(principal, the entry holding it, the entry the deploy gives it) for each entry the deploy
    creates (a new id, or a replacement: another PrincipalArn) while a deployed entry still holds its
    principal: CloudFormation deletes the old entries only after every creation."""
    holder = {arn: cid for cid, arn in deployed.items()}
    return [(arn, holder[arn], cid) for cid, arn in configured.items() if deployed.get(cid) != arn and arn in holder]


def first_of_two_deploys(deployed: dict[str, str], configured: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
    """adminRoleArns and deployerPrincipalArn of a deploy that only deletes entries and leaves every
    principal either at its configured entry or out of the configuration, so that the configuration
    then deploys without a conflict: the longest run of deployed admin roles from the first that
    each stay or go, and the deployer if it stays or goes."""
    wanted = set(configured.values())

    def stays_or_goes(cid: str) -> bool:
        return configured.get(cid) == deployed[cid] or deployed[cid] not in wanted

    admins = []
    for cid in (f"{ADMIN_ENTRY}{i}" for i in itertools.count()):
        if cid not in deployed or not stays_or_goes(cid):
            break
        admins.append(deployed[cid])
    deployer = deployed.get(DEPLOYER_ENTRY) if DEPLOYER_ENTRY in deployed and stays_or_goes(DEPLOYER_ENTRY) else None
    return tuple(admins), deployer


def _field(construct_id: str) -> str:
    if construct_id == DEPLOYER_ENTRY:
        return "deployerPrincipalArn"
    return f"adminRoleArns[{construct_id.removeprefix(ADMIN_ENTRY)}]"
