"""The add-ons: one module per chart of an environment, each ending in one `ADDON = AddOn(...)`.

An add-on is a name, what it depends on, and the objects it deploys (plain dicts, their pods from
k8s/pods). k8s/charts.py finds every module of this package, orders the add-ons by their
dependencies and wraps each one's objects in a cdk8s chart; adding an add-on is adding a module
(cdk-eks-blueprints gives each add-on its folder and one ClusterAddOn interface the same way).

Also here: the values add-ons take from the AWS stacks (ClusterValues). In the CDK sink they are
CloudFormation tokens, resolved at deploy time. dist/ YAML must be applicable by hand, so each
unresolved token becomes a named placeholder `${NAME}` that `envsubst` fills (see the README the
dist sink writes next to the YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from aws_cdk import Token

from config.environment import Environment
from k8s.pods.images import IMAGE_VARIANTS, KUBECTL_DELIVERY_IMAGE, image_placeholder, placeholder


@dataclass(frozen=True)
class Readiness:
    """What must hold on the cluster before the add-ons that depend on this one are applied, and
    before a deploy that changed this one counts as done.

    `json_path` is read with `kubectl get`: the CDK sink waits until it yields any output (the
    semantics of aws-eks-v2's KubernetesObjectValue); `dist_wait` is the same condition for dist/
    readers, as a kubectl command line.
    """

    object_type: str
    name: str
    namespace: str
    json_path: str
    dist_wait: str
    timeout_minutes: int


@dataclass(frozen=True)
class Placeholder:
    name: str
    description: str
    fill: str | None = None  # shell right-hand side that yields the value, when known


@dataclass(frozen=True)
class ClusterValues:
    fsx_file_system_id: str
    fsx_dns_name: str
    fsx_mount_name: str
    trainer_images: Mapping[str, str]  # JobPreset.image_variant -> image URI
    kubectl_delivery_image: str = placeholder(KUBECTL_DELIVERY_IMAGE)
    # How to find each placeholder's value, by placeholder name (shown in dist/<env>/README.md).
    hints: Mapping[str, str] = field(default_factory=dict)
    # Shell right-hand sides that produce a value, e.g. "$(aws cloudformation ...)".
    fills: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def placeholders(cls, hints: Mapping[str, str] | None = None,
                     fills: Mapping[str, str] | None = None) -> "ClusterValues":
        """Values for building charts with no stacks at all: every value is its placeholder."""
        return cls(fsx_file_system_id="${FSX_FILE_SYSTEM_ID}", fsx_dns_name="${FSX_DNS_NAME}",
                   fsx_mount_name="${FSX_MOUNT_NAME}",
                   trainer_images={v: placeholder(image_placeholder(v)) for v in IMAGE_VARIANTS},
                   hints=dict(hints or {}), fills=dict(fills or {}))

    def named(self) -> list[tuple[str, str, str]]:
        """(placeholder name, value, what it is) for every value."""
        rows = [
            ("FSX_FILE_SYSTEM_ID", self.fsx_file_system_id, "FSx for Lustre file system id (fs-...)"),
            ("FSX_DNS_NAME", self.fsx_dns_name, "FSx DNS name"),
            ("FSX_MOUNT_NAME", self.fsx_mount_name, "FSx Lustre mount name"),
        ]
        rows += [(image_placeholder(v), uri, f"trainer image URI ({v})")
                 for v, uri in sorted(self.trainer_images.items())]
        rows.append((KUBECTL_DELIVERY_IMAGE, self.kubectl_delivery_image,
                     "the MPI launcher's kubectl-delivery image (kubectl within one minor of the cluster)"))
        return rows

    def dist_substitutions(self) -> dict[str, Placeholder]:
        """Unresolved token text -> the placeholder that replaces it in dist/."""
        subs: dict[str, Placeholder] = {}
        for name, value, what in self.named():
            if Token.is_unresolved(value):
                subs[value] = self._placeholder(name, what)
        return subs

    def placeholders_in_use(self) -> list[Placeholder]:
        """Every placeholder dist/ YAML may contain: substituted tokens and literal placeholders."""
        found = {p.name: p for p in self.dist_substitutions().values()}
        for name, value, what in self.named():
            if value == placeholder(name):
                found[name] = self._placeholder(name, what)
        return [found[k] for k in sorted(found)]

    def _placeholder(self, name: str, what: str) -> Placeholder:
        hint = self.hints.get(name)
        return Placeholder(name, f"{what}; {hint}" if hint else what, self.fills.get(name))


def _everywhere(config: Environment) -> bool:
    return True


@dataclass(frozen=True)
class AddOn:
    """One add-on of an environment.

    `objects(config, values)` returns its Kubernetes objects as dicts, in apply order.
    `depends_on`: add-ons applied (and, with a `ready_when`, ready) before it; every environment
    that gets this one must get those. `after`: add-ons it follows only where the environment has
    them. `applies_to(config)`: whether an environment gets it. `component`: the
    app.kubernetes.io/component label of its objects (default: its name). `ready_when`: what its
    dependents, and a deploy that changed it, wait for.
    """

    name: str
    objects: Callable[[Environment, ClusterValues], list[dict]]
    component: str = ""
    depends_on: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    applies_to: Callable[[Environment], bool] = _everywhere
    ready_when: Readiness | None = None

    def __post_init__(self):
        if not self.component:
            object.__setattr__(self, "component", self.name)
