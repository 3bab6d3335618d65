#!/usr/bin/env bash
# GPU check of the engine paths, prepared for the device tool (run from the repo root on a GPU machine).
# vLLM is used where it imports (pip install the project's `gpu` extra); otherwise the HF engine on CUDA.
# Packages the GPU image lacks can travel as wheels in .whl/ (see the README, "GPU check").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
"$PY" bench/device_check.py "$@"
