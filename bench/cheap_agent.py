"""A deliberately cheap agent for benchmarks: raw JSON over blocking stdio, no SDK.

It idles until its client sends the request ``bench/start`` (or ``_bench/start``,
which is what the official ACP SDK's ``ext_method("bench/start", ...)`` puts on the
wire) with params ``{"count": N}`` (``window``/``sessions`` may override the flags).
It then runs one *burst*: it keeps ``window`` ``session/request_permission`` requests
outstanding (ids from 0, ``sessionId`` cycling over ``sessions`` sessions) until
``count`` have been answered, checks that every answer is ``selected`` ``allow`` for
an id it is waiting on, and only then answers ``bench/start`` with
``{"count", "errors", "elapsed", "cpu"}`` (its own wall and CPU seconds for the burst).
Every burst starts at id 0 again; that is safe because the previous burst's requests
have all been answered before ``bench/start`` is.

On EOF it prints one JSON summary line to stderr (totals over every burst) and exits
with status 1 if any answer was wrong, else 0.

Frames are built from a pre-encoded template with ``bytes %`` formatting and answers
are decoded with msgspec into small Structs, so that the agent stays far cheaper per
approval than the client it is driving (the burst figures measure the client).

Usage: ``python bench/cheap_agent.py --framing newline|content-length
--count N --window W --sessions S``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import msgspec

PERMISSION_METHOD = "session/request_permission"
START_METHODS = frozenset({"bench/start", "_bench/start"})
READ_SIZE = 256 * 1024
WORKSPACE = "/home/dev/src/permclient"
"""The workspace every request acts in (its ``cwd``; its location is inside it)."""


def session_name(index: int) -> str:
    """The ``sessionId`` of session number ``index`` (clients register the same names)."""
    return f"sess_{index:04d}_7f3a9c2e"


def tool_call(tool_call_id: str) -> dict[str, Any]:
    """A realistic ``toolCall`` of a permission request: a shell command about to run."""
    return {
        "toolCallId": tool_call_id,
        "title": "Run `pytest -q tests/test_client.py -k cancel`",
        "kind": "execute",
        "status": "pending",
        "rawInput": {
            "command": ["pytest", "-q", "tests/test_client.py", "-k", "cancel"],
            "cwd": WORKSPACE,
            "env": {"PYTHONHASHSEED": "0"},
            "timeout_ms": 120000,
            "description": "Run the cancellation tests after the fix in _client.py",
        },
        "locations": [{"path": f"{WORKSPACE}/tests/test_client.py"}],
    }


ALLOW_DENY = [
    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
]


def permission_params(
    session_id: str, tool_call_id: str, options: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Params of one ``session/request_permission`` (allow/deny unless ``options``)."""
    return {
        "sessionId": session_id,
        "toolCall": tool_call(tool_call_id),
        "options": ALLOW_DENY if options is None else options,
    }


def content_length(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


def newline(body: bytes) -> bytes:
    return body + b"\n"


FRAMERS = {"newline": newline, "content-length": content_length}


def request_template(session_id: str) -> bytes:
    """A whole request body for ``session_id`` with ``%d`` where the id and seq go."""
    message = {
        "jsonrpc": "2.0",
        "id": "@ID@",
        "method": PERMISSION_METHOD,
        "params": permission_params(session_id, "call_@SEQ@"),
    }
    body = msgspec.json.encode(message).replace(b"%", b"%%")
    return body.replace(b'"@ID@"', b"%d", 1).replace(b"@SEQ@", b"%d", 1)


# ------------------------------------------------------------------- reading


class _Outcome(msgspec.Struct):
    outcome: str = ""
    optionId: str | None = None


class _Result(msgspec.Struct):
    outcome: _Outcome = msgspec.field(default_factory=_Outcome)


class _Message(msgspec.Struct):
    id: int | str | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: Any = None


_message_decoder = msgspec.json.Decoder(_Message)
_result_decoder = msgspec.json.Decoder(_Result)


class Reader:
    """Blocking frame reader over a file descriptor, in either framing."""

    def __init__(self, fd: int, framing: str) -> None:
        self.fd = fd
        self.content_length = framing == "content-length"
        self.buf = b""

    def read_frames(self) -> list[bytes] | None:
        """Block until at least one whole frame is in; return them (``None`` on EOF)."""
        while True:
            frames = self._split()
            if frames:
                return frames
            chunk = os.read(self.fd, READ_SIZE)
            if not chunk:
                return None
            self.buf = self.buf + chunk if self.buf else chunk

    def _split(self) -> list[bytes]:
        buf = self.buf
        frames: list[bytes] = []
        pos = 0
        if self.content_length:
            while True:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    break
                length = -1
                for line in buf[pos:end].split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length < 0:
                    raise SystemExit(f"cheap_agent: frame without Content-Length: {buf[:80]!r}")
                start = end + 4
                if len(buf) < start + length:
                    break
                frames.append(buf[start : start + length])
                pos = start + length
        else:
            while True:
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    break
                line = buf[pos:nl].strip()
                if line:
                    frames.append(line)
                pos = nl + 1
        self.buf = buf[pos:]
        return frames


# ------------------------------------------------------------------- the agent


class Agent:
    def __init__(self, framing: str, count: int, window: int, sessions: int) -> None:
        self.frame = FRAMERS[framing]
        self.reader = Reader(0, framing)
        self.count = count
        self.window = window
        self.sessions = sessions
        self.bursts = 0
        self.answered = 0
        self.errors = 0
        self.first_errors: list[str] = []

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(1, view)
            view = view[written:]

    def reply(self, request_id: Any, result: Any = None, error: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is None:
            message["result"] = result
        else:
            message["error"] = error
        self.write(self.frame(msgspec.json.encode(message)))

    def error(self, why: str) -> None:
        self.errors += 1
        if len(self.first_errors) < 5:
            self.first_errors.append(why)

    def run(self) -> int:
        while True:
            frames = self.reader.read_frames()
            if frames is None:
                break
            for frame in frames:
                message = _message_decoder.decode(frame)
                if message.method is None:
                    self.error(f"unexpected response outside a burst: {frame[:120]!r}")
                elif message.id is None:
                    pass  # a notification: nothing to do
                elif message.method in START_METHODS:
                    params = msgspec.json.decode(message.params) if message.params else {}
                    self.reply(message.id, self.burst(**(params or {})))
                else:
                    self.reply(
                        message.id,
                        error={"code": -32601, "message": f"method not found: {message.method}"},
                    )
        summary = {
            "agent": "cheap_agent",
            "bursts": self.bursts,
            "answered": self.answered,
            "errors": self.errors,
            "first_errors": self.first_errors,
        }
        sys.stderr.write(msgspec.json.encode(summary).decode() + "\n")
        sys.stderr.flush()
        return 1 if self.errors else 0

    def burst(
        self, count: int | None = None, window: int | None = None, sessions: int | None = None
    ) -> dict[str, Any]:
        count = self.count if count is None else count
        window = max(1, self.window if window is None else window)
        sessions = max(1, self.sessions if sessions is None else sessions)
        frame = self.frame
        templates = [request_template(session_name(k)) for k in range(sessions)]
        self.bursts += 1
        errors_before = self.errors
        outstanding: set[int] = set()
        next_id = 0
        answered = 0
        cpu0 = time.process_time()
        t0 = time.perf_counter()

        def refill() -> None:
            nonlocal next_id
            if next_id >= count or len(outstanding) >= window:
                return
            out = []
            while next_id < count and len(outstanding) < window:
                out.append(frame(templates[next_id % sessions] % (next_id, next_id)))
                outstanding.add(next_id)
                next_id += 1
            self.write(b"".join(out))

        refill()
        while answered < count:
            frames = self.reader.read_frames()
            if frames is None:
                self.error(f"EOF with {count - answered} answers missing")
                break
            for raw in frames:
                message = _message_decoder.decode(raw)
                if message.method is not None:
                    if message.id is not None:
                        self.reply(
                            message.id,
                            error={"code": -32603, "message": "busy: a burst is running"},
                        )
                    continue
                request_id = message.id
                if type(request_id) is not int or request_id not in outstanding:
                    self.error(f"answer for an id that is not outstanding: {raw[:120]!r}")
                    continue
                outstanding.discard(request_id)
                answered += 1
                if message.error is not None or not message.result:
                    self.error(f"error answer: {raw[:120]!r}")
                    continue
                outcome = _result_decoder.decode(message.result).outcome
                if outcome.outcome != "selected" or outcome.optionId != "allow":
                    self.error(f"wrong answer: {raw[:120]!r}")
            refill()
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        self.answered += answered
        return {
            "count": answered,
            "errors": self.errors - errors_before,
            "elapsed": elapsed,
            "cpu": cpu,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framing", choices=sorted(FRAMERS), default="newline")
    parser.add_argument("--count", type=int, default=20000, help="approvals per burst")
    parser.add_argument("--window", type=int, default=64, help="requests kept outstanding")
    parser.add_argument("--sessions", type=int, default=8, help="sessions to cycle over")
    parser.add_argument("--cpu", type=int, default=None, help="run on this CPU only")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    agent = Agent(args.framing, args.count, args.window, args.sessions)
    try:
        return agent.run()
    except (BrokenPipeError, KeyboardInterrupt):
        return 1


if __name__ == "__main__":
    sys.exit(main())
