"""Peak memory of one large permission request, from the framer to the decoded request.

For each dialect (bridge: Content-Length framing; acp: newline framing) this builds
one ``session/request_permission`` frame whose ``rawInput`` carries a long ASCII
command, so that the frame is ``--size-mib`` MiB. It then does what the client's
reader does: it feeds the wire bytes to a fresh framer in ``--chunk-kib`` KiB reads
(each read a new ``bytes``, as ``os.read`` makes one), pulls the frame out with
``next_frame``, classifies it with ``parse_message`` and decodes its params with
``permission_request_decoder``. tracemalloc follows every allocation from the first
read to the decoded request (the wire bytes themselves stand for the peer's memory and
are made before tracing starts).

It then does the same through the client's sans-I/O connection (the framing, the
classification, the pending-bytes estimate, the decoding and the routing the trio
client runs on each read) to a deferred handler that keeps the question pending.

It prints, per dialect and path, the frame size, the peak of traced memory and their
ratio.
The decoded request keeps ``rawInput`` undecoded (a view of the frame), as the client
does; the floor is 2x, the framer's pieces of the frame and the frame taken out of
them, alive together while it is copied out.

Usage::

    python bench/frame_memory.py                 # 60 MiB frames, 256 KiB reads
    python bench/frame_memory.py --size-mib 8 --chunk-kib 64
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cheap_agent import permission_params

import permclient
from permclient._connection import Connection
from permclient._messages import Request, parse_message
from permclient._wire import permission_request_decoder
from permclient.framing import ContentLengthFramer, Framer, NewlineFramer

MiB = 1024 * 1024
FRAMERS: dict[str, type[ContentLengthFramer] | type[NewlineFramer]] = {
    "bridge": ContentLengthFramer,
    "acp": NewlineFramer,
}


def request_body(size: int) -> bytes:
    """A ``session/request_permission`` request of exactly ``size`` bytes."""
    params = permission_params("session-1", "call_1")
    params["toolCall"]["rawInput"] = {"command": ""}
    message = {"jsonrpc": "2.0", "id": 7, "method": "session/request_permission"}
    message["params"] = params
    empty = msgspec.json.encode(message)
    if size < len(empty):
        raise SystemExit(f"--size-mib is too small for a request ({len(empty)} bytes)")
    command = "x" * (size - len(empty))
    params["toolCall"]["rawInput"] = {"command": command}
    body = msgspec.json.encode(message)
    assert len(body) == size
    return body


def measure(dialect: str, body: bytes, chunk_size: int) -> tuple[int, float]:
    """Feed ``body`` framed for ``dialect`` in chunks; return (peak traced bytes, seconds)."""
    framer: Framer = FRAMERS[dialect]()
    wire = framer.encode(body)
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    decoded = 0
    for start in range(0, len(wire), chunk_size):
        framer.receive_data(wire[start : start + chunk_size])
        while (frame := framer.next_frame()) is not None:
            message = parse_message(frame)
            assert isinstance(message, Request), message
            request = permission_request_decoder.decode(message.params)
            decoded += len(request.tool_call.raw_input_json)
            del frame, message, request
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert decoded > len(body) - 1024, "the request was not decoded"
    return peak, elapsed


def measure_connection(dialect: str, body: bytes, chunk_size: int) -> tuple[int, float]:
    """The same through the client's sans-I/O connection (framing, classifying, the
    pending-bytes estimate, decoding, routing) to a deferred handler that holds the
    question; return (peak traced bytes, seconds)."""
    framer: Framer = FRAMERS[dialect]()
    wire = framer.encode(body)
    held: list[permclient.Question] = []
    connection = Connection(dialect, max_pending_bytes=4 * len(wire))  # type: ignore[arg-type]
    connection.add_permission_handler("session-1", permclient.deferred(held.append), None)
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    for start in range(0, len(wire), chunk_size):
        connection.receive_data(wire[start : start + chunk_size])
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert len(held) == 1 and len(held[0].request.tool_call.raw_input_json) > len(body) - 1024
    return peak, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=60.0, help="frame size in MiB")
    parser.add_argument("--chunk-kib", type=int, default=256, help="read size in KiB")
    args = parser.parse_args()
    body = request_body(int(args.size_mib * MiB))
    chunk_size = args.chunk_kib * 1024
    print(f"frame {len(body) / MiB:.1f} MiB, reads of {args.chunk_kib} KiB")
    print(
        f"{'dialect':8} {'path':28} {'frame MiB':>10} {'peak MiB':>10} {'peak/frame':>11} "
        f"{'seconds':>8}"
    )
    for dialect in FRAMERS:
        for path, run in (
            ("framer + decoder", measure),
            ("connection, question held", measure_connection),
        ):
            peak, elapsed = run(dialect, body, chunk_size)
            print(
                f"{dialect:8} {path:28} {len(body) / MiB:10.1f} {peak / MiB:10.1f} "
                f"{peak / len(body):10.2f}x {elapsed:8.2f}"
            )


if __name__ == "__main__":
    main()
