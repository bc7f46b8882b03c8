#!/usr/bin/env bash
# The GPU checks of one rented device session, in one command (the device's own python3 and torch;
# nothing is installed from a registry there). Wheels the project needs beyond the device image
# travel in .whl/ and are unpacked to /tmp/site: torchao for --float8 (see bench/gpu_llm.py's
# docstring), and for bench/gpu_vision.py's --decode nvimgcodec the trainer image's nvImageCodec
# wheels (CUDA 12 builds, py3-none manylinux: any CPython). Required: nvidia-nvimgcodec-cu12==0.9.0.20
# (32 MB, sha256 00627d63501ff83a7578683f784f03d07c6b69a1db6017fdabfacb0fc1c4cb8a) and
# nvidia-nvjpeg-cu12==12.3.5.92 (4.3 MB, 253056503901a68dc00e29508ebf40362c3da04b9b9366ee32ef56909e0fc0d3);
# nvidia-nvjpeg2k-cu12==0.11.0.51 and nvidia-nvtiff-cu12==0.8.0.82 (9.3 and 4.3 MB) only silence
# nvImageCodec's "Failed to load" lines for its JPEG 2000 and TIFF extensions: leave them out where
# the working tree and its carry must stay under 64 MiB. Where there is network:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl nvidia-nvimgcodec-cu12==0.9.0.20 nvidia-nvjpeg-cu12==12.3.5.92
# Without them gpu_vision.py reports its nvimgcodec parts as not measured, with the reason.
#   [STEPS="tests llm vision"] bench/gpu_checks.sh OUTDIR
# Writes gpu.txt, tests{,_full}.txt, vision_resize.txt, gpu_llm.{txt,json}, gpu_vision.{txt,json}
# to OUTDIR; each step has its own time limit, so a slow one cannot take the others' time. STEPS
# picks the steps (all three by default): a device session too short for all of them runs one,
# e.g. STEPS=vision (about 4 min).
set -u
out=${1:?usage: bench/gpu_checks.sh OUTDIR}
steps=" ${STEPS:-tests llm vision} "
for step in $steps; do
  case "$step" in tests|llm|vision) ;; *) echo "error: STEPS: '$step' is not one of tests, llm, vision" >&2; exit 2;; esac
done
case "${RESIZE_S:-90}" in ''|*[!0-9]*) echo "error: RESIZE_S: '${RESIZE_S}' is not a whole number of seconds (0: skip)" >&2; exit 2;; esac
wants() { case "$steps" in *" $1 "*) return 0;; esac; return 1; }
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# --decode dali: DALI's wheel (nvidia-dali-cuda120==2.4.0, 424 MB) is over a call's 64 MiB. Here,
# bench/dali_pack.sh checks it against the lock's SHA-256 and packs it with the wheels it needs beyond
# the device's into four parts of 57 MiB (.dali-carry/0 to 3; .gitignore names the folder). Each
# travels in a call of its own on the same warm machine before this script's call: carry
# [".dali-carry/N"], command `mkdir -p .dali-store && cp .dali-carry/N/* .dali-store/` (the store is
# never carried, so it stays there between calls). This script installs .whl's wheels, unpacks the
# joined parts into a folder of their own, checks every unpacked file against its wheel's RECORD and
# only then adds them to /tmp/site (pip --target would skip the top-level nvidia/ that .whl's made);
# parts that do not make the pack leave nothing behind, and DALI is not measured.
wheels=$(compgen -G ".whl/*.whl")
if [ -n "${wheels// /}" ]; then
  # shellcheck disable=SC2086 (a list of paths without spaces)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $wheels \
    && export PYTHONPATH=/tmp/site
fi
if compgen -G ".dali-store/pack-*" >/dev/null; then
  # Unpacked and checked apart, then added to /tmp/site whole: parts that do not make the pack leave
  # nothing behind on the path the later steps import from.
  stage=$(mktemp -d /tmp/dali-stage.XXXXXX)
  if cat .dali-store/pack-* | timeout 300 xz -dc | timeout 300 tar -x -C "$stage" \
      && timeout 300 python3 - "$stage" <<'PY'
import base64, hashlib, pathlib, sys
site = pathlib.Path(sys.argv[1])
rows = [line.rsplit(",", 2) for record in site.glob("*.dist-info/RECORD")
        for line in record.read_text().splitlines()]
owners = {}
for name, _, _ in rows:
    owners[name] = owners.get(name, 0) + 1
bad, checked = [], 0
for name, digest, _ in rows:
    path = site / name
    if not digest or not path.is_file() or owners[name] > 1:
        # RECORD itself; what the pack leaves out (headers, other Pythons' modules); a file that
        # several wheels write (nvidia/__init__.py, which this script rewrites below)
        continue
    algo, want = digest.split("=", 1)
    got = base64.urlsafe_b64encode(hashlib.new(algo, path.read_bytes()).digest()).rstrip(b"=").decode()
    checked += 1
    if got != want:
        bad.append(name)
print(f"DALI's pack: {checked} files match their wheels' RECORD, {len(bad)} differ {bad[:3]}")
sys.exit(1 if bad or not checked else 0)
PY
  then
    mkdir -p /tmp/site && cp -a "$stage"/. /tmp/site/ && export PYTHONPATH=/tmp/site
  else
    echo "DALI's parts do not make its pack: --decode dali is not measured" >&2
  fi
  rm -rf "$stage"
fi
if [ -d /tmp/site ]; then
  # The nvImageCodec wheels bring a regular package `nvidia` (with __init__.py): first on the path,
  # it would hide the device's own nvidia.* packages (the CUDA libraries torch finds). Made to
  # extend its path, it spans both folders.
  if [ -f /tmp/site/nvidia/__init__.py ]; then
    echo "__path__ = __import__('pkgutil').extend_path(__path__, __name__)" >/tmp/site/nvidia/__init__.py
  fi
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1
  python3 -c "from nvidia import nvimgcodec; print('nvimgcodec', nvimgcodec.__version__)" 2>&1 | tail -1
  python3 -c "import nvidia.dali; print('dali', nvidia.dali.__version__)" 2>&1 | tail -1
  date -u; } | tee "$out/gpu.txt"
if wants tests; then
  # -s: the GPU tests print what they measured (the nvjpeg overwrite test its control's count);
  # tests.txt keeps those lines and the outcome, tests_full.txt all of it.
  # TEST_FILES narrows the files where a session has little time left.
  # shellcheck disable=SC2086 (a list of paths without spaces)
  timeout "${TESTS_S:-200}" python3 -m pytest -q -s -rs -p no:cacheprovider ${TEST_FILES:-tests/trainer/test_step_syncs.py \
    tests/trainer/test_llm_model.py tests/trainer/test_vision_decode_gpu.py tests/trainer/test_vision_resize.py \
    tests/trainer/test_vision_dali_gpu.py} \
    >"$out/tests_full.txt" 2>&1
  grep -E "rounds with|waited for the training stream in|hardware JPEG|Huffman|DALI decodes|^(E |FAILED|SKIPPED|ERROR)|[0-9]+ (passed|failed)" "$out/tests_full.txt" \
    | tail -40 | tee "$out/tests.txt"
  # The micro-batch crop-resize, batched against torchvision per image: host and GPU time (seconds).
  [ "${RESIZE_S:-90}" != 0 ] && timeout "${RESIZE_S:-90}" python3 bench/vision_resize.py 2>&1 | tail -20 | tee "$out/vision_resize.txt"
fi
if wants llm; then
  timeout "${LLM_S:-230}" python3 bench/gpu_llm.py --budget-s "$(( ${LLM_S:-230} - 20 ))" --out "$out/gpu_llm.json" \
    2>&1 | tail -40 | tee "$out/gpu_llm.txt"
fi
# The vision step: the GPU's rate, the CPU loader, nvImageCodec's and DALI's decode alone and five
# trainer runs (about 210 s on an H100); its --budget-s leaves the interpreter's start and the summary room
# inside VISION_S, so a run that no longer fits is skipped with the reason instead of killed.
if wants vision && [ -f bench/gpu_vision.py ]; then
  # DECODERS: the trainer runs (gpu_vision.py --decoders; DECODERS=dali,dali:0.9:none trains with
  # DALI's choice per file against every image decoded whole); PROFILE=1: each under py-spy (the
  # wheel in .whl/), its stacks to OUT/profiles/ (bench/profile_summary.py reads them).
  extra=()
  [ -n "${DECODERS:-}" ] && extra+=(--decoders "$DECODERS")
  # DECODE_ROUNDS: the decode-only list measured that many times (gpu_vision.py's default 2; 1 where time is short)
  [ -n "${DECODE_ROUNDS:-}" ] && extra+=(--decode-rounds "$DECODE_ROUNDS")
  # TRAINER_FILES: what the trainer runs read (4:4:4, 4:2:0 or mixed; gpu_vision.py --trainer-files)
  [ -n "${TRAINER_FILES:-}" ] && extra+=(--trainer-files "$TRAINER_FILES")
  [ "${PROFILE:-0}" = 1 ] && export PATH="/tmp/site/bin:$PATH" && extra+=(--profile "$out/profiles")
  timeout "${VISION_S:-240}" python3 bench/gpu_vision.py --budget-s "$(( ${VISION_S:-240} - 30 ))" \
    --out "$out/gpu_vision.json" ${extra[@]+"${extra[@]}"} 2>&1 | tail -40 | tee "$out/gpu_vision.txt"
fi
