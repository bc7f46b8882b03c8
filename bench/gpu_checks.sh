#!/usr/bin/env bash
# The GPU checks of one rented device session, in one command (the device's own python3 and torch;
# nothing is installed from a registry there). Wheels the project needs beyond the device image
# (torchao for --float8) travel in .whl/ (see bench/gpu_llm.py's docstring for which).
#   bench/gpu_checks.sh OUTDIR
# Writes gpu.txt, tests.txt, gpu_llm.{txt,json}, gpu_vision.{txt,json} to OUTDIR; each step has its
# own time limit, so a slow one cannot take the others' time.
set -u
out=${1:?usage: bench/gpu_checks.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1; date -u; } | tee "$out/gpu.txt"
timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/trainer/test_step_syncs.py \
  tests/trainer/test_llm_model.py 2>&1 | tail -25 | tee "$out/tests.txt"
timeout "${LLM_S:-230}" python3 bench/gpu_llm.py --budget-s "$(( ${LLM_S:-230} - 20 ))" --out "$out/gpu_llm.json" 2>&1 \
  | tail -40 | tee "$out/gpu_llm.txt"
if [ -f bench/gpu_vision.py ]; then
  timeout "${VISION_S:-150}" python3 bench/gpu_vision.py --out "$out/gpu_vision.json" 2>&1 | tail -30 \
    | tee "$out/gpu_vision.txt"
fi
