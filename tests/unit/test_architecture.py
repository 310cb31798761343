"""The map in docs/ARCHITECTURE.md, held against the code: layers, and no import loops.

Every import counts, also those inside functions (a lazy import is still a dependency, and
the one loop this house had, doctor <-> pipeline, was two lazy imports).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "imagekit"

# Bottom to top; a module may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundations",
        (
            "errors",
            "interrupt",
            "refs",
            "workspace",
            "evidence",
            "layers",
            "version",
            "result",
            "files",
            "yamldoc",
            "jsondoc",
            "lazy",
            "progress",
        ),
    ),
    ("outside world", ("registry", "runtime", "runners")),
    # One image, wherever it is kept (a registry), read by the stages above.
    ("image", ("image",)),
    ("records", ("kinds", "ledger", "attest")),
    (
        "stages",
        (
            "plans",
            "builders",
            "audit",
            "mirror",
            "mirror_report",
            "mirror_layers",
            "mirror_index",
            "pull",
            "inspect",
            "layerdiff",
            "provenance",
            "sbom",
            "cluster",
            "gpu",
            "pull_attestation",
            "pull_verdict",
            "mirror_binding",
            "gate",
        ),
    ),
    ("flows", ("flows",)),
    ("cli", ("cli", "__main__")),
    # The package face hands out the public names lazily (imagekit/__init__.py); only its
    # type-checking imports name them, and nothing inside the package imports the face.
    ("face", ("api", "__init__")),
)
_LAYER_OF = {top: index for index, (_, tops) in enumerate(LAYERS) for top in tops}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The imagekit modules a file imports (``from imagekit.x import y`` counts x.y when
    y is a module, else x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("imagekit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("imagekit"):
                continue
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
    return found


FILES = sorted(PACKAGE.rglob("*.py"))
MODULES = {_module_name(p): p for p in FILES}


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    assert top in _LAYER_OF, f"{module} is in no layer of docs/ARCHITECTURE.md"
    return _LAYER_OF[top]


def test_every_module_imports_only_its_own_layer_and_below() -> None:
    wrong = [
        f"{module} ({LAYERS[_layer(module)][0]}) imports {target} ({LAYERS[_layer(target)][0]})"
        for module, path in MODULES.items()
        for target in _imports(path)
        if target in MODULES and _layer(target) > _layer(module)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_loops() -> None:
    graph = {m: {t for t in _imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    # A package's face (__init__) hands on names from its own modules; that is not a loop
    # unless one of those modules imports the face back.
    loops = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                loops.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not loops, "\n".join(loops)


def _room(module: str) -> str:
    """A module's room as the house drawings show it: its top-level package or module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_two_rooms_import_each_other() -> None:
    """Between rooms every arrow points one way: a package whose module imports another
    package whose module imports it back is a loop of rooms, even when no two modules loop
    (attest and the kinds were one, plans and the audit another, plans and the builders a
    third)."""
    edges = {
        (_room(module), _room(target))
        for module, path in MODULES.items()
        for target in _imports(path)
        if target in MODULES and _room(target) != _room(module)
    }
    both = sorted({tuple(sorted(edge)) for edge in edges if edge[::-1] in edges})
    assert not both, "rooms importing each other: " + ", ".join(f"{a} <-> {b}" for a, b in both)
