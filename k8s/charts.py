"""Every chart of an environment, in apply order with explicit dependencies: one set of chart
objects that both sinks (the CDK stack and dist/ YAML) consume."""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s

from config.environment import Environment
from k8s.base import ProjectChart
from k8s.crds import TrainingOperatorCrdsChart
from k8s.efa_device_plugin import EfaDevicePluginChart, EfaDevicePluginProps
from k8s.etcd import EtcdChart
from k8s.fsx_storage import FsxStorageChart, FsxStorageProps
from k8s.namespaces import NamespacesChart
from k8s.nvidia_device_plugin import NvidiaDevicePluginChart, NvidiaDevicePluginProps
from k8s.training_jobs import TrainingJobsChart, TrainingJobsProps
from k8s.training_operator import TrainingOperatorChart
from k8s.validation import ClusterValidationChart, ValidationProps
from k8s.values import ClusterValues


@dataclass(frozen=True)
class ChartEntry:
    name: str  # file stem in dist/ and construct id in the CDK stack
    chart: ProjectChart
    depends_on: tuple[str, ...] = ()


class EnvironmentCharts:
    """Builds the charts for `config` from `values` inside one cdk8s App.

    Order and dependencies: namespaces and CRDs before anything that uses them; device plugins
    before the checks that need GPUs; the operator, etcd and storage before the jobs.
    """

    def __init__(self, config: Environment, values: ClusterValues, *, app: cdk8s.App | None = None):
        self.config = config
        self.values = values
        self.app = app or cdk8s.App()
        self.entries: list[ChartEntry] = []
        add = self._add
        add("namespaces", NamespacesChart(self.app, "namespaces"))
        add("training-operator-crds", TrainingOperatorCrdsChart(self.app, "training-operator-crds"))
        plugins: list[str] = []
        if config.gpu_nodegroups:
            add("nvidia-device-plugin", NvidiaDevicePluginChart(
                self.app, "nvidia-device-plugin", props=NvidiaDevicePluginProps.from_config(config)))
            plugins.append("nvidia-device-plugin")
        if any(g.instance_type.supports_efa for g in config.gpu_nodegroups):
            add("efa-device-plugin", EfaDevicePluginChart(
                self.app, "efa-device-plugin", props=EfaDevicePluginProps.from_config(config)))
            plugins.append("efa-device-plugin")
        add("training-operator", TrainingOperatorChart(self.app, "training-operator"),
            "namespaces", "training-operator-crds")
        add("etcd", EtcdChart(self.app, "etcd"), "namespaces")
        add("fsx-storage", FsxStorageChart(self.app, "fsx-storage", props=FsxStorageProps.from_config(
            config, file_system_id=values.fsx_file_system_id, dns_name=values.fsx_dns_name,
            mount_name=values.fsx_mount_name)), "namespaces")
        add("training-jobs", TrainingJobsChart(self.app, "training-jobs", props=TrainingJobsProps(
            config=config, images=dict(values.trainer_images))),
            "training-operator-crds", "training-operator", "etcd", "fsx-storage")
        if config.gpu_nodegroups:
            add("cluster-validation", ClusterValidationChart(
                self.app, "cluster-validation", props=ValidationProps(config=config)),
                "namespaces", "training-operator-crds", "training-operator", *plugins)

    def _add(self, name: str, chart: ProjectChart, *depends_on: str) -> None:
        known = {e.name: e for e in self.entries}
        for dep in depends_on:
            if dep not in known:
                raise ValueError(f"chart {name} depends on {dep}, which is not built before it")
            chart.add_dependency(known[dep].chart)
        self.entries.append(ChartEntry(name, chart, tuple(depends_on)))

    def entry(self, name: str) -> ChartEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def manifests(self) -> dict[str, list[dict]]:
        """Chart name -> its objects, in apply order."""
        return {e.name: e.chart.to_json() for e in self.entries}
