"""Embedding permclient in a host that owns the event loop, or has none.

An editor plugin rarely owns the event loop. This package runs a permclient
:class:`~permclient.Client` where the host needs it; one module per host loop:

==========================  ==============================================================
host loop                   module (everything is importable from ``permclient.embed``)
==========================  ==============================================================
asyncio                     :mod:`~permclient.embed.asyncio_loop`: :func:`asyncio_client`
tkinter                     :mod:`~permclient.embed.tk_loop`: :func:`tk_client`
any other loop (Qt, ...)    :mod:`~permclient.embed.guest`: :func:`start_guest` (trio
                            guest mode; Qt is a recipe in docs/embedding.md)
none (threads)              :mod:`~permclient.embed.blocking`: :func:`open_blocking`
==========================  ==============================================================

What they share: :class:`PermissionHandle` and the way a question reaches the host
(``_handle``), and the trio run that holds the client (``_base``).

In all of them, a permission handler is a plain function ``fn(handle)`` run on the
thread the host chooses (its ``dispatch`` callable). It shows a card and returns
``None``; the UI later completes the :class:`PermissionHandle`
(``handle.answer(Selected(id))`` or ``handle.cancel()``) from any thread, exactly
once. A handler that knows the answer at once may return it instead (a ``Selected``
or ``Cancelled``); any other return value, for a question it did not answer,
answers ``cancelled``. An ``async def`` handler is refused at registration
(``TypeError``), except by :class:`AsyncioClient`, which runs it as an asyncio
task. When the runtime withdraws the question (its cancel, a turn cancel, teardown)
the handle's ``on_cancelled`` callbacks run through ``dispatch`` so the UI can
remove the card. Closing the host or the plugin answers every open question
``cancelled`` and stops the runtime.

Nothing here imports asyncio or tkinter until their adapter is called.
"""

from __future__ import annotations

from ._base import Target
from ._handle import Dispatch, HandleFunction, PermissionHandle
from .asyncio_loop import AsyncioClient, asyncio_client
from .blocking import BlockingClient, open_blocking
from .guest import DoneCallback, GuestClient, start_guest
from .tk_loop import tk_client

__all__ = [
    "AsyncioClient",
    "BlockingClient",
    "Dispatch",
    "DoneCallback",
    "GuestClient",
    "HandleFunction",
    "PermissionHandle",
    "Target",
    "asyncio_client",
    "open_blocking",
    "start_guest",
    "tk_client",
]
