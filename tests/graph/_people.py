"""A graph whose state is a Pydantic model with a bound and a transforming validator: what the
tests of edits from each surface (the CLI, the Studio, ``plait serve``) run against."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from plait import END, START, CompiledGraph, Graph


class Person(BaseModel):
    name: str = ""
    age: int = Field(default=0, ge=0)
    greeting: str = ""

    @field_validator("name")
    @classmethod
    def titled(cls, value: str) -> str:
        return value.title()


def _greet(state: Person) -> dict[str, str]:
    return {"greeting": f"hello {state.name}"}


def people(saver: Any = None) -> CompiledGraph:
    """``greet`` once; names are written title-cased, ages are never below 0."""
    g = Graph(Person)
    g.add_node("greet", _greet)
    g.add_edge(START, "greet").add_edge("greet", END)
    return g.compile(checkpointer=saver, name="people")


graph = people()
