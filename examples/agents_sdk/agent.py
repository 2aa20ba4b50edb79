"""An OpenAI Agents SDK agent (``agents.Agent`` with two ``@function_tool``s, run by ``Runner.run``),
written as it would be for production: nothing in it knows about arft. arft calls
``run(row, client)`` once per rollout and only gives it the OpenAI base URL (and key and model
name) of the policy it trains; the agent builds its ``AsyncOpenAI`` client from those.

The model is the SDK's default model class, ``OpenAIResponsesModel`` (``/v1/responses``), given
its own client: arft's gateway serves the Responses API as well as chat completions. (A process-wide
``set_default_openai_client`` would do too for one agent per process; arft runs many rollouts at
once in one process, each with its own base URL.)
"""

from __future__ import annotations

from typing import Any

from agents import Agent, MaxTurnsExceeded, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import unit_tools

set_tracing_disabled(True)  # the SDK would upload traces to OpenAI; this agent runs offline

MAX_TURNS = 4
"""Model calls per run: two tool rounds and an answer, with room for one more."""


@function_tool
def miles_to_km(miles: float) -> str:
    """Convert a distance in miles to kilometres.

    Args:
        miles: The distance in miles, e.g. 26.2.
    """
    return unit_tools.miles_to_km(miles)


@function_tool
def celsius_to_fahrenheit(celsius: float) -> str:
    """Convert a temperature in degrees Celsius to degrees Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius, e.g. 21.
    """
    return unit_tools.celsius_to_fahrenheit(celsius)


def build_agent(base_url: str, api_key: str, model: str, instructions: str) -> Agent:
    """The agent, given any OpenAI-compatible endpoint."""
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return Agent(name="unit converter", instructions=instructions,
                 model=OpenAIResponsesModel(model=model, openai_client=client),
                 tools=[miles_to_km, celsius_to_fahrenheit])


def input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions messages (the dataset's format) as the SDK's input items (the Responses
    format): a tool call is a ``function_call`` item, its result a ``function_call_output``."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            continue
        if m.get("content"):
            items.append({"role": m["role"], "content": m["content"]})
        for call in m.get("tool_calls") or []:
            items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"]})
    return items


async def run(row: dict[str, Any], client: Any) -> str:
    """One rollout: the row's system prompt as the agent's instructions, its other messages (the
    worked examples and the question) as the run's input; the final output is what the grader reads."""
    messages = row["messages"]
    system = [m["content"] for m in messages if m["role"] == "system"]
    agent = build_agent(client.base_url, client.api_key, client.model, "\n\n".join(system))
    try:
        result = await Runner.run(agent, input_items([m for m in messages if m["role"] != "system"]),
                                  max_turns=MAX_TURNS)
    except MaxTurnsExceeded:  # the model kept calling tools: no answer (a reward of 0, not a crash)
        return ""
    return str(result.final_output or "")
