"""A LangGraph ReAct agent (``create_react_agent``) over two LangChain tools, written as it would
be for production: nothing in it knows about arft. arft calls ``run(row, client)`` once per
rollout and only gives it the OpenAI base URL (and key and model name) of the policy it trains;
the agent builds its ``ChatOpenAI`` from those, exactly as it would from any OpenAI-compatible
endpoint."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent

from shop_tools import calculator, price

TOOLS = [tool(price, parse_docstring=True), tool(calculator, parse_docstring=True)]
MAX_STEPS = 8
"""LangGraph's recursion limit: a model call and a tool call are one step each, so 8 allows
three tool rounds and a final answer."""


def build_agent(base_url: str, api_key: str, model: str) -> Any:
    """The agent, given any OpenAI-compatible endpoint."""
    llm = ChatOpenAI(base_url=base_url, api_key=api_key, model=model, max_retries=0)
    return create_react_agent(llm, TOOLS)


async def run(row: dict[str, Any], client: Any) -> str:
    """One rollout: the row's conversation (system prompt, worked examples, the question) in, the
    agent's last reply out (what the job's grader reads)."""
    agent = build_agent(client.base_url, client.api_key, client.model)
    try:
        state = await agent.ainvoke({"messages": row["messages"]}, config={"recursion_limit": MAX_STEPS})
    except GraphRecursionError:  # the model kept calling tools: no answer (a reward of 0, not a crash)
        return ""
    return str(state["messages"][-1].content or "")
