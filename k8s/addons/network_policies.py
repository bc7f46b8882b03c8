"""The NetworkPolicies of every namespace we create (k8s/pods/network_policy.py says what each allows
and why), plus the peers policies of the jobs no `ops start`/`ops submit` creates a policy for:

- each NCCL group's sweep (`ops validate` names its pairs at run time and may not create policies:
  one policy per group selects every pair's pods by their group label);
- validation's smoke run, `validation-cpu-ddp`, which `ops validate` creates under that fixed name
  (a PyTorchJob's pods, or under trainingApi v2 the TrainJob's: JobSet labels those differently);
- the runs earlier releases deployed under their preset's name (the stand-ins of stacks/workloads.py
  keep those PyTorchJobs; a deploy must not cut their workers off from each other either).

`ops start` and `ops submit` create the peers policy of each run they create (ops/kube.py).
"""

from __future__ import annotations

from config.environment import Environment
from k8s.addons import AddOn
from k8s.pods.names import nccl_groups
from k8s.pods.network_policy import (
    job_peers_policy, nccl_group_peers_policy, operator_policies, trainer_v2_policies, training_policies,
    trainjob_peers_policy,
)
from k8s.pods.pytorchjob import API_VERSION as PYTORCHJOB_API_VERSION, KIND as PYTORCHJOB_KIND, presets_for
from k8s.pods.trainjob import API_VERSION as TRAINJOB_API_VERSION, KIND as TRAINJOB_KIND
from k8s.pods.validation import SMOKE_RUN, has_smoke_run


def fixed_name_runs(config: Environment) -> list[str]:
    """The PyTorchJobs of `config` whose names are known before they exist: the smoke run, where the
    environment has one under trainingApi v1, and the preset-named runs earlier releases deployed."""
    smoke = [SMOKE_RUN] if has_smoke_run(config) and config.training_api == "v1" else []
    return smoke + [preset.name for preset in presets_for(config)]


def smoke_trainjob_policy(config: Environment) -> list[dict]:
    """Under trainingApi v2, the peers policy of the smoke run's TrainJob, where there is one."""
    if config.training_api != "v2" or not has_smoke_run(config):
        return []
    return [trainjob_peers_policy({"apiVersion": TRAINJOB_API_VERSION, "kind": TRAINJOB_KIND,
                                   "metadata": {"name": SMOKE_RUN}})]


def network_policies(config: Environment) -> list[dict]:
    policies = [*operator_policies(config.vpc_cidr), *training_policies(config.vpc_cidr)]
    if config.training_api == "v2":
        policies += trainer_v2_policies(config.vpc_cidr)
    policies += [nccl_group_peers_policy(group.name) for group in nccl_groups(config)]
    policies += smoke_trainjob_policy(config)
    return policies + [job_peers_policy({"apiVersion": PYTORCHJOB_API_VERSION, "kind": PYTORCHJOB_KIND,
                                         "metadata": {"name": name}}) for name in fixed_name_runs(config)]


ADDON = AddOn(name="network-policies", depends_on=("namespaces",),
              objects=lambda config, values: network_policies(config))
