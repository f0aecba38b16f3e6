"""Adapters that hand lionfactory's tools to other agent frameworks.

One module per framework, each a plain function behind its own extra:

- `lionfactory.integrations.pydantic_ai`: ``pydantic_ai_toolset`` (``lionfactory[pydantic-ai]``)
- `lionfactory.integrations.openai_agents`: ``openai_agents_tools`` (``lionfactory[openai-agents]``)
- `lionfactory.integrations.langchain`: ``langchain_tools`` (``lionfactory[langchain]``)
- `lionfactory.integrations.lionagi`: ``lionagi_tools`` (``lionfactory[lionagi]``)

Every adapter takes a `Branch` (its tools, looked up at call time, so a tool
registered later is offered too) or a list of `Tool` objects. Through a
branch, each call runs as `Branch.act` runs it: the call and its result are
recorded on that branch, and the coding toolkit's read-before-edit guard
finds its evidence there. This package imports no framework; each module
imports its own when it is imported.
"""
