"""permclient: the editor side of an agent runtime's permission requests.

A JSON-RPC 2.0 client on trio, in two dialects: the VS Code-style bridge
(Content-Length framing) and the Agent Client Protocol (newline-delimited).
Permission requests go to the handler registered for exactly their session;
every path that is not an explicit choice of an offered option answers
``cancelled``.
"""

from __future__ import annotations

from ._answer import Answer
from ._client import Client, Registration, RequestHandler, open_client
from ._connection import DialectName, NotificationCallback
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
from ._messages import ErrorCode
from ._notifications import InboundNotification
from ._process import open_process
from ._telemetry import JsonlTelemetry, Telemetry
from ._tracker import ToolCallState, ToolCallTracker
from ._wire import (
    AudioContent,
    Cancelled,
    Content,
    ContentBlock,
    Decision,
    Diff,
    EmbeddedResource,
    ImageContent,
    PermissionOption,
    PermissionRequest,
    PermissionResponse,
    ResourceLink,
    Selected,
    Terminal,
    TextContent,
    ToolCallContent,
    ToolCallLocation,
    ToolCallUpdate,
)
from .embed import (
    AsyncioClient,
    BlockingClient,
    GuestClient,
    PermissionHandle,
    asyncio_client,
    open_blocking,
    start_guest,
    tk_client,
)
from .framing import ContentLengthFramer, NewlineFramer

__version__ = "0.1.0.dev0"

__all__ = [
    "Answer",
    "AsyncHandler",
    "AsyncioClient",
    "AudioContent",
    "BlockingClient",
    "Cancelled",
    "Client",
    "ConnectionClosed",
    "Content",
    "ContentBlock",
    "ContentLengthFramer",
    "Decision",
    "Deferred",
    "DeferredFunction",
    "DialectName",
    "Diff",
    "EmbeddedResource",
    "ErrorCode",
    "GuestClient",
    "ImageContent",
    "InboundNotification",
    "JsonlTelemetry",
    "LocalProtocolError",
    "NewlineFramer",
    "NotificationCallback",
    "PermclientError",
    "PermissionHandle",
    "PermissionHandler",
    "PermissionOption",
    "PermissionRequest",
    "PermissionResponse",
    "ProtocolError",
    "Question",
    "Registration",
    "RemoteProtocolError",
    "RequestError",
    "RequestHandler",
    "ResourceLink",
    "Rule",
    "RuleFunction",
    "Selected",
    "Telemetry",
    "Terminal",
    "TextContent",
    "ToolCallContent",
    "ToolCallLocation",
    "ToolCallState",
    "ToolCallTracker",
    "ToolCallUpdate",
    "WithdrawnBy",
    "__version__",
    "asyncio_client",
    "deferred",
    "open_blocking",
    "open_client",
    "open_process",
    "rule",
    "start_guest",
    "tk_client",
]
