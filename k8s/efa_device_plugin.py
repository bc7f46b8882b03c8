"""EFA device plugin: advertises vpc.amazonaws.com/efa on EFA nodes and hands pods the devices."""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s_plus_27 as kplus
from constructs import Construct

from config.environment import Environment
from config.kubernetes import EFA_LABEL
from k8s.base import ProjectChart, drop_all_capabilities, hardened, patch_pod_spec, resources, select_own_pods, tolerate_gpu_taint
from k8s.common import KUBELET_DEVICE_PLUGINS, efa_device_plugin_image

INFINIBAND_DEVICES = "/dev/infiniband"


@dataclass(frozen=True)
class EfaDevicePluginProps:
    image: str
    namespace: str = "kube-system"

    @classmethod
    def from_config(cls, config: Environment) -> "EfaDevicePluginProps":
        # The image lives in the EKS add-on registry of the cluster's own region.
        return cls(image=efa_device_plugin_image(config.region))


class EfaDevicePluginChart(ProjectChart):
    component = "efa-device-plugin"

    def __init__(self, scope: Construct, id: str, *, props: EfaDevicePluginProps):
        super().__init__(scope, id, namespace=props.namespace)
        name = "aws-efa-k8s-device-plugin"
        self.daemon_set = kplus.DaemonSet(
            self, "DaemonSet", metadata=self.meta(name),
            automount_service_account_token=False,
            # As upstream runs it: the plugin enumerates the node's EFA interfaces, which lives in
            # the host's network namespace.
            host_network=True,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=False),
            select=False,
        )
        select_own_pods(self.daemon_set, name)
        container = self.daemon_set.add_container(
            name=name, image=props.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            resources=resources(10, 64),
            security_context=hardened(ensure_non_root=False),
        )
        container.mount(KUBELET_DEVICE_PLUGINS,
                        kplus.Volume.from_host_path(self, "DevicePlugins", "device-plugin", path=KUBELET_DEVICE_PLUGINS))
        container.mount(INFINIBAND_DEVICES,
                        kplus.Volume.from_host_path(self, "Infiniband", "infiniband", path=INFINIBAND_DEVICES),
                        read_only=True)
        # EFA node groups only; they are GPU groups too, so tolerate the GPU taint.
        self.daemon_set.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_(EFA_LABEL, "true")))
        tolerate_gpu_taint(self.daemon_set)
        drop_all_capabilities(self.daemon_set)
        patch_pod_spec(self.daemon_set, "priorityClassName", "system-node-critical")
