"""The spoofing agent (``spoof_acp_agent.py``) as a newer agent: its tool call has a
kind and a content type this version of permclient does not know, so a client types
the request only in part and a view must show it as it arrived."""

from __future__ import annotations

import spoof_acp_agent as spoof

if __name__ == "__main__":
    spoof.COMMAND = "echo newer"
    spoof.OPTIONS[0]["name"] = "Allow"
    spoof.TOOL_CALL_EXTRA = {
        "kind": "teleport",
        "content": [{"type": "hologram", "scene": "a big red button"}],
    }
    spoof.main()
