"""The spoofing agent (``spoof_acp_agent.py``) asking once about 20 new files of
20,000 lines each: a page that drew all of it at once would freeze."""

from __future__ import annotations

import spoof_acp_agent as spoof

if __name__ == "__main__":
    spoof.COMMAND = "write 20 files"
    spoof.OPTIONS[0]["name"] = "Allow"
    spoof.TOOL_CALL_EXTRA = {
        "kind": "edit",
        "content": [
            {
                "type": "diff",
                "path": f"/work/file{number}.txt",
                "oldText": None,
                "newText": f"line of file {number}\n" * 20_000,
            }
            for number in range(20)
        ],
    }
    spoof.main()
