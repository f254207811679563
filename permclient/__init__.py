"""permclient: the editor side of an agent runtime's permission requests.

A JSON-RPC 2.0 client on trio, in two dialects: the VS Code-style bridge
(Content-Length framing) and the Agent Client Protocol (newline-delimited).
Permission requests go to the handlers registered for exactly their session;
every path that is not an explicit choice of an offered option answers
``cancelled``.

This package is the whole public surface in one layer: the client, handlers and
decisions, registrations, the wire types (with their literal types), telemetry and
errors. The framers are in :mod:`permclient.framing`, the facades for other event
loops and threads in :mod:`permclient.embed`, the ACP helpers in
:mod:`permclient.acp`.
"""

from __future__ import annotations

from ._answer import Answer
from ._client import Client, ClientStatistics, Registration, RequestHandler, open_client
from ._connection import ConnectionStatistics, DialectName, NotificationCallback
from ._errors import (
    ConnectionClosed,
    LocalProtocolError,
    PermclientError,
    ProtocolError,
    RemoteProtocolError,
    RequestError,
)
from ._handlers import (
    AsyncHandler,
    Deferred,
    DeferredFunction,
    PermissionHandler,
    Question,
    Rule,
    RuleFunction,
    WithdrawnBy,
    deferred,
    rule,
)
from ._messages import ErrorCode, RequestId
from ._notifications import InboundNotification
from ._process import open_process
from ._telemetry import JsonlTelemetry, MemoryTelemetry, RunsInBackground, Telemetry
from ._tracker import ToolCallState, ToolCallTracker
from ._wire import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AudioContent,
    AvailableCommand,
    AvailableCommandsUpdate,
    Cancelled,
    Content,
    ContentBlock,
    CurrentModeUpdate,
    Decision,
    Diff,
    EmbeddedResource,
    ImageContent,
    PermissionOption,
    PermissionOptionKind,
    PermissionRequest,
    PermissionResponse,
    Plan,
    PlanEntry,
    PlanEntryPriority,
    PlanEntryStatus,
    ResourceLink,
    Selected,
    SessionUpdate,
    Terminal,
    TextContent,
    ToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
    ToolKind,
    UnknownUpdate,
    UserMessageChunk,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "Answer",
    "AsyncHandler",
    "AudioContent",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "Cancelled",
    "Client",
    "ClientStatistics",
    "ConnectionClosed",
    "ConnectionStatistics",
    "Content",
    "ContentBlock",
    "CurrentModeUpdate",
    "Decision",
    "Deferred",
    "DeferredFunction",
    "DialectName",
    "Diff",
    "EmbeddedResource",
    "ErrorCode",
    "ImageContent",
    "InboundNotification",
    "JsonlTelemetry",
    "LocalProtocolError",
    "MemoryTelemetry",
    "NotificationCallback",
    "PermclientError",
    "PermissionHandler",
    "PermissionOption",
    "PermissionOptionKind",
    "PermissionRequest",
    "PermissionResponse",
    "Plan",
    "PlanEntry",
    "PlanEntryPriority",
    "PlanEntryStatus",
    "ProtocolError",
    "Question",
    "Registration",
    "RemoteProtocolError",
    "RequestError",
    "RequestHandler",
    "RequestId",
    "ResourceLink",
    "Rule",
    "RuleFunction",
    "RunsInBackground",
    "Selected",
    "SessionUpdate",
    "Telemetry",
    "Terminal",
    "TextContent",
    "ToolCallContent",
    "ToolCallLocation",
    "ToolCallProgress",
    "ToolCallStarted",
    "ToolCallState",
    "ToolCallStatus",
    "ToolCallTracker",
    "ToolCallUpdate",
    "ToolKind",
    "UnknownUpdate",
    "UserMessageChunk",
    "WithdrawnBy",
    "__version__",
    "deferred",
    "open_client",
    "open_process",
    "rule",
]
