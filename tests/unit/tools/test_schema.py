"""function_schema: type hints -> JSON Schema, docstrings -> descriptions."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from annotated_types import MaxLen
from pydantic import Field

from arft.tools.base import ToolContext
from arft.tools.schema import function_schema, parse_param_docs, summary, type_schema


def weather(city: str, days: int, units: Literal["c", "f"] = "c", detailed: bool = False,
            ctx: ToolContext | None = None) -> str:
    """Forecast for a city.

    Uses the public weather service; results are cached
    for ten minutes.

    Args:
        city: The city's name,
            as the user wrote it.
        days (int): How many days ahead.
        units (str, optional): Celsius or Fahrenheit.
        detailed: Hourly detail.

    Returns:
        The forecast as text.
    """
    return ""


def test_google_docstring_function() -> None:
    schema = function_schema(weather)
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "weather"
    assert fn["description"] == "Forecast for a city."
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["city", "days"]
    assert "ctx" not in params["properties"]  # filled in by the tool, not the model
    assert params["properties"] == {
        "city": {"type": "string", "description": "The city's name, as the user wrote it."},
        "days": {"type": "integer", "description": "How many days ahead."},
        "units": {"type": "string", "enum": ["c", "f"], "description": "Celsius or Fahrenheit.",
                  "default": "c"},
        "detailed": {"type": "boolean", "description": "Hourly detail.", "default": False},
    }


def test_name_description_and_skip_overrides() -> None:
    fn = function_schema(weather, name="forecast", description="Weather.",
                         skip=("ctx", "detailed"))["function"]
    assert fn["name"] == "forecast" and fn["description"] == "Weather."
    assert list(fn["parameters"]["properties"]) == ["city", "days", "units"]


def test_sphinx_and_numpy_docstrings() -> None:
    def sphinx(path: str, limit: int = 10) -> list[str]:
        """List files.

        :param path: Folder to list,
            relative to the workspace.
        :param int limit: Most entries.
        :returns: names
        """
        return []

    def numpy(x: float, y: float) -> float:
        """Add two numbers.

        Parameters
        ----------
        x : float
            The first one.
        y : float
            The second
            one.

        Returns
        -------
        float
        """
        return x + y

    s = function_schema(sphinx)["function"]
    assert s["description"] == "List files."
    assert s["parameters"]["properties"]["path"]["description"] == \
        "Folder to list, relative to the workspace."
    assert s["parameters"]["properties"]["limit"] == {
        "type": "integer", "description": "Most entries.", "default": 10}
    n = function_schema(numpy)["function"]
    assert n["description"] == "Add two numbers."
    assert n["parameters"]["properties"]["x"] == {"type": "number", "description": "The first one."}
    assert n["parameters"]["properties"]["y"]["description"] == "The second one."


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_type_hints() -> None:
    assert type_schema(str) == {"type": "string"}
    assert type_schema(float) == {"type": "number"}
    assert type_schema(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(list) == {"type": "array"}
    assert type_schema(tuple[str, ...]) == {"type": "array", "items": {"type": "string"}}
    assert type_schema(tuple[str, int]) == {
        "type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2, "maxItems": 2}
    assert type_schema(dict) == {"type": "object"}
    assert type_schema(dict[str, float]) == {"type": "object",
                                             "additionalProperties": {"type": "number"}}
    assert type_schema(dict[str, Any]) == {"type": "object"}
    assert type_schema(Literal[1, 2]) == {"enum": [1, 2], "type": "integer"}
    assert type_schema(Literal["a", 1]) == {"enum": ["a", 1]}
    assert type_schema(Optional[int]) == {"type": ["integer", "null"]}
    assert type_schema(int | None) == {"type": ["integer", "null"]}
    assert type_schema(Literal["a", "b"] | None) == {"enum": ["a", "b", None],
                                                     "type": ["string", "null"]}
    assert type_schema(list[str] | None) == {"type": ["array", "null"], "items": {"type": "string"}}
    assert type_schema(Union[int, str]) == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert type_schema(Color) == {"enum": ["red", "blue"], "type": "string"}
    assert type_schema(Path) == {"type": "string"}
    assert type_schema(Annotated[int, "How many."]) == {"type": "integer",
                                                        "description": "How many."}
    assert type_schema(Any) == {}
    assert type_schema(object) == {}


def test_unannotated_optional_and_variadic_parameters() -> None:
    def f(a, b=None, *rest, c: int | None = None, **extra):  # type: ignore[no-untyped-def]
        return a

    fn = function_schema(f)["function"]
    assert fn["description"] == ""  # no docstring
    assert fn["parameters"] == {"type": "object", "required": ["a"], "properties": {
        "a": {}, "b": {"default": None}, "c": {"type": ["integer", "null"], "default": None}}}


def test_callable_object_and_unjsonable_default() -> None:
    class Counter:
        """Count words in a text."""

        def __call__(self, text: str, sep: object = object()) -> int:
            return len(text.split())

    fn = function_schema(Counter(), name="count")["function"]
    assert fn["description"] == "Count words in a text."
    assert fn["parameters"]["properties"] == {"text": {"type": "string"}, "sep": {}}
    assert fn["parameters"]["required"] == ["text"]


def test_docstring_helpers() -> None:
    assert summary("Args:\n    x: a thing") == ""
    assert summary("One line\ncontinued.\nArgs:\n    x: y") == "One line continued."
    assert parse_param_docs("Do it.\n\nArgs:\n    x: first\n    y (int): second\n"
                            "Raises:\n    ValueError: never") == {"x": "first", "y": "second"}


def test_one_unresolvable_annotation_does_not_lose_the_others() -> None:
    class Local:  # invisible to the function's globals: its string annotation cannot resolve
        pass

    def f(n: int, thing: Local) -> None:
        return None

    props = function_schema(f)["function"]["parameters"]["properties"]
    assert props == {"n": {"type": "integer"}, "thing": {}}


def test_field_bounds_in_annotated_parameters_reach_the_schema() -> None:
    assert type_schema(Annotated[str, Field(max_length=80)]) == {"type": "string", "maxLength": 80}
    assert type_schema(Annotated[int, Field(ge=1, le=5), "How many."]) == {
        "type": "integer", "minimum": 1, "maximum": 5, "description": "How many."}
    assert type_schema(Annotated[str, MaxLen(10)]) == {"type": "string", "maxLength": 10}
    assert type_schema(Annotated[str, Field(pattern="^[a-z]+$")]) == {"type": "string", "pattern": "^[a-z]+$"}

    def lookup(query: Annotated[str, Field(max_length=60)], n: Annotated[int, Field(ge=1)] = 3) -> str:
        """Search.

        Args:
            query: Words to look for.
            n: How many hits.
        """
        return query

    params = function_schema(lookup)["function"]["parameters"]
    assert params["properties"]["query"] == {"type": "string", "maxLength": 60,
                                             "description": "Words to look for."}
    assert params["properties"]["n"]["minimum"] == 1
