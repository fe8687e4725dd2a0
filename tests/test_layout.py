"""The layering rule (bytecanary <- probes <- train) and a fast, torch-free core."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_dependencies_point_one_way():
    forbidden = {"bytecanary": {"probes", "train"}, "probes": {"train"}}
    for package, banned in forbidden.items():
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "bytecanary" / "cli.py":
                continue  # the command line is the face of all three
            bad = _imported_top_levels(path) & banned
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_core_imports_without_torch_and_help_is_fast():
    code = (
        "import sys, bytecanary.utf8, bytecanary.stats, bytecanary.cli;"
        "assert 'torch' not in sys.modules, 'torch loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run(
        [sys.executable, "-m", "bytecanary.cli", "--help"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "demo" in out.stdout
