"""The 2026-07-28 protocol: no handshake, no session, every request says who it is.

A 2026-07-28 request carries its protocol version and the client's
capabilities (and, optionally, its name) in ``params._meta``; there is no
``initialize`` and no ``Mcp-Session-Id``. ``server/discover`` tells a client
which versions and capabilities the server has. Both transports use this
module: the SDK's server over Streamable HTTP and lionfactory's own stdio
loop, which must not import the SDK, so everything here is plain JSON-ready
dicts.

What a session meant for the tools, and what replaces it:

* **Over HTTP** nothing ties one request to the next (they may reach two
  replicas behind a load balancer), so each 2026-07-28 tool call runs on a
  **fresh branch** made for that request alone (`StatelessCalls`) and
  dropped after it: no request ever sees another client's read-before-edit
  evidence, nudges or sandbox. The read-before-edit guard then has no reads
  to look at, so an edit of an existing file is accepted only with an
  ``expected_hash`` equal to the file's current content hash (the
  ``content_hash`` a read returned), which any replica can check against the
  file itself. An ``Mcp-Session-Id`` on such a request is ignored: a
  sessionless call never runs on a session's branch, live or stored. A call
  a hook or rule asks about answers that a person must approve it, and
  holds nothing (no later request could approve it). The branch is closed
  when the call ends, with everything it started (its sandbox, supervisor,
  jobs) and the output it kept: what a session would page through later by
  an ``output_id`` (a bash stream past its cap, a job's output) comes back
  with the call itself, as embedded resources of the result, whole up to
  `SESSIONLESS_OUTPUT_BYTES` (`StatelessCalls`).
* **Over stdio** the process serves exactly one client for as long as the
  pipe is open, so the connection keeps its one branch in every protocol
  version: evidence works as in a session, and ``expected_hash`` is an
  extra check.

Results of the 2026-07-28 era carry ``resultType`` (required) and the
server's identity in ``_meta``; ``tools/list`` and ``server/discover`` are
cacheable and say for how long (``ttlMs``): the listing is fixed for the
life of the process, and holds no user data (``cacheScope: public``).
The ``resources/*`` results are cacheable too, but the files they show
change at any moment and are the user's (``ttlMs: 0``, ``cacheScope:
private``: what the SDK's own server fills in, so both transports agree).
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import attrs

from lionfactory._acting import ActionResult, answer_result
from lionfactory._branch import Branch
from lionfactory._call import Progress, reporting_progress
from lionfactory.errors import ConfigurationError
from lionfactory.mcp._protocol import call_result

__all__ = [
    "LISTING_TTL_MS",
    "MODERN_VERSIONS",
    "PROGRESS_ENVIRONMENT",
    "PROGRESS_INTERVAL",
    "SESSIONLESS_OUTPUT_BYTES",
    "Report",
    "StatelessCall",
    "StatelessCalls",
    "complete",
    "discover_result",
    "envelope_problem",
    "is_modern",
    "listing_result",
    "result_meta",
    "progress_token",
    "resource_result",
    "run_with_progress",
]

MODERN_VERSIONS = ("2026-07-28",)
"""The revisions spoken without a handshake (the SDK's list; a test keeps them equal)."""

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

INVALID_PARAMS = -32602
UNSUPPORTED_PROTOCOL_VERSION = -32022

LISTING_TTL_MS = 5 * 60 * 1000
"""How long a client may reuse ``tools/list`` and ``server/discover`` results.

The served tools never change while the process runs; five minutes bounds
how long a client keeps the listing of a server restarted with other tools.
"""

PROGRESS_ENVIRONMENT = "LIONFACTORY_PROGRESS_INTERVAL"
"""The environment variable that sets `PROGRESS_INTERVAL` for a server process."""


def progress_interval(environ: Mapping[str, str]) -> float:
    """The progress interval `environ` asks for: 0.5 s unless `PROGRESS_ENVIRONMENT` is set.

    A client whose timeout is shorter than a second, or a test that should
    not wait for half-second ticks, sets it (in seconds, 0.01 to 1: at least
    one notification a second keeps a resetting timeout from firing).

    Raises:
        ConfigurationError: the variable is not a number of seconds in that range.
    """
    text = environ.get(PROGRESS_ENVIRONMENT)
    if text is None:
        return 0.5
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.01 <= seconds <= 1:
        raise ConfigurationError(
            f"{PROGRESS_ENVIRONMENT} must be seconds from 0.01 to 1, got {text[:100]!r}"
        )
    return seconds


PROGRESS_INTERVAL = progress_interval(os.environ)
"""Seconds between progress notifications of a running call (at least one a second)."""


def is_modern(params: Mapping[str, Any] | None) -> bool:
    """Whether a request's params carry the 2026-07-28 envelope (its protocol-version key).

    The key's prefix is reserved by the specification, so handshake-era
    requests never carry it (their ``_meta`` may hold a progress token).
    """
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    return isinstance(meta, Mapping) and PROTOCOL_VERSION_KEY in meta


def envelope_problem(params: Mapping[str, Any]) -> tuple[int, str, dict[str, Any] | None] | None:
    """Why a 2026-07-28 request's envelope is refused, as (code, message, data), or None.

    The specification's wording: a missing envelope key is invalid params; a
    version the server does not speak is ``UnsupportedProtocolVersionError``
    (-32022) whose data names the supported versions and the requested one.
    """
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        return INVALID_PARAMS, "params._meta must be an object carrying the envelope keys", None
    missing = [k for k in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if k not in meta]
    if missing:
        return (
            INVALID_PARAMS,
            f"params._meta is missing the required envelope key(s): {', '.join(missing)}",
            None,
        )
    version = meta[PROTOCOL_VERSION_KEY]
    if not isinstance(version, str):
        return INVALID_PARAMS, f"{PROTOCOL_VERSION_KEY} must be a string", None
    if version not in MODERN_VERSIONS:
        data = {"supported": list(MODERN_VERSIONS), "requested": version}
        return (
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version {version[:40]!r}: this server speaks "
            f"{', '.join(MODERN_VERSIONS)} per request, and the earlier versions through the "
            f"initialize handshake",
            data,
        )
    return None


def complete(result: dict[str, Any], server_info: Mapping[str, Any]) -> dict[str, Any]:
    """`result` as a 2026-07-28 result: ``resultType`` and the server's identity in ``_meta``."""
    result["resultType"] = "complete"
    result["_meta"] = result_meta(server_info)
    return result


def discover_result(
    capabilities: Mapping[str, Any], server_info: Mapping[str, Any], instructions: str | None
) -> dict[str, Any]:
    """The ``server/discover`` result."""
    result: dict[str, Any] = {
        "supportedVersions": list(MODERN_VERSIONS),
        "capabilities": dict(capabilities),
        "ttlMs": LISTING_TTL_MS,
        "cacheScope": "public",
    }
    if instructions is not None:
        result["instructions"] = instructions
    return complete(result, server_info)


def listing_result(tools: list[dict[str, Any]], server_info: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tools/list`` result (one page: the served tools are few)."""
    result = {"tools": tools, "ttlMs": LISTING_TTL_MS, "cacheScope": "public"}
    return complete(result, server_info)


def resource_result(result: dict[str, Any], server_info: Mapping[str, Any]) -> dict[str, Any]:
    """A ``resources/list``, ``resources/templates/list`` or ``resources/read`` result, 2026-07-28.

    Immediately stale and private: a file may change the moment after it was
    read, and a workspace's files are the user's data, never to be shared by a
    cache across authorisation contexts.
    """
    return complete({**result, "ttlMs": 0, "cacheScope": "private"}, server_info)


def result_meta(server_info: Mapping[str, Any]) -> dict[str, Any]:
    """The ``_meta`` entries every 2026-07-28 result carries: the server's identity."""
    return {SERVER_INFO_KEY: dict(server_info)}


def progress_token(params: Mapping[str, Any]) -> str | int | None:
    """The progress token a request asked for, or None (a bool is not a token)."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    if isinstance(token, bool) or not isinstance(token, (str, int)):
        return None
    return token


T = TypeVar("T")

Report = Callable[[float, str], Awaitable[None]]
"""Sends one progress notification: (progress so far, message)."""


async def run_with_progress(report: Report | None, work: Callable[[], Awaitable[T]]) -> T:
    """Await `work()`, reporting the elapsed time every `PROGRESS_INTERVAL` seconds meanwhile.

    A client that resets its timeout on progress then never times out a long
    test run. The progress value is the elapsed time in seconds, so it grows
    with every notification, as the specification asks. A failed send (the
    client went away) stops the reports, never the call; what `work` raises
    is raised as it is (not wrapped in an exception group). The message adds
    what the call's tool measured of its own progress through
    `lionfactory._call.current_progress` (``12 lines of output so far`` for
    a bash command or a waited job), where it measured any.
    """
    if report is None:
        return await work()
    start = anyio.current_time()
    # Tools that can measure their progress (bash's lines of output, a
    # waited job's) update this through `current_progress()`.
    progress = Progress()

    async def tick() -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL)
            elapsed = anyio.current_time() - start
            message = f"running for {math.floor(elapsed)} s"
            counted = progress.message()
            if counted is not None:
                message = f"{message}, {counted}"
            try:
                await report(round(elapsed, 3), message)
            except Exception:
                return

    failure: Exception | None = None
    result: T | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        try:
            with reporting_progress(progress):
                result = await work()
        except Exception as exc:
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result  # type: ignore[return-value]


SESSIONLESS_OUTPUT_BYTES = 4 * 1024 * 1024
"""The most kept output one sessionless call returns with its result (all streams together).

The same cap as a ``resources/read`` of a workspace file: one reply of a few
megabytes is what clients and proxies carry without trouble. Past it, the
rest is dropped with the call's branch, and the result says how many bytes
were lost and how to get them (write them to a workspace file, or connect
with a session).
"""

# The response fields that name output a session's branch keeps for later
# (`jobs(action="output", job_id=...)`): a bash stream past its cap, a job's
# interleaved output.
_KEPT_FIELDS = ("output_id", "stderr_output_id", "job_id")

OUTPUT_SCHEME = "lionfactory-output"
"""The URI scheme of kept output embedded in a sessionless result (never readable later)."""


@attrs.frozen
class StatelessCall:
    """A sessionless call's outcome and the output it kept, embedded in its result.

    Attributes:
        action: the call's outcome as the model reads it: the ids of cut
            streams (which no later request could read) are cleared, and a
            notice says where the text went.
        embedded: ``EmbeddedResource`` content blocks, one per kept output.
    """

    action: ActionResult
    embedded: tuple[dict[str, Any], ...] = ()

    def result(self, version: str | None) -> dict[str, Any]:
        """The ``tools/call`` result (a JSON-ready dict): the action's, then the embedded text."""
        result = call_result(self.action, version)
        result["content"] += self.embedded
        return result


def _embed_kept(branch: Branch, action: ActionResult) -> StatelessCall:
    """Move the output `branch` kept for `action` into the result, before the branch closes.

    Blocking (it reads files): run it in a worker thread.
    """
    # Imported when a call ran: the stdio server, which shares this module,
    # never needs the jobs table, and its start waits for every import.
    from lionfactory.tools.jobs import REGISTRY, read_output

    result = action.result
    table = REGISTRY.tables.get(branch.id)
    if result is None or table is None:
        return StatelessCall(action)
    left = SESSIONLESS_OUTPUT_BYTES
    changed = dict(result)
    embedded: list[dict[str, Any]] = []
    notes: list[str] = []
    for field in _KEPT_FIELDS:
        ident = result.get(field)
        kept = table.outputs.get(ident) if isinstance(ident, str) else None
        if kept is None:
            continue
        if left > 0:
            text, end, size = read_output(kept.path, 0, left)
        else:
            text, end, size = "", 0, kept.size()
        left -= end
        uri = f"{OUTPUT_SCHEME}:///{uuid.uuid4().hex}/{field.removesuffix('_id')}"
        embedded.append(
            {"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": text}}
        )
        if field != "job_id":
            # It would name nothing once the branch is closed; a job's id
            # stays, as the name of the job that ran (the notice says it ended).
            changed[field] = None
        label = kept.label[:120]
        note = f"The whole {label!r} ({size:,} bytes) is embedded in this result as {uri}"
        if end < size:
            note = (
                f"The first {end:,} of the {size:,} bytes of {label!r} are embedded in "
                f"this result as {uri}; the other {size - end:,} bytes are lost (a sessionless "
                f"call returns at most {SESSIONLESS_OUTPUT_BYTES:,}): write the output to a file "
                f"in the workspace and read it with the reader, or connect with a session"
            )
        if field == "job_id":
            note += ", and the job ended with the call (a sessionless call keeps no job)"
        notes.append(note + ".")
        for stream in ("stdout", "stderr"):
            value = changed.get(stream)
            if isinstance(value, str):
                # The cut stream's marker names the jobs tool, which no later
                # request of a sessionless client can reach.
                changed[stream] = value.replace(
                    f"The full text is kept: jobs(action='output', job_id='{ident}', offset=0) "
                    f"reads it",
                    f"The full text is embedded in this result as {uri}",
                )
    if not embedded:
        return StatelessCall(action)
    if "notice" in changed:
        changed["notice"] = " ".join(n for n in (changed.get("notice"), *notes) if n)
    content = json.dumps(changed, ensure_ascii=False, default=str)
    message = action.message.model_copy(update={"content": content})
    moved = attrs.evolve(action, result=changed, payload=changed, message=message)
    return StatelessCall(moved, tuple(embedded))


@attrs.define(eq=False)
class StatelessCalls:
    """Runs each sessionless tool call on a branch made for that call alone.

    Args:
        new_branch: makes a fresh branch (the factories called again), the
            same maker a session's branch comes from.
    """

    new_branch: Callable[[], Branch]

    async def act(self, tool: str, arguments: Mapping[str, Any]) -> ActionResult:
        """`call`'s outcome as the model reads it (without the embedded output)."""
        return (await self.call(tool, arguments)).action

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> StatelessCall:
        """Run one call on a fresh branch, then drop the branch with whatever it recorded.

        What the call kept for later reading (a cut stream, a job's output)
        is embedded in the result first (`StatelessCall`): no later request
        can name this branch, so an ``output_id`` would name nothing.

        Why not one shared branch, or a pool: a branch holds more than
        evidence (the toolkit's nudge history, its sandbox slot), and
        whatever one client's call left there would reach the next client's.
        Building the tools for each call costs what one `Branch.register` of
        the served factories costs (the benchmark measures it against a
        session's call).
        """
        branch = self.new_branch()
        try:
            action = await branch.act(tool, arguments)
            call = await anyio.to_thread.run_sync(_embed_kept, branch, action)
        finally:
            # Nothing the call started outlives it: no later request can
            # name this branch, so its jobs, supervisor, sandbox and kept
            # output would be unreachable.
            with anyio.CancelScope(shield=True):
                await branch.aclose()
        if action.pending is not None:
            # The branch that would hold the call is dropped with this
            # request: the model is told a person must approve it, and that
            # nothing was kept (there is no call id to approve later).
            pending = answer_result(
                action.pending, "must_approve_unkept", exception=action.exception
            )
            return StatelessCall(pending)
        return call
