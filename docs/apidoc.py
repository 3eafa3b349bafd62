"""The API reference of shuffledp, generated from the docstrings, and the check that keeps the
docstrings complete.

    python docs/apidoc.py            # rewrite docs/api.md
    python docs/apidoc.py --check    # list public functions whose docstring lacks a section;
                                     # exit 1 if any does, or if docs/api.md is stale

The public surface is every module of the installed package whose dotted name has no part
starting with an underscore, the CLI excepted (``shuffledp --help`` documents it): a module's
``__all__`` where it has one, otherwise the functions and classes it defines without a
leading underscore. Every public function must have the numpydoc sections

* ``Parameters`` (if it takes any argument but ``self``/``cls``),
* ``Returns`` or ``Yields`` (unless it is annotated ``-> None``),
* ``Raises`` (if it takes an argument: public functions check their input),
* ``References`` in the mechanism and accounting code (``shuffledp.accounting``,
  ``shuffledp.encoders``, ``shuffledp.analyzers``), which implements the papers
  (``docs/references.md`` is the bibliography).

Every public class must have a docstring with ``Parameters`` or ``Attributes`` (an exception
only a docstring).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path

OUT = Path(__file__).with_name("api.md")
#: optional extras: a module that needs one is documented only when the extra is installed
OPTIONAL = ("shuffledp.serve", "shuffledp.sweep.plot")
SCIENCE = ("shuffledp.accounting", "shuffledp.encoders", "shuffledp.analyzers")


def modules(root: str = "shuffledp") -> Iterator[str]:
    """Every public module under ``root``, in a stable order (the CLI excluded)."""
    mod = importlib.import_module(root)
    yield root
    infos = sorted(pkgutil.iter_modules(getattr(mod, "__path__", [])), key=lambda i: i.name)
    for info in infos:
        sub = f"{root}.{info.name}"
        if info.name.startswith("_") or sub == "shuffledp.cli":
            continue
        try:
            importlib.import_module(sub)
        except ImportError:
            if sub.startswith(OPTIONAL):
                continue
            raise
        if info.ispkg:
            yield from modules(sub)
        else:
            yield sub


def public(module: str) -> list[tuple[str, object]]:
    """(name, object) of the module's public functions and classes, defined in it (or, with an
    ``__all__``, exported by it) -- each object once, under the module that defines it."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, o in vars(mod).items() if not n.startswith("_")]
    out = []
    for n in names:
        o = getattr(mod, n)
        if not (inspect.isfunction(o) or inspect.isclass(o)):
            continue
        if getattr(o, "__module__", None) != module:
            continue  # documented where it is defined
        out.append((n, o))
    return out


def _sections(doc: str) -> set[str]:
    lines = doc.splitlines()
    return {lines[i].strip() for i in range(len(lines) - 1)
            if lines[i + 1].strip() and set(lines[i + 1].strip()) == {"-"}
            and len(lines[i + 1].strip()) >= 3}


def _takes_arguments(fn: object) -> bool:
    try:
        params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return any(p not in ("self", "cls") for p in params)


def _returns_none(fn: object) -> bool:
    ann = inspect.signature(fn).return_annotation  # type: ignore[arg-type]
    return ann in (None, "None", type(None))


def missing(module: str, name: str, obj: object) -> list[str]:
    """The sections ``obj``'s docstring lacks (empty when complete)."""
    doc = inspect.getdoc(obj) or ""
    if not doc:
        return ["docstring"]
    have = _sections(doc)
    need: list[str] = []
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return need  # an exception's docstring says when it is raised
        if not have & {"Parameters", "Attributes"}:
            need.append("Parameters or Attributes")
        return need
    if _takes_arguments(obj):
        need += [s for s in ("Parameters", "Raises") if s not in have]
    if not _returns_none(obj) and not have & {"Returns", "Yields"}:
        need.append("Returns")
    if module.startswith(SCIENCE) and "References" not in have:
        need.append("References")
    return need


def report() -> tuple[list[str], int]:
    """(one line per incomplete public object, number of public objects)."""
    bad, total = [], 0
    for m in modules():
        for name, obj in public(m):
            total += 1
            need = missing(m, name, obj)
            if need:
                bad.append(f"{m}.{name}: {', '.join(need)}")
    return bad, total


def render() -> str:
    """docs/api.md: every public module, its summary, and each public object's signature and
    docstring."""
    out = ["# API reference", "",
           "Generated from the docstrings by `python docs/apidoc.py`; do not edit by hand. "
           "The bibliography is [references.md](references.md).", ""]
    for m in modules():
        mod = importlib.import_module(m)
        objs = public(m)
        summary = (inspect.getdoc(mod) or "").split("\n\n")[0].replace("\n", " ")
        if not objs and m.count(".") > 1:
            continue
        out += [f"## `{m}`", "", summary, ""]
        for name, obj in objs:
            try:
                sig = str(inspect.signature(obj))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                sig = ""
            kind = "class" if inspect.isclass(obj) else "def"
            out += [f"### `{kind} {name}{sig}`", "", "```text", inspect.getdoc(obj) or "",
                    "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="list incomplete docstrings and check docs/api.md is current")
    args = ap.parse_args(argv)
    if not args.check:
        OUT.write_text(render())
        print(f"wrote {OUT}")
        return 0
    bad, total = report()
    for line in bad:
        print(line)
    print(f"{total - len(bad)} of {total} public objects complete")
    stale = not OUT.exists() or OUT.read_text() != render()
    if stale:
        print(f"{OUT} is stale: run python docs/apidoc.py")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())
