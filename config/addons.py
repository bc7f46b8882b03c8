"""The EKS add-ons every cluster runs, and the configuration values each one is given.

One list for the Cluster stack (which installs them), config (which lets an environment pin
their versions) and preflight (which asks EKS whether each pin and each configuration would be
accepted). Configuration values are the add-on's Helm chart values; EKS accepts the subset its
published configuration schema lists (DescribeAddonConfiguration), which preflight checks.

Why each add-on gets what it gets, given nodes whose IMDS answers only the host (hop limit 1,
cdk_constructs/node_launch_template.py):
- vpc-cni, kube-proxy, eks-pod-identity-agent, eks-node-monitoring-agent, and the CloudWatch
  agent and Fluent Bit of amazon-cloudwatch-observability run with hostNetwork: true (their charts:
  amazon-vpc-cni-k8s charts/aws-vpc-cni, eks-pod-identity-agent charts/eks-pod-identity-agent,
  eks-node-monitoring-agent chart 1.7.0, amazon-cloudwatch-observability chart 6.4.0 `agent.hostNetwork:
  true` and the fluent-bit DaemonSet), so IMDS still answers them. CloudWatch's region and cluster
  name are chart values EKS fills in itself.
- coredns does not call AWS.
- aws-fsx-csi-driver (v1.9.0) runs neither its controller nor its node plugin on the host network
  (chart 1.17.0) and, without AWS_REGION, asks IMDS for the region (pkg/driver/controller.go and
  node.go); the chart's controller.region and node.region set AWS_REGION. The node plugin still
  asks IMDS for its instance ID and zone and, when that fails, reads them from its Node object's
  providerID (pkg/cloud/metadata.go, metadata_k8s.go), which its ClusterRole allows.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from config.kubernetes import GPU_TAINT_EFFECT, GPU_TAINT_KEY

if TYPE_CHECKING:
    from config.environment import Environment

VPC_CNI = "vpc-cni"
KUBE_PROXY = "kube-proxy"
COREDNS = "coredns"
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
FSX_CSI_DRIVER = "aws-fsx-csi-driver"
CLOUDWATCH_OBSERVABILITY = "amazon-cloudwatch-observability"
NODE_MONITORING_AGENT = "eks-node-monitoring-agent"

# In install order.
MANAGED_ADDONS = (VPC_CNI, KUBE_PROXY, COREDNS, POD_IDENTITY_AGENT, FSX_CSI_DRIVER, CLOUDWATCH_OBSERVABILITY,
                  NODE_MONITORING_AGENT)
# EKS installs self-managed copies of these into every new cluster; the add-on must take them over
# ("Create an Amazon EKS add-on", https://docs.aws.amazon.com/eks/latest/userguide/creating-an-add-on.html).
TAKES_OVER_SELF_MANAGED = (VPC_CNI, KUBE_PROXY, COREDNS)

# e.g. v1.20.4-eksbuild.1 (DescribeAddonVersions' addonVersion).
ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$", re.ASCII)
ADDON_VERSION_EXAMPLE = "v1.12.4-eksbuild.1"

_TOLERATE_GPU_TAINT = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}

# Container Insights with enhanced observability; accelerated compute metrics are the NVIDIA DCGM
# (GPU) and EFA counters the add-on collects on nodes that have them.
CLOUDWATCH_CONFIGURATION = {
    "containerLogs": {"enabled": True},
    "agent": {"config": {"logs": {"metrics_collected": {"kubernetes": {
        "enhanced_container_insights": True, "accelerated_compute_metrics": True,
    }}}}},
}


def configuration_values(env: "Environment") -> dict[str, dict[str, Any]]:
    """Add-on name -> configuration values, for the add-ons that get any."""
    return {
        # Network policy enforcement lets the workloads layer fence namespaces.
        VPC_CNI: {"enableNetworkPolicy": "true"},
        FSX_CSI_DRIVER: {"controller": {"region": env.region}, "node": {"region": env.region}},
        CLOUDWATCH_OBSERVABILITY: CLOUDWATCH_CONFIGURATION,
        # Chart 1.7.0: the agent tolerates every taint, but the dcgm-server DaemonSet it reads GPU
        # health from has `tolerations: []` and would never run on tainted GPU nodes.
        NODE_MONITORING_AGENT: {"dcgmAgent": {"tolerations": [dict(_TOLERATE_GPU_TAINT)]}},
    }
