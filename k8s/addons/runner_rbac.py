"""What the pipeline's validation runner may do in the cluster: exactly what `ops validate` does.

The runner's access entry (stacks/validation.py) carries no EKS access policy: those are fixed rule
lists, Edit reads every Secret of its namespaces and none covers kubeflow.org, so the NCCL MPIJob's
create was refused ("Review access policy permissions",
https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html). It names the
Kubernetes group VALIDATION_RUNNER_GROUP instead, bound here to a ClusterRole that may only list
nodes and a Role in the training namespace over the GPU check Jobs, the NCCL sweep's MPIJobs, the
smoke run (its PyTorchJob, or under trainingApi v2 its TrainingRuntime and TrainJob: such a cluster
has no PyTorchJob kind, so the role names none) and their pods' logs. It creates no NetworkPolicy:
the network-policies chart deploys the sweep's and the smoke run's peers policies
(k8s/addons/network_policies.py). It deletes no pod: the runner runs no drill. Nothing here touches
a Secret. tests/ops/test_validation_runner_rbac.py records every request a real kubectl makes during
`ops validate`, under either training API, and holds these rules to exactly that list.
"""

from __future__ import annotations

from config.kubernetes import TRAINING_NAMESPACE, VALIDATION_RUNNER_GROUP
from k8s.addons import AddOn
from k8s.pods.trainjob import GROUP as TRAINER_GROUP

NAME = "validation-runner"
Rule = tuple[str, tuple[str, ...], tuple[str, ...]]  # API group, resources, verbs

# `kubectl get nodes -l ...`: Ready nodes per node group decide which checks can run.
CLUSTER_RULES: tuple[Rule, ...] = (("", ("nodes",), ("list",)),)
# Per check: `kubectl delete --ignore-not-found --wait` (delete, then get, list and watch until it is
# gone; the NCCL sweep also deletes the last sweep's MPIJobs by label, a list and a delete each),
# `kubectl create -f -`, `kubectl get` of its status, `kubectl logs -l` of its pods. Under v2 the
# smoke run's TrainingRuntime goes the same way as its TrainJob (its status is the TrainJob's).
JOB_VERBS = ("create", "delete", "get", "list", "watch")
NAMESPACE_RULES: tuple[Rule, ...] = (
    ("batch", ("jobs",), JOB_VERBS),
    ("kubeflow.org", ("mpijobs", "pytorchjobs"), JOB_VERBS),
    ("", ("pods",), ("list",)),
    ("", ("pods/log",), ("get",)),
)
NAMESPACE_RULES_V2: tuple[Rule, ...] = (
    ("batch", ("jobs",), JOB_VERBS),
    ("kubeflow.org", ("mpijobs",), JOB_VERBS),
    (TRAINER_GROUP, ("trainingruntimes", "trainjobs"), JOB_VERBS),
    ("", ("pods",), ("list",)),
    ("", ("pods/log",), ("get",)),
)


def policy_rules(rules: tuple[Rule, ...]) -> list[dict]:
    return [{"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
            for group, resources, verbs in rules]


def runner_rbac(namespace: str = TRAINING_NAMESPACE, group: str = VALIDATION_RUNNER_GROUP, *,
                training_api: str = "v1") -> list[dict]:
    subject = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}]
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": NAME}, "rules": policy_rules(CLUSTER_RULES)},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": subject},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": NAME, "namespace": namespace},
         "rules": policy_rules(NAMESPACE_RULES_V2 if training_api == "v2" else NAMESPACE_RULES)},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": NAME, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": subject},
    ]


# Not "validation-...": ops validate reads every dist file whose name says validation.
ADDON = AddOn(name="runner-rbac", component="validation-runner", depends_on=("namespaces",),
              objects=lambda config, values: runner_rbac(training_api=config.training_api))
