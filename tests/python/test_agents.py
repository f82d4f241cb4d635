"""The OpenAI Agents SDK (PyPI `openai-agents`) with its default client pointed at tollgate: it
talks to `POST /v1/responses` (its default model API) and runs an agent with one function tool
end to end on real SmolLM2: the model calls the tool, the SDK runs it and sends its output back,
and the model answers. Started by scripts/test like test_openai_sdk.py.
"""
import os

from agents import (Agent, ModelSettings, Runner, function_tool, set_default_openai_client,
                    set_tracing_disabled)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from openai import AsyncOpenAI


def test_an_agent_with_one_function_tool_runs_end_to_end():
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=os.environ["TOLLGATE_BASE_URL"], api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    cities = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return "18C and sunny"

    # `required` for the first turn; the SDK resets it to auto after the call (reset_tool_choice).
    agent = Agent(
        name="Weather", instructions="You are a helpful assistant. Use the tools.", model="smollm2-135m-instruct",
        tools=[get_weather], model_settings=ModelSettings(tool_choice="required", max_tokens=60, temperature=0),
    )
    result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert cities and "Paris" in cities[0]
    kinds = [type(i) for i in result.new_items]
    assert kinds[:3] == [ToolCallItem, ToolCallOutputItem, MessageOutputItem], kinds
    assert isinstance(result.final_output, str) and result.final_output.strip()
