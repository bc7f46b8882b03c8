"""What the capacity-block stop CronJobs (k8s/pods/capacity_block_stop.py) run as, on environments with
a capacity-block group: a ServiceAccount in the training namespace and a Role allowing exactly the
script's calls (list the runs, annotate and suspend them, or under Kueue deactivate their Workloads,
delete its own CronJob). `ops capacity-block
schedule` creates the CronJobs themselves, per block, because their schedule comes from the block's
end date, which only EC2 knows."""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import TRAINING_NAMESPACE
from k8s.addons import AddOn
from k8s.pods.capacity_block_stop import NAME, cronjob_name

RBAC = "rbac.authorization.k8s.io/v1"


def block_groups(config: Environment) -> list[str]:
    return [g.name for g in config.gpu_nodegroups if g.capacity.type == "capacityBlock"]


def stop_rules(config: Environment) -> list[dict]:
    """What the environment's stop script calls: kubectl get -o jsonpath lists; kubectl annotate and
    kubectl patch read the object, then patch it; delete by name deletes."""
    if config.training_api == "v1":
        runs = [{"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get", "list", "patch"]}]
    else:
        runs = [
            # Which group a run is on: its runtime's node selector (list only).
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"], "verbs": ["list"]},
            # List them; annotate each (under Kueue), and suspend it (without).
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get", "list", "patch"]},
        ]
        if config.queueing == "kueue":
            runs.append({"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
                         "verbs": ["get", "list", "patch"]})
    return [
        *runs,
        # Its own CronJob only.
        {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["delete"],
         "resourceNames": [cronjob_name(g) for g in block_groups(config)]},
    ]


def stop_rbac(config: Environment) -> list[dict]:
    meta = {"name": NAME, "namespace": TRAINING_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": RBAC, "kind": "Role", "metadata": dict(meta), "rules": stop_rules(config)},
        {"apiVersion": RBAC, "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": TRAINING_NAMESPACE}]},
    ]


ADDON = AddOn(name="capacity-block-stop", depends_on=("namespaces",),
              applies_to=lambda config: bool(block_groups(config)),
              objects=lambda config, values: stop_rbac(config))
