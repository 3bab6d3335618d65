#!/usr/bin/env bash
# GPU check of the vLLM engine path, prepared for the device tool (run from the repo root on a GPU machine).
# Needs vLLM importable there (pip install the project with its `gpu` extra, or a vLLM already installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'cuda', torch.cuda.is_available())"
"$PY" bench/device_check.py
