"""Namespaces: created first, because every other chart puts objects in them."""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s_plus_27 as kplus
from constructs import Construct

from config.kubernetes import TRAINING_NAMESPACE
from k8s.base import ProjectChart
from k8s.common import KUBEFLOW_NAMESPACE


@dataclass(frozen=True)
class NamespacesProps:
    names: tuple[str, ...] = (KUBEFLOW_NAMESPACE, TRAINING_NAMESPACE)


class NamespacesChart(ProjectChart):
    component = "namespaces"
    addon = "namespaces"

    def __init__(self, scope: Construct, id: str, *, props: NamespacesProps = NamespacesProps()):
        super().__init__(scope, id)
        if len(set(props.names)) != len(props.names):
            raise ValueError(f"namespace listed twice: {props.names}")
        self.namespaces = {name: kplus.Namespace(self, name, metadata={"name": name}) for name in props.names}
