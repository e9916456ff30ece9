"""No function in grpo_edge is longer than MAX_LINES: a long deploy or bench reads as a list of named stages.

Counted with ast from the `def` line to the function's last line (decorators not counted), for every
function, method and nested function of every .py file under grpo_edge/.
"""
import ast
from pathlib import Path

MAX_LINES = 80
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grpo_edge"

# "path relative to the repository::qualified name" -> why it may stay longer for now. Clear an entry when
# its function is split; the test fails on an entry that no longer needs to be here.
ALLOWED = {
}


def _functions(tree):
    """(qualified name, first line, number of lines) of every function in a module, nested ones included."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)
    visit(tree, "")
    return out


def _long_functions():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for name, line, n in _functions(tree):
            if n > MAX_LINES:
                found["%s::%s" % (rel, name)] = (line, n)
    return found


def test_no_function_longer_than_max_lines():
    found = _long_functions()
    over = ["%s (line %d): %d lines" % (key, line, n) for key, (line, n) in sorted(found.items())
            if key not in ALLOWED]
    assert not over, ("functions longer than %d lines (split them into named stages, or add them to ALLOWED "
                      "with a reason):\n  %s" % (MAX_LINES, "\n  ".join(over)))


def test_allowlist_is_current():
    found = _long_functions()
    stale = sorted(key for key in ALLOWED if key not in found)
    assert not stale, ("ALLOWED names functions that are no longer over %d lines (or no longer exist): remove "
                       "them: %s" % (MAX_LINES, ", ".join(stale)))


def test_counter_sees_methods_and_nested_functions():
    src = "class A:\n    def m(self):\n        def inner():\n            pass\n        return 1\n\ndef f():\n    pass\n"
    assert _functions(ast.parse(src)) == [("A.m", 2, 4), ("A.m.inner", 3, 2), ("f", 7, 2)]
