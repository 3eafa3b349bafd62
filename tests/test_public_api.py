"""Every public name is the object it is documented to be, whatever was imported before.

A package's ``__all__`` name that is also the name of one of its submodules is overwritten by
the submodule the moment anything imports it (the import system sets the attribute on the
parent package), so ``from shuffledp import shuffle_ldp`` can silently turn into a module.
These checks run in a fresh interpreter that first imports *every* module of the package,
then resolves every public name of every package that has an ``__all__``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

_PROBE = textwrap.dedent('''
    import importlib, inspect, json, pkgutil, types
    import shuffledp

    def walk(name):
        mod = importlib.import_module(name)
        yield name
        for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
            sub = f"{name}.{info.name}"
            if info.name == "__main__":
                continue
            if sub.startswith("shuffledp.serve") or sub.startswith("shuffledp.sweep.plot"):
                try:  # optional extras ([serve], [plot]) may be absent
                    importlib.import_module(sub)
                except ImportError:
                    continue
            yield from walk(sub) if info.ispkg else [sub]

    modules = list(walk("shuffledp"))
    for m in modules:                       # every module first ...
        importlib.import_module(m)
    bad, checked = [], 0
    for m in modules:                       # ... then every public name of every package
        mod = importlib.import_module(m)
        lazy = getattr(mod, "_LAZY", {})
        for name in getattr(mod, "__all__", ()):
            checked += 1
            obj = getattr(mod, name)
            if isinstance(obj, types.ModuleType):
                bad.append(f"{m}.{name} is the module {obj.__name__}")
            elif name in lazy:
                want = getattr(importlib.import_module(lazy[name]), name)
                if obj is not want:
                    bad.append(f"{m}.{name} is not {lazy[name]}.{name}")
    print(json.dumps({"bad": bad, "checked": checked, "modules": len(modules)}))
''')


@pytest.fixture(scope="module")
def probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_no_public_name_is_shadowed_by_a_module(probe):
    assert probe["checked"] > 100 and probe["modules"] > 80, probe
    assert probe["bad"] == [], "\n".join(probe["bad"])


def test_shuffle_ldp_is_callable_after_the_readme_imports():
    # the failure the check above generalises: a function turned into a module
    code = ("from shuffledp.accounting import Accountant\n"
            "import shuffledp.accounting.events\n"
            "from shuffledp import shuffle_ldp\n"
            "from shuffledp.accounting import compose\n"
            "print(callable(shuffle_ldp), callable(compose))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.split() == ["True", "True"]
