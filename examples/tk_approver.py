"""A small tkinter window that approves ``simhost runtime``'s tool calls.

permclient runs on tkinter's own event loop (trio guest mode, through
:func:`permclient.embed.tk_client`): no threads of your own, no polling. Each
permission request shows a card (the tool call's title, kind and input) with
Allow and Deny buttons. If the runtime withdraws the question, the card goes
away. Closing the window answers every open question ``cancelled``, stops the
runtime, and only then destroys the window (in ``on_done``).

``--auto allow|deny`` presses the button for you once the card is shown (the
real button, through ``Button.invoke``) and closes the window when the turn ends:
that is how the tests run it, under a virtual display (Xvfb). Without a display it
says so in one line and exits with status 1; Ctrl-C in the terminal answers every
open question ``cancelled``, stops the runtime and exits with status 130.

Usage::

    python examples/tk_approver.py --workspace /tmp/w
    python examples/tk_approver.py --prompt 'run ls -la'
    xvfb-run -a python examples/tk_approver.py --auto allow
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tkinter as tk
from pathlib import Path
from typing import Any

from permclient import Selected
from permclient.embed import GuestClient, PermissionHandle, tk_client


class ApproverWindow:
    def __init__(self, root: tk.Tk, argv: list[str], prompt: str, auto: str | None) -> None:
        self.root = root
        self.prompt = prompt
        self.auto = auto
        self.exit_code = 0
        root.title("permclient approver")
        self.status = tk.Label(root, text="starting the runtime...", anchor="w")
        self.status.pack(fill="x", padx=8, pady=4)
        self.cards = tk.Frame(root)
        self.cards.pack(fill="both", expand=True, padx=8, pady=4)
        root.protocol("WM_DELETE_WINDOW", self.close)
        self.client: GuestClient = tk_client(
            root, argv, on_ready=self.on_ready, on_done=self.on_done
        )

    def say(self, text: str) -> None:
        self.status.configure(text=text)
        print(text, flush=True)

    # ------------------------------------------------------------- the run

    def on_ready(self, error: BaseException | None) -> None:
        if error is not None:
            self.say(f"could not start the runtime: {error}")
            self.exit_code = 1
            return
        future = self.client.request("sessionNew", {"title": "tk approver"})
        future.add_done_callback(lambda f: self.on_session(f.result()))

    def on_session(self, result: dict[str, Any]) -> None:
        session_id = result["sessionId"]
        self.client.permission_handler(session_id, self.show_card)
        self.say(f"session {session_id}: {self.prompt}")
        turn = self.client.request("chatSend", {"sessionId": session_id, "text": self.prompt})
        turn.add_done_callback(self.on_turn_end)

    def on_turn_end(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            self.say(f"turn failed: {future.exception()}")
        else:
            self.say(f"turn ended: {future.result()['stopReason']}")
        if self.auto is not None:
            self.close()

    def close(self) -> None:
        """Window closed: answer everything cancelled and stop; on_done destroys the root."""
        self.say("closing...")
        self.client.close()

    def on_done(self, error: BaseException | None) -> None:
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C ended the run
            # Ctrl-C: trio's guest run takes SIGINT (outside its tasks too) and closes.
            print("interrupted: open questions cancelled", flush=True)
            self.exit_code = 130
        elif error is not None:
            print(f"the client failed: {error!r}", file=sys.stderr)
            self.exit_code = 1
        print("runtime stopped", flush=True)
        self.root.destroy()

    # ------------------------------------------------------------ the card

    def show_card(self, handle: PermissionHandle) -> None:
        tool_call = handle.request.tool_call
        card = tk.LabelFrame(self.cards, text=f"{tool_call.kind}: {tool_call.title}")
        card.pack(fill="x", pady=4)
        details = json.dumps(tool_call.raw_input, indent=1) if tool_call.raw_input else ""
        tk.Label(card, text=details, justify="left", anchor="w").pack(fill="x")
        buttons: dict[str, tk.Button] = {}
        for option in handle.request.options:

            def click(option_id: str = option.option_id) -> None:
                handle.answer(Selected(option_id))
                print(f"clicked: {option_id}", flush=True)
                card.destroy()

            button = tk.Button(card, text=option.name, command=click)
            button.pack(side="left", padx=4, pady=4)
            buttons[option.kind] = button

        def withdrawn(_handle: PermissionHandle) -> None:
            print(f"withdrawn: {tool_call.title}", flush=True)
            card.destroy()

        handle.on_cancelled(withdrawn)
        self.say(f"permission asked: {tool_call.title}")
        if self.auto is not None:
            kind = "allow_once" if self.auto == "allow" else "reject_once"
            wanted = buttons.get(kind)
            if wanted is not None:
                self.root.after(50, wanted.invoke)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="the runtime's workspace (default: a temp folder)")
    parser.add_argument("--prompt", default="create notes.txt with hello from tk")
    parser.add_argument("--auto", choices=["allow", "deny"], help="press the button for you")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        workspace = args.workspace or scratch
        Path(workspace).mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "simhost", "runtime", "--stdio"]
        argv += ["--workspace", workspace, "--state-dir", str(Path(scratch) / "state")]
        try:
            root = tk.Tk()
        except tk.TclError as exc:  # no display, or one we may not use
            print(f"tk_approver: cannot open a window: {exc}", file=sys.stderr)
            return 1
        window = ApproverWindow(root, argv, args.prompt, args.auto)
        root.mainloop()  # Ctrl-C: trio's guest run takes SIGINT; on_done sees it
        return window.exit_code


if __name__ == "__main__":
    sys.exit(main())
