"""Every chart of an environment, in apply order: one set of chart objects that both sinks (the
CDK stack and dist/ YAML) consume.

The charts are add-ons in the style of cdk-eks-blueprints: each chart module's ProjectChart
subclass with an `addon` name is found by scanning this package, so adding a chart is adding a
file. Each declares what must be applied before it (`depends_on`, and `after` for charts it
follows only where the environment has them) and whether an environment gets it. The apply
order follows from those declarations: a chart's layer is one more than its deepest dependency's,
and charts apply layer by layer, by name within a layer.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import cdk8s

from config.environment import Environment
from k8s.base import ProjectChart, Readiness
from k8s.values import ClusterValues


@dataclass(frozen=True)
class ChartEntry:
    name: str  # file stem in dist/ and construct id in the CDK stack
    chart: ProjectChart
    depends_on: tuple[str, ...] = ()

    @property
    def ready_when(self) -> Readiness | None:
        return self.chart.ready_when


def addons() -> dict[str, type[ProjectChart]]:
    """addon name -> chart class, for every chart module in this package."""
    import k8s

    found: dict[str, type[ProjectChart]] = {}
    for info in sorted(pkgutil.iter_modules(k8s.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"k8s.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, ProjectChart) and value.__module__ == module.__name__
                    and value.addon):
                if value.addon in found:
                    raise ValueError(f"two charts are named {value.addon}: {found[value.addon].__name__} "
                                     f"and {value.__name__}")
                found[value.addon] = value
    return found


def apply_order(config: Environment, available: dict[str, type[ProjectChart]] | None = None
                ) -> list[tuple[type[ProjectChart], tuple[str, ...]]]:
    """(chart class, the charts it waits for) for every chart `config` gets, in apply order."""
    available = addons() if available is None else available
    present = {name: cls for name, cls in available.items() if cls.applies_to(config)}
    waits: dict[str, tuple[str, ...]] = {}
    for name, cls in present.items():
        for dep in cls.depends_on:
            if dep not in available:
                raise ValueError(f"chart {name} depends on {dep}, which no chart in k8s/ provides")
            if dep not in present:
                raise ValueError(f"chart {name} depends on {dep}, which environment {config.name} does not get")
        waits[name] = tuple(cls.depends_on) + tuple(d for d in cls.after if d in present and d not in cls.depends_on)
    layer: dict[str, int] = {}

    def depth(name: str, path: tuple[str, ...] = ()) -> int:
        if name in path:
            raise ValueError(f"chart dependencies form a cycle: {' -> '.join(path + (name,))}")
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
        built: dict[str, ProjectChart] = {}
        for cls, waits in apply_order(config):
            chart = cls.for_environment(self.app, config, values)
            for dep in waits:
                chart.add_dependency(built[dep])
            built[cls.addon] = chart
            self.entries.append(ChartEntry(cls.addon, chart, waits))

    def entry(self, name: str) -> ChartEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def manifests(self) -> dict[str, list[dict]]:
        """Chart name -> its objects, in apply order."""
        return {e.name: e.chart.to_json() for e in self.entries}
