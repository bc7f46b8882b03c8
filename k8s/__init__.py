"""The Kubernetes half of the product, in two parts.

k8s/pods/: plain-dict builders (no cdk8s) for every pod we run and the objects that carry them: the
runs' PyTorchJobs, the data and model-download Jobs, the validation Jobs and NCCL MPIJobs, the
add-ons' DaemonSets and Deployments, the NetworkPolicies that say which pod may talk to what, and
the one hardened securityContext. `ops` imports only this part, so CDK, dist/ and ops render the
very same pods.

k8s/addons/: one module per add-on chart of an environment, each one `AddOn` (a name, what it
depends on, its objects), found by scanning the folder. k8s/charts.py wraps each add-on's objects
in a cdk8s chart and orders them; k8s/sinks.py writes them as dist/<env>/ YAML (stacks/workloads.py
is the CDK sink).

k8s/images/kubectl-delivery/ is the MPI launcher's kubectl image the Workloads stack builds per
environment. Each third-party component is compared with its upstream release by
tests/k8s/addons/test_conformance_*.py.
"""
