"""The PET_* variables torchrun reads its topology from, for a TrainJob's pods and for `make local`.

torchrun takes every `--x-y` option from `PET_X_Y` when the flag is absent (torch 2.13
torch/distributed/argparse_util.py env), so a container command without topology flags runs
wherever these variables are set. Kubeflow Trainer v2.3.0's torch plugin sets five of them on a
TrainJob's `node` container (pkg/runtime/framework/plugins/torch/torch.go; the names are
pkg/constants TorchRunReservedEnvNames, and a TrainJob that sets one itself is refused); our
TrainingRuntime adds the rendezvous five (k8s/pods/trainjob.py). `ops local` sets all ten, so the
laptop and the cluster differ in values only.
"""

from __future__ import annotations

# What Trainer's torch plugin injects: PET_NNODES (trainer.numNodes), PET_NPROC_PER_NODE
# (trainer.numProcPerNode), PET_NODE_RANK (the Job's completion index), PET_MASTER_ADDR
# (<trainjob>-node-0-0.<trainjob>) and PET_MASTER_PORT (29500).
TRAINER_INJECTED = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
TRAINER_MASTER_PORT = 29500
# What our runtime sets: a dynamic rendezvous (etcd-v2 or c10d) keeps torchrun's in-pod worker
# restarts, which the static rendezvous the plugin's variables describe would not have. torchrun
# ignores PET_MASTER_* and PET_NODE_RANK once a non-static backend and its endpoint are set.
RENDEZVOUS = ("PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_ID", "PET_MAX_RESTARTS", "PET_RDZV_CONF")
# How long a round of torch's dynamic rendezvous (etcd-v2 and c10d) waits for its minimum of pods
# (join_timeout; torch 2.13's default is 600 s, dynamic_rendezvous.py RendezvousTimeout). A pod that
# a scale-up from zero places waits for its instance to launch and join and for the trainer image
# (tens of GB) to be pulled before its agent joins, and a round waits for the replacement of a lost
# pod the same way. A round that times out costs its pods a restart (the rendezvous stays open for
# it, trainer/launch.py): one of backoffLimit under v1, a restart of every pod under v2.
RENDEZVOUS_JOIN_TIMEOUT_S = 1800
RENDEZVOUS_CONF = {"join_timeout": str(RENDEZVOUS_JOIN_TIMEOUT_S)}


def rendezvous_env(*, backend: str, endpoint: str, run_id: str, max_restarts: int) -> dict[str, str]:
    conf = ",".join(f"{key}={value}" for key, value in RENDEZVOUS_CONF.items())  # torchrun's --rdzv-conf form
    return dict(zip(RENDEZVOUS, (backend, endpoint, run_id, str(max_restarts), conf)))


def local_env(*, nproc_per_node: int, master_port: int, backend: str, endpoint: str, run_id: str,
              max_restarts: int) -> dict[str, str]:
    """Every PET_* variable a TrainJob's pod gets, with one machine's values."""
    return {
        "PET_NNODES": "1", "PET_NPROC_PER_NODE": str(nproc_per_node), "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(master_port),
        **rendezvous_env(backend=backend, endpoint=endpoint, run_id=run_id, max_restarts=max_restarts),
    }

# What every training pod's torchrun agent gets. torch 2.13's dynamic rendezvous (etcd-v2 and c10d)
# has rank 0's agent host one store for the job's whole life and hands it to the workers of every
# round without a per-round prefix: the workers of a round after a failure read the failed round's
# addresses there, and gloo's connect is refused ("Gloo connectFullMesh failed") round after round
# until the restarts run out (tests/trainer/test_preemption.py). Unshared, rank 0's worker of each
# round hosts a store of its own. trainer/dist.py keys the shared store by restart round instead
# where one agent starts every worker (`make local`), which the count is the same for.
AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
