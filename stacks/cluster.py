"""Cluster: the EKS control plane, its add-ons, and every node group the config lists."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from cdk_constructs.efa_nodegroup import EfaNodegroup, efa_self_referencing_security_group
from cdk_constructs.log_groups import EncryptedLogs, send_function_logs
from cdk_constructs.managed_nodegroup import ManagedNodegroup, NodegroupOptions
from config import Environment, Nodegroup
from config import addons as addon_names
from config.addons import TAKES_OVER_SELF_MANAGED, configuration_values
from config.environment import CONTAINER_INSIGHTS_LOG_GROUPS
from config.kubernetes import KUBE_SYSTEM_NAMESPACE, SYSTEM_NODEGROUP, SYSTEM_ROLE, TRAINING_NAMESPACE, TRAINING_ROLE
from config.outputs import (
    CLUSTER_NAME_OUTPUT, CLUSTER_SECURITY_GROUP_OUTPUT, EFA_SECURITY_GROUP_OUTPUT, KUBECONFIG_COMMAND_DEPLOYER_OUTPUT,
    KUBECONFIG_COMMAND_OUTPUT,
)
from stacks.removal import apply_removal_policy

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# The node role as "Amazon EKS node IAM role" lists it (create-node-role.html): the kubelet's EC2
# and Pod Identity agent rights, and image pulls. The VPC CNI's rights live on their own role
# (VPC_CNI_POLICY below), as that page and "Configure Amazon VPC CNI plugin to use IRSA"
# (cni-iam-role.html) recommend, so no other pod on a node can reach them through the node role.
NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")
VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
# Where each add-on's pods that call AWS run (KUBE_SYSTEM_NAMESPACE, or their own), and as whom
# (the add-ons' own charts).
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_SERVICE_ACCOUNT = "cloudwatch-agent"


class ClusterStack(cdk.Stack):
    """Attributes: `cluster` (aws_eks_v2.Cluster), `cluster_name`, `nodegroups` (config name ->
    Nodegroup, the system group under "system"), `efa_nodegroups` (name -> EfaNodegroup),
    `efa_security_group`, `node_role`, `secrets_key`, `logs` (EncryptedLogs: the control-plane and
    Container Insights log groups and their key), `addons` (add-on name -> Addon)."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, vpc: ec2.IVpc,
                 training_subnet: ec2.ISubnet, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.config = config
        self.cluster_name = config.cluster_name

        self.secrets_key = kms.Key(
            self, "SecretsKey", enable_key_rotation=True,
            description=f"{config.name}: envelope encryption of Kubernetes secrets",
        )
        self.logs = EncryptedLogs(self, "Logs", retain=config.retain,
                                  description=f"{config.name}: EKS control-plane and Container Insights logs")
        control_plane_logs = self.logs.group(
            "ControlPlane", name=config.control_plane_log_group_name)
        self.cluster = eks.Cluster(
            self, "Cluster",
            cluster_name=self.cluster_name,
            version=eks.KubernetesVersion.of(config.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            endpoint_access=_endpoint_access(config),
            # Node groups from the config, not Auto Mode; no default group so nothing unplanned runs.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # Admins come from adminRoleArns as access entries; whoever ran CloudFormation does not
            # stay a hidden cluster admin.
            bootstrap_cluster_creator_admin_permissions=False,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=list(eks.ClusterLoggingTypes),
            # The kubectl handler runs in the private subnets (the cluster does that whenever the
            # private endpoint is on), so it reaches the API even when the public one is allow-listed.
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(self, "KubectlLayer")),
        )
        # The kubectl handler and its custom-resource framework run for every manifest; their logs go
        # with the cluster they served.
        kubectl = self.cluster.node.find_child("KubectlProvider")
        kubectl_logs = self.logs.group("KubectlProvider")
        for function in (kubectl.node.find_child("Handler"),
                         kubectl.node.find_child("Provider").node.find_child("framework-onEvent")):
            send_function_logs(function.node.default_child, kubectl_logs)
        control_plane: eks.CfnCluster = self.cluster.node.default_child
        # EKS creates the group itself (no expiry, no key) if it does not exist yet.
        control_plane.node.add_dependency(control_plane_logs)
        # The EKS API's default is EXTENDED: at the end of standard support a cluster would stay on
        # its version and pay the extended-support rate. STANDARD upgrades it instead.
        control_plane.upgrade_policy = eks.CfnCluster.UpgradePolicyProperty(support_type=config.upgrade_policy.upper())
        # deployerPrincipalArn: the identity that runs `cdk deploy`, by choice and by name.
        for construct_id, arn in config.admin_access_entries:
            self.cluster.grant_access(construct_id, arn, [eks.AccessPolicy.from_access_policy_name(
                CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER)])

        self.node_role = iam.Role(
            self, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="EKS worker nodes: join the cluster, pull images, fetch pod credentials",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in NODE_MANAGED_POLICIES],
        )
        self.efa_security_group = efa_self_referencing_security_group(self, "EfaSecurityGroup", vpc=vpc)

        self.nodegroups: dict[str, eks.Nodegroup] = {}
        self.efa_nodegroups: dict[str, EfaNodegroup] = {}
        self._add_system_nodegroup()
        for group in config.cpu_nodegroups:
            self._add_cpu_nodegroup(group, training_subnet)
        for group in config.gpu_nodegroups:
            self._add_gpu_nodegroup(group, training_subnet)

        self.addons: dict[str, eks.Addon] = {}
        self._add_addons()

        # The log groups carry the cluster's name and the secrets key serves the cluster alone: kept,
        # they would block the environment's next deploy or bill for nothing (stacks/removal.py).
        apply_removal_policy(self, config, always_deleted=(self.logs, self.secrets_key))
        cdk.CfnOutput(self, CLUSTER_NAME_OUTPUT, value=self.cluster.cluster_name, description="EKS cluster name")
        cdk.CfnOutput(self, CLUSTER_SECURITY_GROUP_OUTPUT, value=self.cluster.cluster_security_group_id,
                      description="EKS cluster security group (every node carries it)")
        self._kubeconfig_outputs()
        cdk.CfnOutput(self, EFA_SECURITY_GROUP_OUTPUT, value=self.efa_security_group.security_group_id,
                      description="Self-referencing security group on every EFA interface")

    def _kubeconfig_outputs(self) -> None:
        """The exact `aws eks update-kubeconfig` command per admin path: through the first admin
        role, and as the deployer itself when one is configured."""
        config = self.config
        if config.admin_role_arns:
            cdk.CfnOutput(self, KUBECONFIG_COMMAND_OUTPUT, value=" ".join(config.update_kubeconfig_command(
                config.admin_role_arns[0])), description="kubeconfig for kubectl, assuming the first admin role")
        if config.deployer_principal_arn:
            cdk.CfnOutput(self, KUBECONFIG_COMMAND_DEPLOYER_OUTPUT, value=" ".join(config.update_kubeconfig_command()),
                          description="kubeconfig for kubectl, as the deployer principal")

    def _add_system_nodegroup(self) -> None:
        system = self.config.system_nodegroup
        # Spread across every zone: cluster services must survive the loss of one.
        self._register(SYSTEM_NODEGROUP, ManagedNodegroup(
            self, "SystemNodegroup",
            cluster=self.cluster, role=SYSTEM_ROLE,
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            options=NodegroupOptions(name=SYSTEM_NODEGROUP, instance_type=system.instance_type,
                                     min_size=system.min_size, max_size=system.max_size,
                                     desired_size=system.min_size, node_role=self.node_role),
        ).nodegroup)

    def _add_cpu_nodegroup(self, group: Nodegroup, subnet: ec2.ISubnet) -> None:
        self._register(group.name, ManagedNodegroup(
            self, f"Cpu-{group.name}",
            cluster=self.cluster, role=TRAINING_ROLE, options=self._options(group),
            # Training workers sit next to FSx, in the training zone only.
            subnets=ec2.SubnetSelection(subnets=[subnet]),
        ).nodegroup)

    def _add_gpu_nodegroup(self, group: Nodegroup, subnet: ec2.ISubnet) -> None:
        efa = EfaNodegroup(
            self, f"Gpu-{group.name}",
            cluster=self.cluster, options=self._options(group), subnet=subnet,
            efa_security_group=self.efa_security_group,
        )
        self._register(group.name, efa.nodegroup)
        self.efa_nodegroups[group.name] = efa

    def _options(self, group: Nodegroup) -> NodegroupOptions:
        return NodegroupOptions(
            name=group.name, instance_type=group.instance_type, min_size=group.min_size, max_size=group.max_size,
            desired_size=group.desired_size, capacity_type=group.capacity.type,
            reservation_id=group.capacity.reservation_id, node_role=self.node_role, auto_repair=group.auto_repair,
            efa_allocation=group.efa_allocation, gpu_allocation=group.gpu_allocation)

    def _register(self, name: str, nodegroup: eks.Nodegroup) -> None:
        # config/ refuses reserved and repeated names; an Environment built in code must not
        # silently replace a group (the system group above all) either.
        if name in self.nodegroups:
            raise ValueError(f"{self.node.path}: node group name {name!r} is taken; node group names must be unique "
                             f"and {SYSTEM_NODEGROUP!r} is the system group's")
        self.nodegroups[name] = nodegroup

    def _add_addons(self) -> None:
        system_nodes = self.nodegroups[SYSTEM_NODEGROUP]
        # The cluster's own pod-identity agent add-on, so constructs that ask for it share this one.
        pod_identity_agent = self.cluster.eks_pod_identity_agent
        self._configure(pod_identity_agent, addon_names.POD_IDENTITY_AGENT)
        # The CNI's pods reach AWS through Pod Identity (supported by the add-on since
        # v1.15.5-eksbuild.1, "IAM roles for Amazon EKS add-ons", add-ons-iam.html); the agent runs
        # on the host network, so it answers before any pod network exists.
        cni_role = self._pod_identity_role("VpcCniRole", "VPC CNI: attach ENIs and assign pod IP addresses",
                                           namespace=KUBE_SYSTEM_NAMESPACE, service_account=VPC_CNI_SERVICE_ACCOUNT)
        cni_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(VPC_CNI_POLICY))
        self._addon(addon_names.VPC_CNI, after=[pod_identity_agent], pod_identity={VPC_CNI_SERVICE_ACCOUNT: cni_role})
        self._addon(addon_names.KUBE_PROXY)
        # These schedule Deployments: creating them before any node exists leaves them DEGRADED.
        self._addon(addon_names.COREDNS, after=[system_nodes])

        fsx_role = self._pod_identity_role("FsxCsiRole", "FSx CSI driver: read file system descriptions for static volumes",
                                           namespace=KUBE_SYSTEM_NAMESPACE, service_account=FSX_CSI_SERVICE_ACCOUNT)
        # Volumes are static (the Storage stack creates the file system), so the driver only needs
        # to describe file systems; no create, delete or update rights.
        fsx_role.add_to_policy(iam.PolicyStatement(
            actions=["fsx:DescribeFileSystems"],
            resources=[self.format_arn(service="fsx", resource="file-system", resource_name="*")],
        ))
        self._addon(addon_names.FSX_CSI_DRIVER, after=[system_nodes, pod_identity_agent],
                    pod_identity={FSX_CSI_SERVICE_ACCOUNT: fsx_role})

        cw_role = self._pod_identity_role("CloudWatchAgentRole", "CloudWatch agent: Container Insights metrics and logs",
                                          namespace=CLOUDWATCH_NAMESPACE, service_account=CLOUDWATCH_SERVICE_ACCOUNT)
        cw_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name("CloudWatchAgentServerPolicy"))
        insights_logs = [self.logs.group(f"ContainerInsights-{kind}",
                                         name=self.config.container_insights_log_group_name(kind))
                         for kind in CONTAINER_INSIGHTS_LOG_GROUPS]
        self._addon(addon_names.CLOUDWATCH_OBSERVABILITY, after=[system_nodes, pod_identity_agent, *insights_logs],
                    pod_identity={CLOUDWATCH_SERVICE_ACCOUNT: cw_role})
        # Node health conditions (GPU XID and DCGM errors, EFA and networking faults) that node auto
        # repair acts on; a DaemonSet that tolerates every taint. Not needed for a node to become
        # Ready, so it waits for nodes like the add-ons above rather than racing them.
        self._addon(addon_names.NODE_MONITORING_AGENT, after=[system_nodes])
        self._add_data_source_readers(pod_identity_agent)

    def _add_data_source_readers(self, pod_identity_agent: eks.Addon) -> None:
        """Per data source that copies from S3: a Pod Identity role that may list its prefix and read
        the objects below it, nothing else, bound to the data Job's ServiceAccount (k8s/pods/data_job.py).
        ListBucket is a bucket action; the s3:prefix condition key limits the listing to the prefix
        ("Actions, resources, and condition keys for Amazon S3",
        https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html)."""
        self.data_source_roles: dict[str, iam.Role] = {}
        for source in (s for s in self.config.data_sources if s.copies):
            role = self._pod_identity_role(f"DataSource-{source.name}",
                                           f"data Job {source.name}: read {source.s3_uri}"[:1000],
                                           namespace=TRAINING_NAMESPACE, service_account=source.service_account)
            bucket = f"arn:{self.partition}:s3:::{source.bucket}"
            role.add_to_policy(iam.PolicyStatement(
                actions=["s3:ListBucket"], resources=[bucket],
                conditions={"StringLike": {"s3:prefix": [source.prefix, f"{source.prefix}*"]}}
                if source.prefix else None))
            role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[f"{bucket}/{source.prefix}*"]))
            association = eks.CfnPodIdentityAssociation(
                self, f"DataSourceIdentity-{source.name}", cluster_name=self.cluster.cluster_name,
                namespace=TRAINING_NAMESPACE, service_account=source.service_account, role_arn=role.role_arn)
            association.node.add_dependency(pod_identity_agent)
            self.data_source_roles[source.name] = role

    def _addon(self, name: str, *, after: list[Construct] = (),
               pod_identity: dict[str, iam.IRole] | None = None) -> eks.Addon:
        addon = eks.Addon(self, f"Addon-{name}", cluster=self.cluster, addon_name=name,
                          configuration_values=configuration_values(self.config).get(name), preserve_on_delete=False)
        self._configure(addon, name)
        if pod_identity:
            resource: eks.CfnAddon = addon.node.default_child
            resource.pod_identity_associations = [
                eks.CfnAddon.PodIdentityAssociationProperty(service_account=sa, role_arn=role.role_arn)
                for sa, role in pod_identity.items()
            ]
        for dependency in after:
            addon.node.add_dependency(dependency)
        return addon

    def _configure(self, addon: eks.Addon, name: str) -> None:
        """What every add-on gets, whoever created it: the environment's version pin, if any, and
        the takeover of EKS's self-managed copy where there is one."""
        resource: eks.CfnAddon = addon.node.default_child
        if self.config.addon_version(name):
            resource.addon_version = self.config.addon_version(name)
        if name in TAKES_OVER_SELF_MANAGED:
            resource.resolve_conflicts = "OVERWRITE"
        self.addons[name] = addon

    def _pod_identity_role(self, id: str, description: str, *, namespace: str, service_account: str) -> iam.Role:
        return iam.Role(self, id, description=description, assumed_by=pod_identity_principal(
            account=self.account, cluster_arn=self.format_arn(service="eks", resource="cluster",
                                                              resource_name=self.cluster_name),
            namespace=namespace, service_account=service_account))


def pod_identity_principal(*, account: str, cluster_arn: str, namespace: str, service_account: str) -> iam.IPrincipal:
    """EKS Pod Identity, for one service account of one namespace of one cluster of this account.

    Pod Identity assumes the role with sts:AssumeRole and sts:TagSession and tags the session with
    the pod's cluster ARN, namespace and service account; the trust policy may require those tags
    ("Create IAM role with trust policy required by EKS Pod Identity", pod-id-role.html; the tag
    list: "Grant Pods access to AWS resources based on tags", pod-id-abac.html). Without them any
    association in the account, on any cluster, could be given the role. aws:SourceAccount is the
    confused-deputy guard the EKS guide recommends for its service principals
    (cross-service-confused-deputy-prevention.html). No aws:SourceArn: the EKS guide does not say
    which ARN Pod Identity sends there (reports name the association's ARN, not the cluster's), and
    a wrong one would deny every pod its credentials; the eks-cluster-arn tag pins the cluster."""
    return iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_SERVICE)).with_conditions({
        "StringEquals": {
            "aws:SourceAccount": account,
            "aws:RequestTag/eks-cluster-arn": cluster_arn,
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        },
    })


def _endpoint_access(config: Environment) -> eks.EndpointAccess:
    if config.endpoint_access.type == "private":
        return eks.EndpointAccess.PRIVATE
    # Public stays private too: nodes and the kubectl handler use the private endpoint, humans the
    # allow-listed public one.
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*config.endpoint_access.public_cidrs)
