"""The NetworkPolicies of every namespace we create (k8s/network.py says what each allows and why),
plus the peers policy of each job the charts deploy under a fixed name: the NCCL MPIJobs, which the
validation runner re-creates by name, and the preset PyTorchJobs of the training-jobs chart.
`ops submit` creates the peers policy of each run it creates (ops/kube.py).
"""

from __future__ import annotations

from constructs import Construct

from config.environment import Environment
from k8s.base import ProjectChart, raw_object
from k8s.common import nccl_groups, nccl_test_name
from k8s.jobs import API_VERSION as PYTORCHJOB_API_VERSION, KIND as PYTORCHJOB_KIND, presets_for
from k8s.network import job_peers_policy, operator_policies, training_policies


class NetworkPoliciesChart(ProjectChart):
    component = "network-policies"
    addon = "network-policies"
    depends_on = ("namespaces",)

    @classmethod
    def for_environment(cls, scope, config, values) -> "NetworkPoliciesChart":
        return cls(scope, cls.addon, config=config)

    def __init__(self, scope: Construct, id: str, *, config: Environment):
        super().__init__(scope, id)
        self.policies = [*operator_policies(config.vpc_cidr), *training_policies(config.vpc_cidr)]
        jobs = [("MPIJob", nccl_test_name(group.name)) for group in nccl_groups(config)]
        jobs += [(PYTORCHJOB_KIND, preset.name) for preset in presets_for(config)]
        self.policies += [job_peers_policy({"apiVersion": PYTORCHJOB_API_VERSION, "kind": kind,
                                            "metadata": {"name": name}}) for kind, name in jobs]
        for policy in self.policies:
            raw_object(self, f"{policy['metadata']['namespace']}-{policy['metadata']['name']}", policy)
