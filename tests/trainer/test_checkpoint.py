"""CheckpointManager in one real process group: an asynchronous save holds the weights of the
step it was taken at, even while training goes on; only complete checkpoints are listed."""

from __future__ import annotations

import subprocess
import sys

from trainer.checkpoint import MARKER, list_steps, step_dir
from trainer_procs import REPO, job_env

SCRIPT = r"""
import sys, torch
import torch.distributed.checkpoint as dcp
from trainer import dist as tdist
from trainer.checkpoint import CheckpointConfig, CheckpointManager, ModelAndOptimizer
from trainer.llm import build_model
from trainer.model import MODEL_PRESETS, loss_fn

directory = sys.argv[1]
rt = tdist.init(checkpoint_group=True)
cfg = MODEL_PRESETS["tiny"]
model = build_model(cfg, rt, compile=False, activation_checkpointing=False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
ckpt = CheckpointManager(CheckpointConfig(directory, every=1, keep=2), rt, {"app": ModelAndOptimizer(model, opt)})

def step():
    x = torch.randint(cfg.vocab_size, (2, 32))
    loss_fn(model(x), x).backward()
    ckpt.wait_staging()
    opt.step()
    opt.zero_grad()

step()
at_save = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
ckpt.save(1)
for _ in range(3):
    step()  # the weights change while the save is in flight
ckpt.save(4)
ckpt.close()
fresh = build_model(cfg, rt, compile=False, activation_checkpointing=False)
dcp.load({"app": ModelAndOptimizer(fresh, torch.optim.AdamW(fresh.parameters(), lr=1e-2))},
         checkpoint_id=f"{directory}/step-00000001")
changed = [k for k, v in fresh.state_dict().items() if not torch.equal(v.full_tensor(), at_save[k])]
print("CHANGED", len(changed), "OF", len(at_save))
tdist.shutdown()
"""


def test_an_async_save_holds_the_weights_of_its_step_and_only_complete_saves_count(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO, env=job_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CHANGED 0 OF" in p.stdout, p.stdout
    assert list_steps(tmp_path) == [1, 4]
    assert all((step_dir(tmp_path, s) / MARKER).exists() for s in (1, 4))


def test_a_folder_without_the_marker_is_not_a_checkpoint(tmp_path):
    step_dir(tmp_path, 7).mkdir()
    (step_dir(tmp_path, 7) / ".metadata").write_bytes(b"partial")
    step_dir(tmp_path, 3).mkdir()
    (step_dir(tmp_path, 3) / MARKER).write_text("3\n")
    assert list_steps(tmp_path) == [3]
    assert list_steps(tmp_path, complete=False) == [7]
