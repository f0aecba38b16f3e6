"""lionfactory: built-in tools for LLM agents as plain factory functions."""

from lionfactory._call import CallContext, current_call
from lionfactory._tool import Tool

__all__ = ["CallContext", "Tool", "current_call"]
