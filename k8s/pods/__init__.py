"""Plain-dict builders for every pod we run and the objects that carry them, with no cdk8s import.

Each module builds one kind of object (a run's PyTorchJob, the data and model-download Jobs, the
validation Jobs and MPIJobs, an add-on's DaemonSet or Deployment, the NetworkPolicies) or holds
one concern every pod shares: the hardened securityContext (security.py), what a pod takes from
its node (resources.py), the NCCL and EFA environment, the pinned images, the names, and the
strict PodSpec check every job template passes. The add-ons (k8s/addons/) and `ops` build their
pods from here, so a deploy, dist/ YAML and the command line render the same pod.
"""
