"""NVIDIA's GPU DRA driver node agent: the kubelet plugin DaemonSet of chart dra-driver-nvidia-gpu
0.4.1 (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1, deployments/helm/dra-driver-nvidia-gpu/
templates/kubeletplugin.yaml) rendered as EKS installs it: `resources.computeDomains.enabled=false`
and `gpuResourcesEnabledOverride=true`, every other value at its default (device-management-nvidia-dra-device-plugin).

So only the `gpus` container (gpu-kubelet-plugin) and the init container that waits for the
driver; no compute-domains container, no controller (it serves ComputeDomains only). Privileged, as
upstream runs it: it creates GPU device nodes and writes CDI specs under /var/run/cdi. It publishes
the node's GPUs as ResourceSlices of driver gpu.nvidia.com with the standard pcieRoot attribute.
Ours differs only where tests/k8s/addons/test_conformance_nvidia_dra_driver.py declares it: our
gpuAllocation dra groups by label, resources requested, our pod labels.
"""

from __future__ import annotations

from config.kubernetes import GPU_ALLOCATION_LABEL, GPU_DRA, GPU_TAINT_KEY, KUBE_SYSTEM_NAMESPACE, NVIDIA_DRA_DRIVER
from k8s.pods.resources import fixed_resources
from k8s.pods.workload import container, daemon_set, host_path_volume, own_pods, pod_spec, required_node_affinity

KUBELET_PLUGIN = f"{NVIDIA_DRA_DRIVER}-kubelet-plugin"
# _helpers.tpl serviceAccountName (release name == chart name, so fullname is the chart's) + "-kubeletplugin".
SERVICE_ACCOUNT = f"{NVIDIA_DRA_DRIVER}-service-account-kubeletplugin"
REGISTRAR_DIR = "/var/lib/kubelet/plugins_registry"  # values kubeletPlugin.kubeletRegistrarDirectoryPath
PLUGINS_DIR = "/var/lib/kubelet/plugins"  # values kubeletPlugin.kubeletPluginsDirectoryPath
CDI_ROOT = "/var/run/cdi"
DRIVER_ROOT = "/"  # values nvidiaDriverRoot: the EKS NVIDIA AMIs install the driver on the host
GPU_HEALTH_PORT = 51516  # values kubeletPlugin.containers.gpus.healthcheckPort
GPU_METRICS_ENDPOINT = ":8080"  # values kubeletPlugin.metrics.gpuHttpEndpoint
LOG_VERBOSITY = "4"  # values logVerbosity
PRIVILEGED = {"privileged": True}


def _env(name: str, value: str) -> dict:
    return {"name": name, "value": value}


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _grpc_probe(failure_threshold: int, period_s: int) -> dict:
    return {"grpc": {"port": GPU_HEALTH_PORT, "service": "liveness"}, "failureThreshold": failure_threshold,
            "periodSeconds": period_s, "timeoutSeconds": 10}


def gpu_kubelet_plugin_daemon_set(image: str) -> dict:
    directories = [_env("KUBELET_REGISTRAR_DIRECTORY_PATH", REGISTRAR_DIR), _env("KUBELET_PLUGINS_DIRECTORY_PATH", PLUGINS_DIR)]
    init = container(
        name="init-container", image=image, resources=fixed_resources(10, 64), security_context=dict(PRIVILEGED),
        command=["bash", "/usr/bin/kubelet-plugin-prestart.sh"],
        env=[_env("NVIDIA_DRIVER_ROOT", DRIVER_ROOT), _env("NVIDIA_VISIBLE_DEVICES", "void"), *directories],
        volumeMounts=[{"name": "driver-root-parent", "mountPath": "/driver-root-parent", "readOnly": True}],
    )
    gpus = container(
        name="gpus", image=image,
        # Not measured: upstream sets none. A request keeps the scheduler honest about the node's room;
        # the limit is the request (our rule for node agents) with headroom for NVML and CDI generation.
        resources=fixed_resources(100, 512),
        security_context=dict(PRIVILEGED),
        command=["bash", "-c"],
        # The chart's script: mask the driver's params only when asked (MASK_NVIDIA_DRIVER_PARAMS), then run.
        args=['if [ "${MASK_NVIDIA_DRIVER_PARAMS}" = "true" ]; then\n'
              "  cp /proc/driver/nvidia/params /root/gpu-params\n"
              "  sed -i 's/^ModifyDeviceFiles: 1$/ModifyDeviceFiles: 0/' /root/gpu-params\n"
              "  mount --bind /root/gpu-params /proc/driver/nvidia/params\n"
              "fi\n"
              "gpu-kubelet-plugin -v $(LOG_VERBOSITY)"],
        startupProbe=_grpc_probe(600, 1),
        livenessProbe=_grpc_probe(3, 30),
        env=[_env("HTTP_ENDPOINT", GPU_METRICS_ENDPOINT), _env("METRICS_PATH", "/metrics"),
             _env("LOG_VERBOSITY", LOG_VERBOSITY), _env("MASK_NVIDIA_DRIVER_PARAMS", ""),
             _env("NVIDIA_DRIVER_ROOT", DRIVER_ROOT), _env("NVIDIA_VISIBLE_DEVICES", "void"),
             _env("CDI_ROOT", CDI_ROOT), _env("NVIDIA_MIG_CONFIG_DEVICES", "all"),
             _field("NODE_NAME", "spec.nodeName"), _field("NAMESPACE", "metadata.namespace"),
             _field("SERVICE_ACCOUNT_NAME", "spec.serviceAccountName"), _env("IMAGE_NAME", image),
             *directories, _env("HEALTHCHECK_PORT", str(GPU_HEALTH_PORT))],
        volumeMounts=[{"name": "plugins-registry", "mountPath": REGISTRAR_DIR},
                      {"name": "plugins", "mountPath": PLUGINS_DIR, "mountPropagation": "Bidirectional"},
                      {"name": "cdi", "mountPath": CDI_ROOT},
                      {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer"}],
    )
    pod = pod_spec(
        containers=[gpus], initContainers=[init],
        # It reads ResourceClaims and pods and writes ResourceSlices.
        automount_token=True,
        security_context={},
        serviceAccountName=SERVICE_ACCOUNT,
        # Upstream selects every NVIDIA GPU node; ours only the gpuAllocation dra groups, so that no node
        # runs it beside the NVIDIA device plugin.
        affinity=required_node_affinity(GPU_ALLOCATION_LABEL, [GPU_DRA]),
        tolerations=[{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        volumes=[host_path_volume("plugins-registry", REGISTRAR_DIR), host_path_volume("plugins", PLUGINS_DIR),
                 host_path_volume("cdi", CDI_ROOT),
                 host_path_volume("driver-root-parent", DRIVER_ROOT, "DirectoryOrCreate"),
                 host_path_volume("driver-root", DRIVER_ROOT, "DirectoryOrCreate")],
        priorityClassName="system-node-critical",
    )
    ds = daemon_set(name=KUBELET_PLUGIN, namespace=KUBE_SYSTEM_NAMESPACE, pod_labels=own_pods(KUBELET_PLUGIN), pod=pod)
    # values kubeletPlugin.updateStrategy: every node's plugin may restart at once (no workload dies with it).
    ds["spec"]["updateStrategy"] = {"rollingUpdate": {"maxUnavailable": "100%"}, "type": "RollingUpdate"}
    return ds
