"""LangChain (`ChatOpenAI`) and instructor against a running tollgate (real SmolLM2), in the
modes those libraries use by default: `bind_tools`, `with_structured_output`, and instructor's
forced tool call (`Mode.TOOLS`, and `Mode.RESPONSES_TOOLS` on the Responses API).

Started by scripts/test like test_openai_sdk.py.
"""
import os

import instructor
import openai
import pydantic
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
API_KEY = os.environ["TOLLGATE_API_KEY"]
MODEL = "smollm2-135m-instruct"


class City(pydantic.BaseModel):
    """A city and its country."""

    city: str = pydantic.Field(max_length=30)
    country: str = pydantic.Field(max_length=30)


@tool
def get_weather(location: str) -> str:
    """The current weather in a city."""
    return "18 C"


def llm():
    return ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY, temperature=0, max_tokens=60,
                      max_retries=0)


def test_langchain_bind_tools_makes_a_call():
    msg = llm().bind_tools([get_weather], tool_choice="get_weather").invoke("What is the weather in Paris?")
    assert msg.tool_calls, msg
    call = msg.tool_calls[0]
    assert call["name"] == "get_weather"
    assert isinstance(call["args"]["location"], str)


def test_langchain_with_structured_output():
    for method in ("function_calling", "json_schema"):
        out = llm().with_structured_output(City, method=method).invoke("Paris is the capital of France.")
        assert isinstance(out, City), (method, out)
        assert out.city


def test_instructor_default_mode():
    client = instructor.from_openai(openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0))
    out = client.chat.completions.create(
        model=MODEL, response_model=City, max_tokens=60, temperature=0, max_retries=0,
        messages=[{"role": "user", "content": "Paris is the capital of France."}],
    )
    assert isinstance(out, City)
    assert out.city


def test_instructor_responses_tools_mode():
    # The Responses API with a forced function tool and a JSON `text.format` together, as
    # instructor's RESPONSES_TOOLS mode sends them.
    client = instructor.from_openai(openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0),
                                    mode=instructor.Mode.RESPONSES_TOOLS)
    out = client.responses.create(
        model=MODEL, response_model=City, max_output_tokens=60, temperature=0, max_retries=0,
        input=[{"role": "user", "content": "Paris is the capital of France."}],
    )
    assert isinstance(out, City)
    assert out.city
