"""The values charts take from the AWS stacks, and how they appear in dist/.

In the CDK sink they are CloudFormation tokens, resolved at deploy time. dist/ YAML must be
applicable by hand, so each unresolved token becomes a named placeholder `${NAME}` that
`envsubst` fills (see the README the dist sink writes next to the YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from aws_cdk import Token

IMAGE_VARIANTS = ("cpu", "gpu")


def image_placeholder(variant: str) -> str:
    return f"TRAINER_IMAGE_{variant.upper()}"


# The MPI launcher's kubectl-delivery image, built per environment (k8s/images/kubectl-delivery).
KUBECTL_DELIVERY_IMAGE = "KUBECTL_DELIVERY_IMAGE"


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
    kubectl_delivery_image: str = f"${{{KUBECTL_DELIVERY_IMAGE}}}"
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
                   trainer_images={v: f"${{{image_placeholder(v)}}}" for v in IMAGE_VARIANTS},
                   hints=dict(hints or {}), fills=dict(fills or {}))

    def named(self) -> list[tuple[str, str, str]]:
        """(placeholder name, value, what it is) for every value."""
        rows = [
            ("FSX_FILE_SYSTEM_ID", self.fsx_file_system_id, "FSx for Lustre file system id (fs-...)"),
            ("FSX_DNS_NAME", self.fsx_dns_name, "FSx DNS name"),
            ("FSX_MOUNT_NAME", self.fsx_mount_name, "FSx Lustre mount name"),
        ]
        rows += [(image_placeholder(v), uri, f"trainer image URI ({v})") for v, uri in sorted(self.trainer_images.items())]
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
            if value == f"${{{name}}}":
                found[name] = self._placeholder(name, what)
        return [found[k] for k in sorted(found)]

    def _placeholder(self, name: str, what: str) -> Placeholder:
        hint = self.hints.get(name)
        return Placeholder(name, f"{what}; {hint}" if hint else what, self.fills.get(name))
