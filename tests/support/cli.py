"""``simhost`` command lines run as processes, each forked from one Python that has
already imported simhost (what ``python -m simhost`` spends most of its start on).

Each command is still a process of its own, started the way ``python -m simhost``
starts (``simhost._entry.main``), with its own working folder, environment, a closed
stdin and its output captured: its exit code, stdout and stderr are the command's, and
what it starts is its own children. Only the interpreter's start is shared."""

from __future__ import annotations

import json
import selectors
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The forking Python: reads one JSON request a line, forks a child that runs the
# command, and answers with the child's exit code once it is gone.
_DRIVER = r"""
import json, os, signal, sys
import simhost._entry, simhost.cli

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            stdin = os.open(os.devnull, os.O_RDONLY)
            out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd, target in ((stdin, 0), (out, 1), (err, 2)):
                os.dup2(fd, target)
                os.close(fd)
            sys.argv = ["simhost", *request["args"]]
            code = 0
            try:
                simhost._entry.main()
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
            except KeyboardInterrupt:
                code = 130
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        except BaseException:
            import traceback
            traceback.print_exc()
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    sys.stdout.write(json.dumps({"returncode": code}) + "\n")
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class Ran:
    """What a command did: like :class:`subprocess.CompletedProcess`, text output."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


class ForkedSimhost:
    """One forking Python for a test module's ``simhost`` command lines."""

    def __init__(self) -> None:
        self._outputs = Path(tempfile.mkdtemp(prefix="simhost-cli-"))
        self._driver = subprocess.Popen(
            [sys.executable, "-c", _DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(
        self, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> Ran:
        """Run ``simhost ARGS`` in ``cwd`` with exactly ``env``; fails the test after
        ``timeout`` seconds (the forking Python is then ended)."""
        assert self._driver.stdin is not None and self._driver.stdout is not None
        out, err = self._outputs / "stdout", self._outputs / "stderr"
        request: dict[str, Any] = {
            "args": args,
            "cwd": str(cwd),
            "env": env,
            "stdout": str(out),
            "stderr": str(err),
        }
        self._driver.stdin.write(json.dumps(request) + "\n")
        self._driver.stdin.flush()
        try:
            reply = _read_line(self._driver.stdout, timeout)
        except TimeoutError:
            self.close()
            raise AssertionError(f"simhost {args} did not end within {timeout} s") from None
        try:
            return Ran(
                args,
                json.loads(reply)["returncode"],
                out.read_text(errors="replace"),
                err.read_text(errors="replace"),
            )
        finally:
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)

    def close(self) -> None:
        if self._driver.poll() is None:
            self._driver.kill()
        self._driver.wait()
        for pipe in (self._driver.stdin, self._driver.stdout):
            if pipe is not None:
                pipe.close()
        shutil.rmtree(self._outputs, ignore_errors=True)


def _read_line(stream: Any, timeout: float) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError
    line: str = stream.readline()
    assert line, "the forking Python ended"
    return line
