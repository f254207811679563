"""No module of permclient touches a private trio attribute.

trio promises only its public API (``trio``, the documented ``trio.lowlevel``
functions); it is not upper-pinned, so a release may change any private name's
meaning without notice. An AST scan of every module under ``permclient/`` flags:

* importing a private trio module or name (``import trio._core``,
  ``from trio._core._run import CancelStatus``, ``from trio.lowlevel import _x``);
* any ``_``-prefixed step in an attribute chain rooted at ``trio`` (or an alias of
  it): ``trio._core``, ``trio.lowlevel._run``;
* reading or writing an attribute trio keeps private (``_cancel_status``,
  ``_activate_cancel_status``, ``_runner``, ...) on anything but ``self``/``cls``,
  also through ``getattr``/``setattr``/``delattr``;
* any ``X._name`` where ``X`` names a task, a scope, a nursery, a cancel status or
  trio itself, and ``.parent`` on a cancel status.

The scanner is tested on snippets first, so that it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import paths

PACKAGE = paths.PACKAGE

# Private names of trio's tasks, cancel scopes, cancel statuses, nurseries and run loop.
PRIVATE_TRIO_ATTRIBUTES = frozenset(
    {
        "_cancel_status",
        "_activate_cancel_status",
        "_runner",
        "_nursery",
        "_nurseries",
        "_cancel_points",
        "_schedule_points",
        "_parent_task",
        "_parent_nursery",
        "_child_nurseries",
        "_cancel_stack",
        "_cancel_called",
        "_cancel_requested",
        "_has_been_entered",
        "_registered_deadline",
        "_deadline",
        "_shield",
        "_scope",
        "_abort_func",
        "_next_send",
        "_next_send_fn",
        "_pending_excs",
        "_children",
        "_tasks",
        "_closed",
        "_add_abandoned_scope",
        "_mark_abandoned",
        "_might_change_registered_deadline",
        "_attempt_delivery_of_any_pending_cancel",
        "_attempt_abort",
        "_context",
        "_coro",
        "_task",
        "GLOBAL_RUN_CONTEXT",
    }
)
# An ``X._name`` is suspect when X's own name says it is one of trio's objects.
SUSPECT_OWNERS = ("task", "scope", "nursery", "cancel_status", "trio", "runner")
OWN_OBJECTS = frozenset({"self", "cls"})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner_text(node: ast.expr) -> str:
    return ast.unparse(node).lower()


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[str] = []
        self.trio_aliases = {"trio"}

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "trio":
                if any(_is_private(p) for p in parts):
                    self._flag(node, f"import {alias.name}")
                if len(parts) == 1 or alias.asname is None:
                    self.trio_aliases.add(alias.asname or "trio")
                else:
                    self.trio_aliases.add(alias.asname)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        parts = (node.module or "").split(".")
        if parts[0] == "trio" and node.level == 0:
            if any(_is_private(p) for p in parts):
                self._flag(node, f"from {node.module} import ...")
            for alias in node.names:
                if _is_private(alias.name):
                    self._flag(node, f"from {node.module} import {alias.name}")
                else:
                    # e.g. `from trio import lowlevel`: a trio module under another name
                    self.trio_aliases.add(alias.asname or alias.name)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        owner = node.value
        root = owner
        while isinstance(root, ast.Attribute):
            root = root.value
        rooted_at_trio = isinstance(root, ast.Name) and root.id in self.trio_aliases
        is_own = isinstance(owner, ast.Name) and owner.id in OWN_OBJECTS
        if _is_private(name) and rooted_at_trio:
            self._flag(node, f"{ast.unparse(node)} (private trio name)")
        elif name in PRIVATE_TRIO_ATTRIBUTES and not is_own:
            self._flag(node, f"{ast.unparse(node)} (a private attribute of trio's objects)")
        elif _is_private(name) and any(s in _owner_text(owner) for s in SUSPECT_OWNERS):
            if not is_own:
                self._flag(node, f"{ast.unparse(node)} (private attribute of a trio object)")
        elif name == "parent" and "status" in _owner_text(owner):
            self._flag(node, f"{ast.unparse(node)} (CancelStatus.parent)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ("getattr", "setattr", "delattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
            owner = _owner_text(node.args[0])
            if name in PRIVATE_TRIO_ATTRIBUTES or (
                _is_private(name) and any(s in owner for s in SUSPECT_OWNERS)
            ):
                self._flag(node, f"{func.id}(..., {name!r})")
        self.generic_visit(node)


def private_trio_uses(source: str) -> list[str]:
    """Every private-trio access the scan finds in ``source``."""
    scanner = _Scanner()
    scanner.visit(ast.parse(source))
    return scanner.found


# ------------------------------------------------------------ the scanner itself

FLAGGED = [
    "task._cancel_status",
    "from trio._core._run import CancelStatus",
    "import trio._core",
    "import trio._core._run as run",
    "import trio.lowlevel._x",
    "from trio import _core",
    "from trio.lowlevel import _x",
    "trio._core._run.GLOBAL_RUN_CONTEXT",
    "trio.lowlevel._something()",
    "import trio as t\nt._core",
    "from trio import lowlevel as ll\nll._private",
    "trio.lowlevel.current_task()._cancel_status",
    "task._activate_cancel_status(base)",
    "outermost.parent = scope._cancel_status",
    "status.parent = None",
    "current._parent_task",
    "nursery._children",
    "runner = x._runner",
    "scope._cancel_called",
    "my_scope._anything_private",
    "the_task._anything_private",
    "getattr(task, '_cancel_status')",
    "setattr(obj, '_cancel_status', s)",
]
CLEAN = [
    "import trio\ntrio.lowlevel.current_task()",
    "import trio\nwith trio.CancelScope() as scope:\n    scope.cancel()",
    "self._nursery.start_soon(f)",  # an object's own attribute, whatever its name
    "self._writer_scope.cancel()",
    "cls._runner",
    "question._size",
    "trio.lowlevel.ParkingLot().park",
    "scope.cancel_called",
    "task.parent_nursery",
    "from trio import CancelScope, lowlevel",
]


@pytest.mark.parametrize("snippet", FLAGGED)
def test_the_scanner_flags_private_trio_access(snippet: str) -> None:
    assert private_trio_uses(snippet), snippet


@pytest.mark.parametrize("snippet", CLEAN)
def test_the_scanner_leaves_public_trio_use_alone(snippet: str) -> None:
    assert private_trio_uses(snippet) == []


def test_the_scanner_flags_the_old_lazy_scope_splice() -> None:
    splice = (
        "def splice(task, scope):\n"
        "    top = task._cancel_status\n"
        "    task._activate_cancel_status(base)\n"
        "    outermost.parent = scope._cancel_status\n"
    )
    assert len(private_trio_uses(splice)) >= 3


# ------------------------------------------------------------------ the package

MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_scan_covers_the_package() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in MODULES}
    assert {"_client.py", "_connection.py", "_inline.py", "__init__.py"} <= names
    assert any(name.startswith("embed/") for name in names)


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_no_module_touches_a_private_trio_attribute(path: Path) -> None:
    found = private_trio_uses(path.read_text(encoding="utf-8"))
    assert found == [], f"{path.relative_to(PACKAGE.parent)} uses private trio names: {found}"
