"""Who decides a tool call: the policy file, the session's preset, a standing grant, or the editor.

Pure: :func:`evaluate` maps (policy, preset, grant, tool) to a :class:`Verdict`
(decided without asking) or an :class:`Ask` (ask the editor, with an optional
timeout). The rules, in order (docs/runtime.md):

1. a ``deny`` anywhere wins: the policy's rule, then the preset's, then a
   standing ``reject`` grant;
2. a standing ``allow`` grant (the editor answered ``allow-always``) allows;
3. a tool runs without asking only when the policy *and* the preset both say
   ``allow`` -- and never the shell (``local_shell.local_shell`` always asks);
4. otherwise the editor is asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Final, Literal, TypeAlias, cast

import msgspec

from simhost.runtime.wire import DecidedBy, GrantDecision

__all__ = [
    "DEFAULT_PRESET",
    "NEVER_AUTO_ALLOWED",
    "PRESETS",
    "SHELL",
    "TOOLS",
    "Ask",
    "Policy",
    "PolicyError",
    "Preset",
    "Rule",
    "ToolName",
    "ToolRule",
    "Verdict",
    "decode_policy",
    "evaluate",
    "load_policy",
    "shipped_policy_names",
]

ToolName: TypeAlias = Literal["fs.read", "fs.write", "fs.delete", "local_shell.local_shell"]
Rule: TypeAlias = Literal["allow", "approve", "deny"]

TOOLS: Final[tuple[ToolName, ...]] = ("fs.read", "fs.write", "fs.delete", "local_shell.local_shell")
SHELL: Final[ToolName] = "local_shell.local_shell"
NEVER_AUTO_ALLOWED: Final[frozenset[str]] = frozenset({SHELL})
"""Tools that no policy or preset can run without asking (a standing grant still can)."""

_Seconds: TypeAlias = Annotated[float, msgspec.Meta(gt=0, le=86_400)]


class PolicyError(Exception):
    """A policy could not be found or is not valid; the message says which and why."""


class ToolRule(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A tool's rule in object form, to give it its own timeout.

    ``{"rule": "approve", "timeoutS": 30, "onTimeout": "deny"}``.
    """

    rule: Rule
    timeout_s: _Seconds | None = None
    on_timeout: Literal["deny"] = "deny"


class Policy(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A human-in-the-loop policy file.

    ``tools`` maps a tool name to ``"allow"`` (may run without asking, if the
    session's preset allows it too), ``"approve"`` (ask the editor) or
    ``"deny"``, or to a :class:`ToolRule`. Tools not listed get ``default``.
    ``timeoutS`` bounds how long a question waits for the editor;
    ``onTimeout`` says what then happens (only ``"deny"``).
    """

    default: Rule
    tools: dict[ToolName, Rule | ToolRule] = msgspec.field(default_factory=dict)
    timeout_s: _Seconds | None = None
    on_timeout: Literal["deny"] = "deny"
    description: str = ""
    schema: str | None = msgspec.field(default=None, name="$schema")

    def __post_init__(self) -> None:
        if self.rule_for(SHELL).rule == "allow" and SHELL in self.tools:
            raise ValueError(
                f"{SHELL} cannot be 'allow': a shell command always asks (use 'approve' or 'deny')"
            )

    def rule_for(self, tool: str) -> ToolRule:
        """The effective rule of ``tool``, with the policy-wide timeout filled in."""
        rules = cast("dict[str, Rule | ToolRule]", self.tools)
        rule = rules.get(tool, self.default)
        if isinstance(rule, ToolRule):
            if rule.timeout_s is None and self.timeout_s is not None:
                return ToolRule(rule.rule, self.timeout_s, rule.on_timeout)
            return rule
        return ToolRule(rule, self.timeout_s, self.on_timeout)


@dataclass(frozen=True, slots=True)
class Preset:
    """A session's permission preset: a rule per tool."""

    preset_id: str
    description: str
    rules: dict[str, Rule]


PRESETS: Final[dict[str, Preset]] = {
    preset.preset_id: preset
    for preset in (
        Preset(
            "ask",
            "Reads run; writes, deletes and shell commands ask.",
            {"fs.read": "allow", "fs.write": "approve", "fs.delete": "approve", SHELL: "approve"},
        ),
        Preset(
            "read-only",
            "Reads run; writes, deletes and shell commands are denied without asking.",
            {"fs.read": "allow", "fs.write": "deny", "fs.delete": "deny", SHELL: "deny"},
        ),
        Preset(
            "auto-edit",
            "Reads and workspace writes run; deletes and shell commands ask.",
            {"fs.read": "allow", "fs.write": "allow", "fs.delete": "approve", SHELL: "approve"},
        ),
    )
}
DEFAULT_PRESET: Final = "ask"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Decided without asking the editor."""

    decision: Literal["allow", "deny"]
    decided_by: DecidedBy
    reason: str


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the editor; after ``timeout_s`` seconds (if set) withdraw and deny."""

    timeout_s: float | None


def evaluate(
    policy: Policy, preset: Preset, tool: str, grant: GrantDecision | None, grant_name: str = ""
) -> Verdict | Ask:
    """Decide ``tool`` for a session with ``preset`` and standing ``grant`` (or none).

    ``grant_name`` words the reason when the grant decides. Returns a
    :class:`Verdict` when no question is needed, else :class:`Ask`.
    """
    rule = policy.rule_for(tool)
    preset_rule = preset.rules.get(tool, "approve")
    if rule.rule == "deny":
        return Verdict("deny", "policy", f"the policy denies {tool}")
    if preset_rule == "deny":
        return Verdict("deny", "preset", f"the session's preset {preset.preset_id!r} denies {tool}")
    if grant == "reject":
        return Verdict("deny", "grant", grant_name or f"a standing grant denies {tool}")
    if grant == "allow":
        return Verdict("allow", "grant", grant_name or f"a standing grant allows {tool}")
    if rule.rule == "allow" and preset_rule == "allow" and tool not in NEVER_AUTO_ALLOWED:
        return Verdict(
            "allow", "preset", f"the policy and the preset {preset.preset_id!r} allow {tool}"
        )
    return Ask(rule.timeout_s)


# ------------------------------------------------------------------- loading

_POLICY_PACKAGE: Final = "simhost"
_POLICY_FOLDER: Final = "policies"


def shipped_policy_names() -> list[str]:
    """Names of the policies shipped in ``simhost/policies/``, sorted."""
    folder = resources.files(_POLICY_PACKAGE).joinpath(_POLICY_FOLDER)
    return sorted(
        entry.name.removesuffix(".json")
        for entry in folder.iterdir()
        if entry.name.endswith(".json")
    )


def decode_policy(data: bytes | str, origin: str) -> Policy:
    """Decode a policy document; raises :class:`PolicyError` naming ``origin``."""
    try:
        return msgspec.json.decode(data, type=Policy)
    except msgspec.ValidationError as exc:
        raise PolicyError(f"policy {origin} is not valid: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise PolicyError(f"policy {origin} is not JSON: {exc}") from exc


def load_policy(name_or_path: str) -> tuple[Policy, str]:
    """Load a shipped policy by name, or a policy file by path.

    A value containing a path separator, ending in ``.json``, or naming an
    existing file is a path; anything else is a shipped name. Returns the policy
    and a label for it (the name, or the absolute path). Raises
    :class:`PolicyError` for an unknown name, an unreadable file or an invalid
    document.
    """
    looks_like_path = (
        "/" in name_or_path or name_or_path.endswith(".json") or Path(name_or_path).is_file()
    )
    if looks_like_path:
        path = Path(name_or_path).expanduser().absolute()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PolicyError(f"cannot read policy file {path}: {exc.strerror or exc}") from exc
        return decode_policy(data, str(path)), str(path)
    names = shipped_policy_names()
    if name_or_path not in names:
        raise PolicyError(
            f"unknown policy {name_or_path!r}: shipped policies are {', '.join(names)} "
            "(or give the path of a JSON file)"
        )
    entry = resources.files(_POLICY_PACKAGE).joinpath(_POLICY_FOLDER, f"{name_or_path}.json")
    return decode_policy(entry.read_bytes(), name_or_path), name_or_path
