"""Chat model adapters for real model servers.

`OpenAICompatible` speaks the OpenAI Chat Completions API with tools, which
OpenAI and the common local servers (llama.cpp's ``llama-server`` and
llama-cpp-python's server, vLLM, Ollama, LM Studio) all serve at
``<base_url>/chat/completions``. `AnthropicMessages` speaks Anthropic's
Messages API. Each is a `ChatModel`: give it to ``Branch(chat_model=...)``.

Importing this package imports httpx (the ``models`` extra); importing
`lionfactory` does not.

Errors::

    LionfactoryError
    └── ModelError                       the request failed: HTTP error, no connection, bad reply
        └── ModelTimeoutError (TimeoutError)  no answer within the timeout, on every attempt

`Branch.run` does not catch them: a model that cannot be reached is the
caller's problem, not something the model could act on.
"""

from lionfactory.models._anthropic import AnthropicMessages
from lionfactory.models._http import ModelError, ModelTimeoutError
from lionfactory.models._openai import OpenAICompatible

__all__ = ["AnthropicMessages", "ModelError", "ModelTimeoutError", "OpenAICompatible"]
