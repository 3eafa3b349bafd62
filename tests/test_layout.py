"""The package layout: which layer may import which (docs/architecture.md, "Layers").

Every module of the installed package is parsed (not imported) and each import of a
``shuffledp`` module is checked against the layer rules below. The rules point one way, so
no import cycle between layers can exist; inside a layer a cycle would still show up as an
import error when the package loads.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import shuffledp

#: layers, lowest first; a module belongs to the layer of its longest matching prefix
LAYERS = {
    "base": ("shuffledp._validation", "shuffledp._lazy", "shuffledp._version",
             "shuffledp.randomness", "shuffledp.grid",
             "shuffledp.pyramid", "shuffledp.users", "shuffledp.safe_io", "shuffledp.datasets",
             "shuffledp.errors"),
    "accounting": ("shuffledp.accounting",),
    # what every party agrees on: parameters, bytes on the wire, keys
    "contract": ("shuffledp.protocol.params", "shuffledp.protocol.wire",
                 "shuffledp.protocol.crypto"),
    "encoders": ("shuffledp.encoders",),
    "analyzers": ("shuffledp.analyzers",),
    "secagg": ("shuffledp.secagg",),
    "protocol": ("shuffledp.protocol",),
    # HTTP services of the shuffler and of secure aggregation (extra [serve])
    "serve": ("shuffledp.serve",),
    "sweep": ("shuffledp.sweep",),
    "cli": ("shuffledp.cli",),
    "api": ("shuffledp",),  # the package's __init__: the public API, by role
}

#: which layers each layer may import (its own included)
ALLOWED = {
    "base": {"base"},
    "accounting": {"base", "accounting"},
    "contract": {"base", "accounting", "contract"},
    "encoders": {"base", "accounting", "contract", "encoders"},
    "analyzers": {"base", "accounting", "contract", "encoders", "analyzers"},
    "secagg": {"base", "secagg"},
    "protocol": {"base", "accounting", "contract", "encoders", "analyzers", "secagg",
                 "protocol"},
    "serve": {"base", "accounting", "contract", "encoders", "analyzers", "secagg", "protocol",
              "serve"},
    "sweep": {"base", "accounting", "contract", "encoders", "analyzers", "protocol", "sweep"},
    "cli": set(LAYERS),
    "api": set(LAYERS) - {"cli"},
}

#: the only places where a ``shuffledp`` import may sit inside a function: the CLI imports
#: each command's machinery when the command runs, so that ``shuffledp --help`` stays fast
#: (start-up, not cycles)
LAZY_IMPORTS_ALLOWED = ("shuffledp.cli",)


#: the four folders of the design card: shuffledp/ holds the other three as symbolic links
#: (shuffledp/encoders -> ../encoders, ...), so one walk of the package finds every module
FOLDERS = ("shuffledp",)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    todo = list(FOLDERS)
    while todo:
        name = todo.pop()
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, name
        found[name] = Path(spec.origin)
        for info in pkgutil.iter_modules(spec.submodule_search_locations or []):
            sub = f"{name}.{info.name}"
            if info.ispkg:
                todo.append(sub)
            else:
                s = importlib.util.find_spec(sub)
                assert s is not None and s.origin, sub
                found[sub] = Path(s.origin)
    return found


MODULES = _modules()


#: entries of LAYERS that name one module, not a package and everything under it
EXACT = frozenset({"shuffledp"})


def layer(module: str) -> str:
    """The layer of ``module``: its longest matching entry of LAYERS (an entry of EXACT
    matches only itself). A module no entry matches has no layer: AssertionError."""
    best, name = "", None
    for lay, prefixes in LAYERS.items():
        for p in prefixes:
            match = module == p or (p not in EXACT and module.startswith(p + "."))
            if match and len(p) > len(best):
                best, name = p, lay
    assert name is not None, f"{module} belongs to no layer: add it to LAYERS"
    return name


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str):
    """(imported module, line, inside a function) for every shuffledp import of ``module``."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    inner = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = module.split(".")
                base = base[: len(base) - n.level + (1 if _is_package(module) else 0)]
                src = ".".join(base + ([n.module] if n.module else []))
            else:
                src = n.module or ""
            # "from pkg import sub" imports the submodule pkg.sub
            targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in MODULES else src
                       for a in n.names]
        else:
            continue
        for t in targets:
            if t == "shuffledp" or t.startswith("shuffledp."):
                yield t, n.lineno, id(n) in inner


def test_every_module_has_a_layer():
    for m in MODULES:
        layer(m)


@pytest.mark.parametrize("module", ["shuffledp.newthing", "shuffledp.protocolx", "shuffledpx"])
def test_a_module_outside_every_layer_is_caught(module):
    # the package's __init__ is the api layer; it does not swallow its own new modules
    with pytest.raises(AssertionError, match="belongs to no layer"):
        layer(module)


def test_the_walk_finds_every_folder():
    # the symbolic links in shuffledp/ reach the design card's other three folders
    for name in ("shuffledp.encoders.encoder", "shuffledp.analyzers.heatmap.modular",
                 "shuffledp.accounting.events", "shuffledp.protocol.runner"):
        assert name in MODULES


def test_import_directions():
    bad = []
    for m in MODULES:
        for target, line, _ in _imports(m):
            if layer(target) not in ALLOWED[layer(m)]:
                bad.append(f"{m}:{line} ({layer(m)}) imports {target} ({layer(target)})")
    assert not bad, "\n".join(bad)


def test_no_imports_inside_functions_outside_the_cli():
    bad = sorted({f"{m}:{line} imports {t} inside a function"
           for m in MODULES
           if not m.startswith(LAZY_IMPORTS_ALLOWED)
           for t, line, inner in _imports(m) if inner})
    assert not bad, "\n".join(bad)


def test_py_typed_is_shipped():
    assert (Path(shuffledp.__file__).parent / "py.typed").is_file()
