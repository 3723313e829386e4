"""The package as users install it: a built wheel holds every module of both trees and
each imports from the wheel alone. Issue 28: ``pip install ./clients/python`` installed
no ``tern_api.api.portal`` (``create_portal_session`` raised ``ModuleNotFoundError``),
hidden by the editable install of ``make venv``."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

PKG = pathlib.Path(__file__).resolve().parents[1]


def source_modules() -> set[str]:
    found = set()
    for tree in ("tern_client", "tern_api"):
        for path in (PKG / tree).rglob("*.py"):
            found.add(path.relative_to(PKG).as_posix())
    return found


def test_the_wheel_holds_and_imports_every_module():
    with tempfile.TemporaryDirectory() as tmp:
        # A copy as a fresh clone has it: without the egg-info and build/ an editable
        # install leaves here (setuptools reads the egg-info's file list and would add
        # the files a listed-packages config misses).
        source = pathlib.Path(tmp) / "src"
        shutil.copytree(
            PKG,
            source,
            ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__", ".pytest_cache"),
        )
        # The venv's setuptools, no download: the same build pip runs for a user.
        subprocess.run(
            [
                sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                "--no-build-isolation", "--wheel-dir", tmp, str(source),
            ],
            check=True,
            timeout=300,
        )
        wheels = list(pathlib.Path(tmp).glob("tern_client-*.whl"))
        assert len(wheels) == 1, wheels
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = set(wheel.namelist())
            missing = source_modules() - names
            assert not missing, f"not in the wheel: {sorted(missing)}"
            # The package's page (PyPI shows the metadata's description): the README
            # with its quick start.
            [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
            text = wheel.read(metadata).decode()
            assert "Description-Content-Type: text/markdown" in text, text[:2000]
            assert "## Quick start" in text and "tern.portal.create_session" in text
            unpacked = pathlib.Path(tmp) / "site"
            wheel.extractall(unpacked)
        modules = sorted(
            n[: -len(".py")].replace("/", ".").removesuffix(".__init__")
            for n in names
            if n.endswith(".py")
        )
        # Import every module from the unpacked wheel, never from this checkout: -P
        # keeps the script's directory off sys.path and the wheel goes first.
        script = (
            "import importlib, sys\n"
            f"sys.path.insert(0, {str(unpacked)!r})\n"
            f"for m in {modules!r}:\n"
            "    mod = importlib.import_module(m)\n"
            f"    assert mod.__file__.startswith({str(unpacked)!r}), (m, mod.__file__)\n"
            "from tern_api.api.portal import create_portal_session\n"
        )
        subprocess.run([sys.executable, "-P", "-c", script], check=True, timeout=120, cwd=tmp)
