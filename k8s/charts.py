"""Every add-on of an environment as a cdk8s chart, in apply order: one set of chart objects that
both sinks (the CDK stack and dist/ YAML) consume.

The add-ons are found by scanning k8s/addons/: each module there is one add-on and ends in one
`ADDON = AddOn(...)` (k8s/addons/__init__.py), so adding a chart is adding a module. The apply
order follows from what each declares it needs (`depends_on`, and `after` for add-ons it follows
only where the environment has them): an add-on's layer is one more than its deepest
dependency's, and add-ons apply layer by layer, by name within a layer.

The charts only wrap: every object is a dict the add-on built (its pods from k8s/pods), so CDK,
dist/ and ops render the very same objects.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import cdk8s
from constructs import Construct

import k8s.addons
from config.environment import Environment
from k8s.addons import AddOn, ClusterValues, Readiness
from k8s.pods.names import project_labels


def raw_object(scope: Construct, id: str, manifest: dict) -> cdk8s.ApiObject:
    """An ApiObject from a whole manifest dict. Each top-level field goes in as one JSON patch,
    unchanged: a bare ApiObject has no typed serialiser to drop anything."""
    obj = cdk8s.ApiObject(scope, id, api_version=manifest["apiVersion"], kind=manifest["kind"],
                          metadata=manifest.get("metadata", {}))
    for key, value in manifest.items():
        if key not in ("apiVersion", "kind", "metadata"):
            obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj


class AddOnChart(cdk8s.Chart):
    """One add-on's objects, carrying the project's labels and keeping the names they were given.

    Resource names are stable (no cdk8s hash suffix): jobs, Services and the rendezvous host are
    looked up by name, and a renamed object would be a new object on the cluster.
    """

    def __init__(self, scope: Construct, addon: AddOn, objects: list[dict]):
        super().__init__(scope, addon.name, disable_resource_name_hashes=True, labels=project_labels(addon.component))
        self.addon = addon
        self.ready_when = addon.ready_when
        for index, manifest in enumerate(objects):
            metadata = manifest["metadata"]
            raw_object(self, f"{index}-{metadata.get('namespace', '')}-{manifest['kind']}-{metadata['name']}", manifest)


@dataclass(frozen=True)
class ChartEntry:
    name: str  # file stem in dist/ and construct id in the CDK stack
    chart: AddOnChart
    depends_on: tuple[str, ...] = ()

    @property
    def ready_when(self) -> Readiness | None:
        return self.chart.ready_when


def addons() -> dict[str, AddOn]:
    """add-on name -> add-on, for every module of k8s/addons/."""
    found: dict[str, AddOn] = {}
    for info in sorted(pkgutil.iter_modules(k8s.addons.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"k8s.addons.{info.name}")
        addon = getattr(module, "ADDON", None)
        if not isinstance(addon, AddOn):
            raise ValueError(f"k8s/addons/{info.name}.py defines no ADDON = AddOn(...); "
                             "every module there is one add-on")
        if addon.name in found:
            raise ValueError(f"two add-ons are named {addon.name}: k8s/addons/{info.name}.py and another")
        found[addon.name] = addon
    return found


def apply_order(config: Environment, available: dict[str, AddOn] | None = None) -> list[tuple[AddOn, tuple[str, ...]]]:
    """(add-on, the add-ons it waits for) for every add-on `config` gets, in apply order."""
    available = addons() if available is None else available
    present = {name: addon for name, addon in available.items() if addon.applies_to(config)}
    waits: dict[str, tuple[str, ...]] = {}
    for name, addon in present.items():
        for dep in addon.depends_on:
            if dep not in available:
                raise ValueError(f"add-on {name} depends on {dep}, which no module of k8s/addons/ provides")
            if dep not in present:
                raise ValueError(f"add-on {name} depends on {dep}, which environment {config.name} does not get")
        later = tuple(d for d in addon.after if d in present and d not in addon.depends_on)
        waits[name] = tuple(addon.depends_on) + later
    layer: dict[str, int] = {}

    def depth(name: str, path: tuple[str, ...] = ()) -> int:
        if name in path:
            raise ValueError(f"add-on dependencies form a cycle: {' -> '.join(path + (name,))}")
        if name not in layer:
            layer[name] = 1 + max((depth(d, path + (name,)) for d in waits[name]), default=-1)
        return layer[name]

    order = sorted(present, key=lambda n: (depth(n), n))
    return [(present[name], waits[name]) for name in order]


class EnvironmentCharts:
    """Builds the charts for `config` from `values` inside one cdk8s App."""

    def __init__(self, config: Environment, values: ClusterValues, *, app: cdk8s.App | None = None):
        self.config = config
        self.values = values
        self.app = app or cdk8s.App()
        self.entries: list[ChartEntry] = []
        built: dict[str, AddOnChart] = {}
        for addon, waits in apply_order(config):
            chart = AddOnChart(self.app, addon, addon.objects(config, values))
            for dep in waits:
                chart.add_dependency(built[dep])
            built[addon.name] = chart
            self.entries.append(ChartEntry(addon.name, chart, waits))

    def entry(self, name: str) -> ChartEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def manifests(self) -> dict[str, list[dict]]:
        """Chart name -> its objects, in apply order."""
        return {e.name: e.chart.to_json() for e in self.entries}
