"""tern_api/ is committed; it must be what openapi-python-client (pinned in
requirements-dev.txt, with the ruff its post hooks run) makes of the committed
shared/tern-api/openapi.json today. After a spec change: ``make clients``.

Committed rather than generated in the build so that ``pip install -e clients/python``
needs no generator, and a spec change shows up as a reviewable diff of the client."""

from __future__ import annotations

import filecmp
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

PKG = pathlib.Path(__file__).resolve().parents[1]
SPEC = PKG.parents[1] / "shared" / "tern-api" / "openapi.json"


def generator() -> pathlib.Path:
    """The venv's openapi-python-client; fails (never skips) with what to run."""
    found = pathlib.Path(sys.executable).parent / "openapi-python-client"
    assert found.is_file(), (
        f"openapi-python-client is missing ({found}): run `make venv` (requirements-dev.txt)"
    )
    return found


def differences(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.extend(
            f"{prefix}{n} only in the committed tree"
            for n in cmp.left_only
            if n != "__pycache__"
        )
        out.extend(
            f"{prefix}{n} only in the fresh tree"
            for n in cmp.right_only
            if n != "__pycache__"
        )
        _, mismatch, errors = filecmp.cmpfiles(
            cmp.left, cmp.right, cmp.common_files, shallow=False
        )
        out.extend(f"{prefix}{n} differs" for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__":
                walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(a, b), "")
    return out


def test_tern_api_matches_the_openapi_document() -> None:
    # Inside the package, so ruff (the post hooks) reads the same pyproject.toml settings.
    with tempfile.TemporaryDirectory(prefix=".drift-", dir=PKG) as tmp:
        fresh = pathlib.Path(tmp) / "tern_api"
        env = {
            **os.environ,
            "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        run = subprocess.run(  # its exit code is asserted below
            [
                str(generator()),
                "generate",
                "--path",
                str(SPEC),
                "--meta",
                "none",
                "--config",
                str(PKG / "openapi-python-client.yaml"),
                "--output-path",
                str(fresh),
            ],
            check=False,
            cwd=PKG,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert (fresh / "client.py").is_file(), run.stdout
        diff = differences(PKG / "tern_api", fresh)
        if diff:
            shutil.rmtree(fresh / "__pycache__", ignore_errors=True)
        assert not diff, (
            "tern_api/ is stale: run `make clients` and commit the result:\n"
            + "\n".join(diff)
        )
