"""lionfactory: built-in tools for LLM agents as plain factory functions.

The core is re-exported here; the built-in factories live in
`lionfactory.tools` and `lionfactory.coding`, the offline fakes in
`lionfactory.testing`, the exceptions in `lionfactory.errors`.
"""

from lionfactory._acting import ActionResult
from lionfactory._approvals import PendingCall
from lionfactory._branch import Branch
from lionfactory._call import CallContext, current_call
from lionfactory._checkpoints import Checkpoint, RewindReport
from lionfactory._exchange import Exchange
from lionfactory._messages import (
    ChatModel,
    Message,
    MessageLog,
    ModelReply,
    ToolCall,
    estimate_tokens,
)
from lionfactory._registration import Registration, register_factory
from lionfactory._tool import Tool, ToolHints, function_tool, reports_failure

__version__ = "0.1.0"

__all__ = [
    "ActionResult",
    "Branch",
    "CallContext",
    "ChatModel",
    "Checkpoint",
    "Exchange",
    "Message",
    "MessageLog",
    "ModelReply",
    "PendingCall",
    "Registration",
    "RewindReport",
    "Tool",
    "ToolCall",
    "ToolHints",
    "current_call",
    "estimate_tokens",
    "function_tool",
    "register_factory",
    "reports_failure",
]
