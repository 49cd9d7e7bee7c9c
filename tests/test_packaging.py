"""One installed name: the top-level folders install as ``faultlens.*`` and nothing else."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOP = ("ingest", "models", "replay", "synth", "reports", "app")


def _package_dirs() -> set[str]:
    found = set()
    for top in TOP:
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            found.add("faultlens." + ".".join(rel.parts))
    return found


def test_pyproject_lists_every_package() -> None:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(doc["tool"]["setuptools"]["packages"])
    assert listed == _package_dirs()


def test_no_import_of_the_bare_folder_names() -> None:
    # ``from ingest.x import y`` would work from a checkout and fail when installed.
    bare = re.compile(rf"^\s*(from|import) ({'|'.join(TOP)})(\.|\s|$)", re.M)
    offenders = []
    for folder in (*TOP, "tests", "bench"):
        for path in (REPO / folder).rglob("*.py"):
            for match in bare.finditer(path.read_text()):
                line = path.read_text()[: match.start()].count("\n") + 1
                offenders.append(f"{path.relative_to(REPO)}:{line}")
    assert offenders == []


@pytest.mark.slow
def test_wheel_installs_only_faultlens(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("faultlens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"faultlens"}
    assert "faultlens/ingest/data/xid_catalog.csv" in names
    assert "faultlens/app/cli.py" in names
    assert not any(n.startswith(("faultlens/tests/", "faultlens/bench/")) for n in names)


def test_import_faultlens_resolves_to_this_checkout() -> None:
    import faultlens
    import faultlens.ingest

    assert Path(faultlens.ingest.__file__).resolve().parent == REPO / "ingest"
    assert "faultlens" in sys.modules and hasattr(faultlens, "__path__")
