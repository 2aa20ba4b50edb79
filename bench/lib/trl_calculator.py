"""The calculator task trained with TRL's ``GRPOTrainer`` (its own tool loop), for ``learn_demo``.

Same task, model and knobs as ``examples/calculator/job.yaml`` as far as TRL allows:

- model: the embedded SmolLM2-135M (arft's cached safetensors conversion of the GGUF), fp32,
  LoRA r=16 / alpha=32 / all-linear (arft's defaults), learning rate 5e-4 constant from step 1
  (arft runs its first step at half the rate), grad-norm clip 1.0, no KL (beta=0), group-std
  normalised advantages, one update per batch (micro-batches of 8, accumulated);
- data: the same train.jsonl, each row's messages (two worked examples as assistant tool_calls +
  tool messages, then the question) turned into a TRL conversational ``prompt``; the tool is the
  same ``calculator`` function;
- reward: 1.0 if the reference answer string is in the content of the final assistant message,
  else 0.0 (arft's ``string_check`` ``like`` on ``sample.output_text``);
- 4 prompts x 4 generations per step, temperature 0.7, at most 3 tool rounds (4 assistant turns).

What TRL needs that arft does not:

- SmolLM2's chat template ignores ``tools=``: TRL's Qwen-2.5 template is swapped in (ChatML like
  SmolLM2's; TRL knows how to parse its ``<tool_call>`` blocks and swaps in its own
  prefix-preserving training variant).
- The model does not end its turn after ``</tool_call>`` (it goes on inventing a tool reply), and
  ``GRPOTrainer`` cannot pass ``stop_strings`` to ``generate`` (that needs ``tokenizer=``). A
  logits processor injected into the policy's ``generate`` forces ``<|im_end|>`` right after
  ``</tool_call>`` -- what arft's engine does with its stop string.
- ``max_completion_length`` bounds the whole multi-turn completion in TRL (every turn plus the tool
  results); arft's ``max_new_tokens`` bounds each turn. A good trajectory (call, result, answer)
  is ~75 tokens, so 96 fits one; the default here is 96 (``max_completion``).

A ``TrainerCallback`` stops training when the next step would overrun the wall-clock budget and
saves the LoRA adapter after every step, with the training time at that step, so checkpoints can
be evaluated afterwards with arft's own evaluator (``evaluate_adapter``).
"""

from __future__ import annotations

import asyncio
import json
import math
import resource
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arft.config import JobSpec
from arft.pyfile import load_file

TOOL_CALL_CLOSE = "</tool_call>"


# -- data and reward ---------------------------------------------------------------------------


def to_trl_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dataset messages (OpenAI shape) as TRL/transformers chat messages.

    Tool-call arguments become dicts (templates ``tojson`` them; a JSON string would be encoded
    twice), ``None`` content becomes ``""`` and tool messages carry the tool's name.
    """
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            d["tool_calls"] = [{"type": "function", "function": {
                "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]]
        if m["role"] == "tool":
            d["name"] = names.get(m.get("tool_call_id"), "calculator")
        out.append(d)
    return out


def load_dataset(path: Path) -> Any:
    """A ``datasets.Dataset`` with ``prompt`` (messages) and ``answer`` columns."""
    from datasets import Dataset

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Dataset.from_list([{"prompt": to_trl_messages(r["messages"]), "answer": str(r["answer"])}
                              for r in rows])


def final_assistant_text(completion: list[dict[str, Any]]) -> str:
    for m in reversed(completion):
        if m.get("role") == "assistant":
            return m.get("content") or ""
    return ""


def answer_in_reply(completions: list[list[dict[str, Any]]], answer: list[str], **_: Any) -> list[float]:
    """1.0 if the reference answer is in the final assistant message's content, else 0.0."""
    return [1.0 if ref in final_assistant_text(c) else 0.0 for c, ref in zip(completions, answer)]


def load_tool(job: JobSpec) -> Any:
    """The job's (single) python tool as a plain function."""
    spec = job.rl.tools[0]
    file, attr = spec.function.rsplit(":", 1)
    path = job.path(file)
    assert path is not None
    return getattr(load_file(path, "calculator_tools"), attr)


# -- generation fix: end the turn after </tool_call> -------------------------------------------


def end_turn_after_tool_call(tokenizer: Any) -> Any:
    """A logits processor that forces eos right after a row's text ends with ``</tool_call>``."""
    import torch
    from transformers import LogitsProcessor

    eos = tokenizer.eos_token_id
    # Only rows whose last token contains ">" can have just finished "</tool_call>".
    gt_ids = torch.tensor([i for tok, i in tokenizer.get_vocab().items()
                           if ">" in tokenizer.convert_tokens_to_string([tok])])

    class EndTurn(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            rows = torch.isin(input_ids[:, -1], gt_ids).nonzero().flatten().tolist()
            for r in rows:
                if tokenizer.decode(input_ids[r, -8:]).endswith(TOOL_CALL_CLOSE):
                    scores[r, :] = -math.inf
                    scores[r, eos] = 0.0
            return scores

    return EndTurn()


def patch_generate(model: Any, processor: Any) -> None:
    """Make every ``model.generate`` call (TRL's rollouts) use ``processor``."""
    from transformers import LogitsProcessorList

    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        kwargs["logits_processor"] = LogitsProcessorList([processor])
        return original(*args, **kwargs)

    model.generate = generate


# -- budget + checkpoints ----------------------------------------------------------------------


@dataclass
class TrlRun:
    out_dir: Path
    budget_s: float
    steps: int = 0
    train_s: float = 0.0
    """Training wall time (from on_train_begin to the last step end, adapter saves excluded)."""
    step_end_s: dict[int, float] = field(default_factory=dict)
    """Step -> training seconds when it ended."""
    adapters: dict[int, str] = field(default_factory=dict)
    logs: list[dict[str, float]] = field(default_factory=list)
    setup_s: float = 0.0
    peak_rss_gb: float = 0.0
    error: str | None = None


def budget_callback(run: TrlRun, log: Any) -> Any:
    from transformers import TrainerCallback

    class Budget(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.perf_counter()
            self.excluded = 0.0

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            now = time.perf_counter() - self.t0 - self.excluded
            step = state.global_step
            run.step_end_s[step], run.steps, run.train_s = now, step, now
            t = time.perf_counter()
            path = run.out_dir / f"adapter-{step:04d}"
            model.save_pretrained(path)
            run.adapters[step] = str(path)
            self.excluded += time.perf_counter() - t
            mean_step = now / step
            log(f"  trl step {step}: {now:.0f} s of {run.budget_s:.0f} s budget")
            if now + mean_step > run.budget_s:  # the next step would overrun the budget
                control.should_training_stop = True

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                run.logs.append({"step": state.global_step, **{k: v for k, v in logs.items()
                                                               if isinstance(v, (int, float))}})

    return Budget()


# -- training ----------------------------------------------------------------------------------


def train_trl(job: JobSpec, out_dir: Path, budget_s: float, *, max_completion: int = 96,
              micro_batch: int = 8, log: Any = print) -> TrlRun:
    """Train with TRL until ``budget_s`` seconds of training are spent; adapters under ``out_dir``."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from arft.models.loading import resolve_model_dir

    t_setup = time.perf_counter()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    run = TrlRun(out_dir, budget_s)
    hp, tr, lora = job.rl.hyperparameters, job.training, job.training.lora
    base = resolve_model_dir(job.model)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.chat_template = qwen2_5_chat_template
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    train_path = job.path(job.training_file)
    assert train_path is not None
    batch, group = hp.resolved("batch_size"), tr.group_size
    # One optimizer step per 16 completions either way (gradient accumulation). Measured here
    # (one step, same completions): micro-batches of 8 (arft's) 155 s and 17 GB peak RSS; of 4,
    # 445-489 s and 8.4-9.2 GB.
    micro = min(micro_batch, batch * group)
    config = GRPOConfig(
        output_dir=str(out_dir / "trainer"), seed=job.seed, use_cpu=True, bf16=False, fp16=False,
        per_device_train_batch_size=micro, gradient_accumulation_steps=batch * group // micro,
        num_generations=group, temperature=job.sampling.temperature, top_p=job.sampling.top_p,
        max_completion_length=max_completion,
        max_tool_calling_iterations=max(1, job.rollout.max_turns - 1),
        # arft warms up over its first step at half the rate; TRL's constant_with_warmup would
        # train step 1 at lr 0, so TRL gets the full rate from step 1 (slightly in its favour).
        learning_rate=tr.learning_rate or 1e-4, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=tr.weight_decay, max_grad_norm=tr.max_grad_norm,
        beta=tr.kl_coef, epsilon=tr.clip_eps, num_iterations=tr.updates_per_batch,
        scale_rewards="group" if tr.normalize_std else "none",
        max_steps=10_000, num_train_epochs=100, logging_steps=1, save_strategy="no",
        report_to="none", gradient_checkpointing=False, disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = GRPOTrainer(
        model=model, reward_funcs=[answer_in_reply], args=config,
        train_dataset=load_dataset(train_path), processing_class=tokenizer,
        peft_config=LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                               target_modules=lora.target_modules, task_type="CAUSAL_LM"),
        tools=[load_tool(job)], callbacks=[budget_callback(run, log)])
    patch_generate(trainer.model, end_turn_after_tool_call(tokenizer))
    run.setup_s = time.perf_counter() - t_setup
    log(f"  trl setup {run.setup_s:.0f} s; training for {budget_s:.0f} s")
    trainer.train()
    run.peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    (out_dir / "trl_run.json").write_text(json.dumps(run.__dict__, default=str, indent=2))
    del trainer, model
    return run


# -- evaluation with arft's evaluator ----------------------------------------------------------


def merged_model_dir(job: JobSpec, adapter: str | None, out_dir: Path, template: str) -> Path:
    """A plain HF directory: the base model (with the LoRA ``adapter`` merged when given) and the
    tokenizer with ``template`` ("qwen": TRL's Qwen-2.5 template, the format TRL trained in;
    "arft": SmolLM2's own, which arft renders with its Hermes tool block)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from arft.models.loading import resolve_model_dir

    base = resolve_model_dir(job.model)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(base)
    if template == "qwen":
        tokenizer.chat_template = qwen2_5_chat_template
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def evaluate_dir(job: JobSpec, model_dir: Path, run_dir: Path, eval_seed: int) -> Any:
    """arft's evaluator on the validation set (``eval_samples`` per task), as in ``arft train``."""
    from arft.app.evaluate import evaluate
    from arft.data.splits import load_split

    ejob = job.model_copy(update={"model": str(model_dir),
                                  "sampling": job.sampling.model_copy(update={"seed": eval_seed})})
    tasks = load_split(ejob, "validation", None)
    k = ejob.rl.hyperparameters.resolved("eval_samples")
    return asyncio.run(evaluate(ejob, tasks, k, run_dir)).summary


def evaluate_adapter(job: JobSpec, adapter: str | None, work_dir: Path, eval_seed: int,
                     template: str = "qwen") -> tuple[Any, float]:
    """(EvalSummary, seconds) of the base model + ``adapter`` (None: the base model alone)."""
    t = time.perf_counter()
    model_dir = merged_model_dir(job, adapter, work_dir / "merged", template)
    summary = evaluate_dir(job, model_dir, work_dir / "eval", eval_seed)
    shutil.rmtree(model_dir, ignore_errors=True)  # 540 MB each: keep only the adapter and the eval
    return summary, time.perf_counter() - t
