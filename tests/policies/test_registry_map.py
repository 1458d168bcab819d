"""The lazy policy registry: ``registry._MODULES`` (name -> module) is the registry that importing
every policy module fills, and asking for one name imports only that name's module.

Twins: the names every module of ``sim/policies/`` registers when all are imported (what the old
eager ``sim.policies`` did) against the static map; and, in forks of one clean interpreter, what
``policy_class(name)`` imports against what importing the name's module directly imports, and the
class it gives against the class after every policy module is imported.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sim.policies
from sim.policies import available_policies, policy_class, register
from sim.policies import registry as reg
from sim.policies.base import EvictionPolicy

FOLDER = Path(sim.policies.__file__).parent


def _all_policy_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(FOLDER)]))


def test_every_registered_policy_is_in_the_static_map():
    for mod in _all_policy_modules():
        importlib.import_module(f"sim.policies.{mod}")
    found = {
        name: cls.__module__
        for name, cls in reg._POLICIES.items()
        if cls.__module__.startswith("sim.policies.")
    }
    missing = {n: m for n, m in found.items() if reg._MODULES.get(n) != m}
    assert not missing, (
        "registered but not (or elsewhere) in sim/policies/registry.py _MODULES: "
        + (", ".join(f"{n!r} by {m.replace('.', '/')}.py" for n, m in sorted(missing.items())))
    )
    stale = sorted(set(reg._MODULES) - set(found))
    assert not stale, f"in registry._MODULES but registered by no module: {stale}"
    assert found == reg._MODULES
    assert set(available_policies()) >= set(found)


def test_no_module_outside_the_map_registers():
    """A ``_``-module (not imported by the scan above as a policy file would be) or a module the
    map does not name holds no ``@register``."""
    mapped = set(reg._MODULES.values())
    for path in sorted(FOLDER.glob("*.py")):
        mod = f"sim.policies.{path.stem}"
        if mod not in mapped:
            assert "@register(" not in path.read_text(), (
                f"{path.name} registers a policy that sim/policies/registry.py _MODULES lacks"
            )


def test_policy_class_names_the_mapped_module_class():
    for name, mod in reg._MODULES.items():
        cls = policy_class(name)
        assert issubclass(cls, EvictionPolicy)
        assert cls.__module__ == mod and cls.name == name
        assert getattr(importlib.import_module(mod), cls.__name__) is cls


def test_unknown_name_still_hints_and_lists():
    with pytest.raises(ValueError, match=r"unknown policy 'lruu' \(did you mean 'lru'\?\)"):
        policy_class("lruu")
    with pytest.raises(ValueError, match="registered: arc, belady"):
        policy_class("no-such-policy")


def test_a_built_in_name_cannot_be_taken_by_another_module():
    class Impostor(EvictionPolicy):
        pass

    with pytest.raises(ValueError, match="built in"):
        register("twoq")(Impostor)
    assert policy_class("twoq").__module__ == "sim.policies.twoq"


# In a fresh interpreter: importing sim.policies registers nothing; then, in a fork per name, what
# policy_class(name) imports and registers, and (twin) what importing the module directly does.
_PROBE = textwrap.dedent(
    """
    import importlib, json, os, pkgutil, re, sys
    import sim.policies
    from sim.policies import registry as reg

    def policy_modules():
        return sorted(m for m in sys.modules if m.startswith("sim.policies."))

    def in_fork(fn):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            with os.fdopen(w, "w") as f:
                f.write(json.dumps(fn()))
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            out = json.loads(f.read())
        os.waitpid(pid, 0)
        return out

    def describe(v):
        if isinstance(v, type):
            return f"{v.__module__}.{v.__qualname__}"
        if hasattr(v, "__qualname__"):
            return f"{type(v).__name__} {v.__qualname__}"
        return re.sub(r"0x[0-9a-f]+", "0x", repr(v))[:300]

    def fingerprint(cls):
        # what the class and its bases hold once built: a module that sets a class attribute
        # when imported (S3FIFO.run_form) shows here
        return [
            [describe(c), sorted([k, describe(v)] for k, v in vars(c).items())]
            for c in cls.__mro__
            if c.__module__.startswith("sim.")
        ]

    def by_name(name):
        cls = reg.policy_class(name)
        return [cls.__module__, sorted(reg._POLICIES), policy_modules(), fingerprint(cls)]

    def by_module(mod):
        importlib.import_module(mod)
        for companion in reg._COMPANIONS.get(mod, ()):
            importlib.import_module(companion)
        cls = getattr(sys.modules[mod], reg._POLICIES[name].__name__)
        return [mod, sorted(reg._POLICIES), policy_modules(), fingerprint(cls)]

    def every_module():  # as the eager package did: every module, then the names
        for m in sorted(pkgutil.iter_modules(sim.policies.__path__), key=lambda m: m.name):
            if not m.name.startswith("_"):
                importlib.import_module(f"sim.policies.{m.name}")
        return {name: fingerprint(reg.policy_class(name)) for name in reg._MODULES}

    out = {"at_import": [sorted(reg._POLICIES), policy_modules()]}
    eager = in_fork(every_module)
    for name, mod in sorted(reg._MODULES.items()):
        out[name] = [in_fork(lambda: by_name(name)), in_fork(lambda: by_module(mod)), eager[name]]
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def probe() -> dict:
    root = FOLDER.parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=root, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_importing_the_package_imports_no_policy(probe):
    registered, modules = probe["at_import"]
    assert registered == []
    assert set(modules) <= {"sim.policies.base", "sim.policies.registry"}


@pytest.mark.parametrize("name", sorted(reg._MODULES))
def test_a_name_imports_what_its_module_does(probe, name):
    lazy, direct, _ = probe[name]
    assert lazy == direct
    assert lazy[0] == reg._MODULES[name]
    assert name in lazy[1]


@pytest.mark.parametrize("name", sorted(reg._MODULES))
def test_a_name_builds_the_class_every_module_imported_builds(probe, name):
    """Twin of the eager package: the class (and its bases) as policy_class gives it alone and
    after every policy module is imported. Fails for a module that changes another's class when
    imported (as s3fifo_runs does S3FIFO's) and is not among registry._COMPANIONS."""
    lazy, _, eager = probe[name]
    assert lazy[3] == eager


def test_lru_imports_lru_alone(probe):
    """The single-turn run's policy: no other policy is imported or registered."""
    _, registered, modules, _ = probe["lru"][0]
    assert registered == ["lru"]
    others = {f"sim.policies.{m}" for m in ("arc", "twoq", "pensieve", "kinetic", "belady")}
    assert not others & set(modules)
