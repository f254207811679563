"""The trio client against a scripted peer: the invariants of DESIGN.md, one test each."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import textwrap

import pytest

# A client over a 4 KiB pipe whose rule answers two requests with ~6 KB: the
# reader's write is partial, and a real SIGINT arrives right after it. Every
# frame the peer gets must be whole (a cut-off answer followed by teardown's
# would splice two frames and lose the first answer).
CTRL_C_AFTER_A_PARTIAL_WRITE = textwrap.dedent(
    """
    import fcntl, os, signal, types
    import msgspec, trio
    import permclient
    from permclient import _client
    from permclient.framing import NewlineFramer

    real_write = os.write
    partial = []
    cut = None  # a trio.Event, once main() runs

    def write(fd, data):
        sent = real_write(fd, data)
        if not partial and sent < len(data):
            partial.append(sent)
            cut.set()
            os.kill(os.getpid(), signal.SIGINT)  # Python runs trio's handler right here
        return sent

    _client.os = types.SimpleNamespace(write=write)

    def request(request_id, session_id):
        params = {"sessionId": session_id, "toolCall": {"toolCallId": f"c{request_id}"},
                  "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}
        return NewlineFramer.encode(msgspec.json.encode({"jsonrpc": "2.0", "id": request_id,
            "method": "session/request_permission", "params": params}))

    async def main():
        global cut
        cut = trio.Event()
        to_client_r, to_client_w = os.pipe()
        to_peer_r, to_peer_w = os.pipe()
        fcntl.fcntl(to_peer_w, fcntl.F_SETPIPE_SZ, 4096)
        fd_stream = trio.lowlevel.FdStream
        ours = trio.StapledStream(fd_stream(to_peer_w), fd_stream(to_client_r))
        peer_out, peer_in = fd_stream(to_client_w), fd_stream(to_peer_r)
        received = bytearray()
        interrupted = False
        big = permclient.Selected("allow", meta={"pad": "x" * 3000})

        async def drain():
            await cut.wait()  # the pipe stays full until the reader's write was cut
            while chunk := await peer_in.receive_some(65536):
                received.extend(chunk)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            try:
                async with permclient.open_client(ours, dialect="acp") as client:
                    client.permission_handler("s", permclient.rule(lambda r: big))
                    client.permission_handler("t", permclient.deferred(lambda q: None))
                    await peer_out.send_all(request("pending", "t"))
                    await trio.testing.wait_all_tasks_blocked()
                    await peer_out.send_all(request(0, "s") + request(1, "s"))
                    await trio.sleep_forever()
            except KeyboardInterrupt:
                interrupted = True
            await peer_out.aclose()
        frames = bytes(received).split(b"\\n")
        assert frames.pop() == b"", "the last frame was cut off"
        ids = sorted(str(msgspec.json.decode(frame)["id"]) for frame in frames)
        print(partial != [], interrupted, ids)

    import trio.testing
    trio.run(main)
    """
)


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes")
def test_ctrl_c_right_after_a_partial_write_by_the_reader_never_splices_answers() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CTRL_C_AFTER_A_PARTIAL_WRITE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "True True ['0', '1', 'pending']"

