"""TrainingDrain: on destroy, the training namespace's runs go before the FSx claim does.

Without it, a pod that `ops submit` or `ops data` started keeps the claim (pvc-protection) and the
kubectl handler waits on the volume's delete until it times out (aws-cdk issue 9970). The resource
this construct adds depends on every manifest it is given, so CloudFormation deletes it, and its
handler (teardown_handlers/training_drain.py) deletes the runs and waits for their pods, before
any of those manifests. The handler reaches the API from the cluster's private subnets, in the
cluster security group like the kubectl handler; its role is mapped by an access entry to one group
that an RBAC Role in the namespace allows to list and delete runs and pods, and a ClusterRole to
list the runs of both training APIs, nothing else (EKS access policies cover no kubeflow.org
resource).

The resource carries the environment's trainingApi (v2 only: a v1 environment's resource is as it
was before the property existed, and the handler reads its absence as v1), and its Update refuses
a switch while runs of the old API exist: CloudFormation updates the resource after every manifest
it holds but deletes the manifests a new template dropped (the old API's CRDs) only after the
update succeeded, so a refusal rolls the deploy back before they go.
"""

from __future__ import annotations

from typing import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from cdk_constructs.nag import acknowledge
from config.environment import TRAINING_APIS, Environment
from cdk_constructs.teardown import _TeardownFunction as TeardownFunction

DRAIN_GROUP = "eks-distributed-training:training-drain"
# What a function in a VPC needs to create and delete its network interfaces.
VPC_ACCESS_POLICY = "service-role/AWSLambdaVPCAccessExecutionRole"
# Both training APIs' runs, whatever the environment's trainingApi: the one handler asks for every
# kind. The API server authorizes a request before it routes it, so a kind the cluster does not
# serve answers 404 (skipped) only to a request this Role allows, and 403 (a failed drain) otherwise.
RULES = (
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["deletecollection"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["deletecollection"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"], "verbs": ["deletecollection"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["deletecollection"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
)


# The Update path's question, in every namespace (deleting a CRD deletes its objects everywhere):
# does any run of the API being switched away from exist? Both APIs, since a switch goes either way.
CLUSTER_RULES = (
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["list"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["list"]},
)
DEFAULT_TRAINING_API = Environment.training_api  # the handler reads an absent TrainingApi as this


def drain_rbac(namespace: str) -> list[dict]:
    """The Role and RoleBinding that let DRAIN_GROUP delete the namespace's runs and pods, and the
    ClusterRole and ClusterRoleBinding that let it list the runs of both training APIs."""
    labels = {"app.kubernetes.io/managed-by": "eks-distributed-training"}
    meta = {"name": "training-drain", "namespace": namespace, "labels": labels}
    cluster_meta = {"name": "training-drain", "labels": labels}

    def binding(kind: str, metadata: dict) -> dict:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding", "metadata": metadata,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": metadata["name"]},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DRAIN_GROUP}]}

    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": list(RULES)},
        binding("Role", meta),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": cluster_meta,
         "rules": list(CLUSTER_RULES)},
        binding("ClusterRole", cluster_meta),
    ]


class TrainingDrain(Construct):
    """Attributes: `resource` (deleted before every construct in `holds`), `role`, `rbac` (the
    KubernetesManifest of the Role and RoleBinding), `access_entry`."""

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, namespace: str, claim: str,
                 holds: Sequence[Construct], after: Sequence[Construct] = (), log_key: kms.IKey | None = None,
                 training_api: str = DEFAULT_TRAINING_API):
        """`holds`: what must outlive the drain (the claim's manifest and everything it needs);
        `after`: what the RBAC manifest needs first (the namespace); `log_key` encrypts its log
        group (EncryptedLogs.key); `training_api`: the environment's trainingApi."""
        super().__init__(scope, id)
        if not holds:
            raise ValueError(f"{self.node.path}: holds is empty; name at least the manifest of claim {claim!r}")
        if training_api not in TRAINING_APIS:
            raise ValueError(f"{self.node.path}: training_api {training_api!r} is none of {', '.join(TRAINING_APIS)}")
        fn = TeardownFunction(
            self, "Handler", handler="training_drain.handler",
            description=f"On stack deletion: delete the runs in {namespace} and wait until no pod mounts {claim}",
            # Lambda's maximum: pods get their termination grace period to save and stop.
            timeout=cdk.Duration.minutes(15),
            vpc=cluster.vpc, vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[cluster.cluster_security_group], log_key=log_key,
        )
        self.role = fn.role
        fn.role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(VPC_ACCESS_POLICY))
        acknowledge(fn.role.node.default_child, f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{VPC_ACCESS_POLICY}]",
                    "Lambda's own policy for a function in a VPC: create, describe and delete the function's "
                    "network interfaces, and nothing else.")
        # The Update path tells a rollback from a switch by its own stack's status.
        fn.role.add_to_policy(iam.PolicyStatement(actions=["cloudformation:DescribeStacks"],
                                                  resources=[cdk.Stack.of(self).stack_id]))
        self.access_entry = eks.CfnAccessEntry(
            self, "Access", cluster_name=cluster.cluster_name, principal_arn=fn.role.role_arn,
            kubernetes_groups=[DRAIN_GROUP])
        self.rbac = eks.KubernetesManifest(self, "Rbac", cluster=cluster, manifest=drain_rbac(namespace),
                                           overwrite=True)
        for before in after:
            self.rbac.node.add_dependency(before)
        self.resource = cdk.CustomResource(
            self, "Resource", service_token=fn.function.function_arn, resource_type="Custom::TrainingDrain",
            properties={"ClusterName": cluster.cluster_name, "Endpoint": cluster.cluster_endpoint,
                        "CertificateAuthority": cluster.cluster_certificate_authority_data,
                        "Namespace": namespace, "ClaimName": claim,
                        **({} if training_api == DEFAULT_TRAINING_API else {"TrainingApi": training_api})},
        )
        # Deleted first: the drain needs its RBAC, its access entry, its function, and the claim
        # and everything else it is given, to still be there.
        for dependency in (self.rbac, self.access_entry, *holds):
            self.resource.node.add_dependency(dependency)
