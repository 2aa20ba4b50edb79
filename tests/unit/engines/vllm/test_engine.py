"""The vLLM engine's parts that need no server: the whole-turn grammar it sends, where a turn is
cut after its last call, and the errors before a server starts (the engine against a real
vLLM server: tests/e2e/test_vllm_engine.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from arft.engines.base import EngineError
from arft.engines.grammar import AFTER_CALL_TOKENS, ToolCallMasker, turn_tag
from arft.engines.vllm.engine import VLLMEngine
from arft.engines.vllm.server import ServerOptions, VLLMServer, vllm_python
from arft.chat.formats import ChatFormat
from arft.chat.constraints import ConstraintError
from arft.serving import serve

EOS = "<|im_end|>"
CALC = {"type": "function", "function": {"name": "calc", "description": "d", "parameters": {
    "type": "object", "properties": {"e": {"type": "string", "maxLength": 10}}, "required": ["e"]}}}


def call(e: str) -> str:
    return '<tool_call>\n{"name": "calc", "arguments": {"e": "' + e + '"}}\n</tool_call>'


def fits(tokenizer: Any, tag: dict[str, Any], text: str) -> bool:
    masker = ToolCallMasker(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    try:
        masker.limited_positions(masker.compile_tag(tag), tokenizer.encode(text, add_special_tokens=False))
    except ConstraintError:
        return False
    return True


def test_the_turn_grammar_is_text_then_calls_then_a_little_text_then_the_end(tokenizer: Any) -> None:
    grammar = ChatFormat(tokenizer).tool_grammar([CALC], True)
    both, one = turn_tag(grammar), turn_tag(grammar, parallel=False)
    assert fits(tokenizer, both, "Sure." + call("1+1") + "\n" + call("2") + EOS)
    assert fits(tokenizer, both, "Just an answer." + EOS)
    assert fits(tokenizer, both, call("1") + " and then" + EOS)  # a short tail after the call
    assert not fits(tokenizer, both, call("1") + " " + "word " * (AFTER_CALL_TOKENS + 4) + EOS)
    assert not fits(tokenizer, one, call("1") + "\n" + call("2") + EOS)  # no second call
    assert not fits(tokenizer, both, '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>' + EOS)
    forced = turn_tag(grammar.with_prefill('<tool_call>\n{"name": "'))
    assert fits(tokenizer, forced, 'calc", "arguments": {"e": "x"}}\n</tool_call>' + EOS)


def test_a_turn_ends_at_its_last_calls_close(tokenizer: Any) -> None:
    engine = VLLMEngine("http://127.0.0.1:9", tokenizer)
    grammar = ChatFormat(tokenizer).tool_grammar([CALC], True)
    kept = tokenizer.encode("Ok." + call("1") + "\n" + call("2"), add_special_tokens=False)
    tail = tokenizer.encode(" Result:" + EOS, add_special_tokens=False)
    ids, lps, reason = engine._end_at_last_call(grammar, kept + tail, [-0.5] * len(kept + tail), "eos")
    assert (ids, reason) == (kept, "stop") and len(lps) == len(kept)
    text = tokenizer.encode("No call here." + EOS, add_special_tokens=False)
    assert engine._end_at_last_call(grammar, text, [0.0] * len(text), "eos")[2] == "eos"
    cut = tokenizer.encode(call("1") + '\n<tool_call>\n{"name": "ca', add_special_tokens=False)
    assert engine._end_at_last_call(grammar, cut, [0.0] * len(cut), "length") == (cut, [0.0] * len(cut), "length")


def test_no_vllm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        vllm_python(str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineError, match=r"(?s)exited with code \d+ while starting; its log .* No module named"):
        VLLMServer.start(ServerOptions(model_dir=str(tmp_path)), sys.executable, tmp_path / "vllm.log", timeout_s=60)


def test_the_server_command_is_sized_from_the_options() -> None:
    cmd = ServerOptions(model_dir="/m", max_model_len=2048, max_lora_rank=16, kv_cache_gb=3).command("py", 8123)
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert {"--enable-prefix-caching", "--enable-lora"} <= set(cmd)
    assert cmd[cmd.index("--max-model-len") + 1] == "2048" and cmd[cmd.index("--max-lora-rank") + 1] == "16"
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert ServerOptions(model_dir="/m", kv_cache_gb=3).env()["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert json.dumps(cmd)  # plain strings only


class SaveOnly:
    """A stand-in policy: ``save_pretrained`` writes a marker file, as peft writes an adapter."""

    def save_pretrained(self, path: Path) -> None:
        path.mkdir(parents=True)
        (path / "adapter_config.json").write_text("{}")

    def state_dict(self) -> dict[str, Any]:
        return {}  # the weights a sync stamps (arft.models.weights_hash): none here


@pytest.mark.parametrize("keep", [1, 2])
async def test_lora_sync_keeps_the_adapters_requests_under_way_may_name(tokenizer: Any, tmp_path: Path,
                                                                       keep: int) -> None:
    """With async rollouts (``keep`` = max_off_policy_steps + 1) the adapter of the previous step
    stays loaded while requests sampled from it may still run; the prefix cache is reset with
    the running requests preempted, and a failed reset is an error, not a silent stale cache."""
    calls: list[tuple[str, Any]] = []
    app = FastAPI()
    reset_ok = {"value": True}

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request) -> str:
        calls.append(("load", (await request.json())["lora_name"]))
        return "Success"

    @app.post("/v1/unload_lora_adapter")
    async def unload(request: Request) -> str:
        calls.append(("unload", (await request.json())["lora_name"]))
        return "Success"

    @app.post("/reset_prefix_cache")
    async def reset(reset_running_requests: bool = False) -> dict[str, bool]:
        calls.append(("reset", reset_running_requests))
        return {"success": reset_ok["value"]}

    with serve(app) as url:
        engine = VLLMEngine(url, tokenizer, sync="lora", weights_dir=tmp_path, keep_adapters=keep)
        for step in (0, 1, 2):
            assert await engine.sync(SaveOnly(), step) >= 0
            assert engine.model == f"step-{step}" and (tmp_path / f"step-{step}").is_dir()
        unloaded = [name for kind, name in calls if kind == "unload"]
        assert unloaded == (["step-0", "step-1"] if keep == 1 else ["step-0"])
        assert [v for kind, v in calls if kind == "reset"] == [True] * 3
        reset_ok["value"] = False
        with pytest.raises(EngineError, match="could not reset its prefix cache"):
            await engine.sync(SaveOnly(), 3)
        await engine.aclose()
