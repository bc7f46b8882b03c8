"""The Kubernetes versions the config allows, read against the EKS release calendar and kubectl's skew."""

from datetime import date

from config import eks_versions
from config.eks_versions import SUPPORTED_KUBERNETES_VERSIONS


def minor(version: str) -> int:
    major, minor_ = version.lstrip("v").split(".")[:2]
    assert major == "1"
    return int(minor_)


def test_allowed_versions_are_exactly_those_in_eks_standard_support_on_the_recorded_date():
    """Amazon EKS User Guide, "Understand the Kubernetes version lifecycle on EKS", release
    calendar (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)."""
    assert eks_versions.CALENDAR_AS_OF == date(2026, 11, 23)
    in_standard = [v.version for v in eks_versions.CALENDAR
                   if v.eks_release <= eks_versions.CALENDAR_AS_OF < v.end_of_standard_support]
    assert SUPPORTED_KUBERNETES_VERSIONS == tuple(sorted(in_standard, key=minor)) == ("1.34", "1.35", "1.36")


def test_calendar_rows_follow_the_documented_14_plus_12_month_lifecycle():
    """Same page: standard support for 14 months after the EKS release, then 12 months extended."""
    for row in eks_versions.CALENDAR:
        months = lambda a, b: (b.year - a.year) * 12 + b.month - a.month  # noqa: E731
        assert months(row.eks_release, row.end_of_standard_support) == 14, row.version
        assert months(row.end_of_standard_support, row.end_of_extended_support) == 12, row.version


def test_kubectl_serves_every_allowed_version_within_one_minor_of_skew():
    """Kubernetes version skew policy (https://kubernetes.io/releases/version-skew-policy/#kubectl):
    kubectl is supported within one minor version (older or newer) of kube-apiserver."""
    assert eks_versions.DEFAULT_KUBERNETES_VERSION == "1.35"
    assert eks_versions.KUBECTL_VERSION == "v1.35.2"
    for version in SUPPORTED_KUBERNETES_VERSIONS:
        assert abs(minor(version) - minor(eks_versions.KUBECTL_VERSION)) <= 1, version


def test_the_kubectl_layer_installed_is_the_one_the_cluster_uses():
    from aws_cdk import lambda_layer_kubectl_v35  # noqa: F401  (pinned in requirements.txt)
    from pathlib import Path
    requirements = (Path(__file__).resolve().parents[2] / "requirements.txt").read_text()
    assert "aws-cdk.lambda-layer-kubectl-v35==2.2.2" in requirements.splitlines()
    assert "lambda-layer-kubectl-v33" not in requirements


def test_every_image_that_runs_kubectl_gets_one_within_one_minor_of_its_cluster():
    """kubectl_for picks the kubectl of the MPI launcher's kubectl-delivery image and of the
    validation runner per environment; a cluster version no build serves within one minor (say,
    1.37 added to the calendar without a kubectl) is refused rather than run out of skew."""
    import json
    from pathlib import Path

    import pytest

    from config import load_environment

    for version in SUPPORTED_KUBERNETES_VERSIONS:
        kubectl, digest = eks_versions.kubectl_for(version)
        assert abs(minor(kubectl) - minor(version)) <= 1 and len(digest) == 64, version
    raw = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]["environments"]
    for name in raw:
        env = load_environment(raw, name)
        assert abs(minor(eks_versions.kubectl_for(env.kubernetes_version)[0]) - minor(env.kubernetes_version)) <= 1
    for drifted in ("1.33", "1.37"):
        with pytest.raises(ValueError, match=f"no kubectl within one minor version of Kubernetes {drifted}"):
            eks_versions.kubectl_for(drifted)
