"""cdk8s charts: the Kubernetes half of the product.

One chart per file, each a class taking a typed props dataclass:
  namespaces.py            kubeflow and training namespaces
  crds.py                  small structural PyTorchJob / MPIJob CRDs (kubeflow.org/v1)
  nvidia_device_plugin.py  nvidia.com/gpu on GPU node groups
  efa_device_plugin.py     vpc.amazonaws.com/efa on EFA node groups
  training_operator.py     Kubeflow Training Operator v1.9 (PyTorchJob and MPIJob only)
  etcd.py                  etcd v3.5 with the v2 API for torch's etcd-v2 rendezvous
  fsx_storage.py           static FSx for Lustre PV and the `fsx-pvc` claim
  training_jobs.py         the preset PyTorchJobs an environment can run
  validation.py            GPU check Jobs and the NCCL all-reduce MPIJob
Shared: base.py (chart base, cdk8s-plus overrides), common.py (names, pinned images, pod rules),
jobs.py (render_pytorchjob: the PyTorchJob code path shared with `ops submit`; no cdk8s import),
charts.py (every chart of an environment, ordered), values.py (stack values and dist placeholders),
sinks.py (dist/<env>/ YAML). stacks/workloads.py is the CDK sink.
"""
