"""cdk8s charts: the Kubernetes half of the product.

One add-on chart per file, each a class taking a typed props dataclass and declaring its `addon`
name, what it depends on and whether an environment gets it (k8s/charts.py finds them all):
  namespaces.py            kubeflow and training namespaces, with their Pod Security Admission levels
  priority.py              the PriorityClass of etcd and the Training Operator
  crds.py                  small structural PyTorchJob / MPIJob CRDs (kubeflow.org/v1)
  nvidia_device_plugin.py  nvidia.com/gpu on GPU node groups (NVIDIA device plugin v0.19.3)
  efa_device_plugin.py     vpc.amazonaws.com/efa on EFA node groups (EFA device plugin v0.5.20)
  training_operator.py     Kubeflow Training Operator v1.9.4 (PyTorchJob and MPIJob only)
  etcd.py                  etcd v3.5 with the v2 API for torch's etcd-v2 rendezvous
  fsx_storage.py           static FSx for Lustre PV and the `fsx-pvc` claim
  validation_runner_rbac.py  what the pipeline's validation runner may do (its access entry's group)
  network_policies.py      default-deny NetworkPolicies and their allows in every namespace we create,
                           and the peers policies of the NCCL sweep, the smoke run and earlier releases' runs
  data_preparation.py      the data Jobs' ServiceAccounts (one per data source that copies from S3)
Shared: base.py (chart base and add-on declaration, cdk8s-plus overrides), device_plugin.py (the
device plugins' common DaemonSet), common.py (names, pinned images with their evidence, pod rules),
jobs.py (render_run: every run's PyTorchJob, created by `ops start`/`ops submit`, never by a deploy;
no cdk8s import),
model_download.py (the model-download Job `ops model download` creates; its chart is not an add-on),
validation.py (what `ops validate` creates: GPU check Jobs, the NCCL MPIJob template, the smoke run; not an add-on),
data_jobs.py (the data-preparation Job `ops data` creates per run; no cdk8s import),
network.py (what each NetworkPolicy allows, and the per-run peers policy `ops start`/`ops submit`
create; no cdk8s import),
podspec.py (every rendered pod template checked against the Kubernetes PodSpec schema),
charts.py (finds the add-ons and orders them by their dependencies), values.py (stack values and
dist placeholders), sinks.py (dist/<env>/ YAML). stacks/workloads.py is the CDK sink.
images/kubectl-delivery/ is the MPI launcher's kubectl image the Workloads stack builds per environment.
Each third-party component is compared with its upstream release by tests/k8s/test_conformance_*.py.
"""
