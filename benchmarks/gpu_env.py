"""What ``benchmarks/gpu_run.sh`` asks of the Python it runs in, before the check starts.

    python benchmarks/gpu_env.py missing WHEEL...   # the carried wheels this Python lacks
    python benchmarks/gpu_env.py versions           # one line: the versions the check needs
    python benchmarks/gpu_env.py metadata DEST      # bytecanary's dist-info, entry points too

It runs on the GPU machine's own image, so it imports only the standard library and
``packaging`` until the versions are known to be fine.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# what the GPU check imports, in the order the line shows them; the rest of pyproject's
# dependencies serve `bytecanary prepare` and W&B, which the check does not run
NEEDED = (
    "torch",
    "lightning",
    "transformers",
    "tokenizers",
    "numpy",
    "jsonargparse",
    "pyyaml",
    "tqdm",
    "matplotlib",
    "packaging",
)


def missing(wheels: list[str]) -> list[str]:
    """The wheels whose distribution this Python does not have, at any version."""
    out = []
    for wheel in wheels:
        name = parse_wheel_filename(Path(wheel).name)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(wheel)
    return out


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def requirements() -> dict[str, Requirement]:
    """pyproject.toml's runtime dependencies, by normalized name."""
    return {(r := Requirement(line)).name.lower(): r for line in project()["dependencies"]}


def versions() -> tuple[str, list[str]]:
    """(one line naming every needed package's version, what is wrong with them)."""
    wanted = requirements()
    shown, wrong = [], []
    for name in NEEDED:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} is not installed")
            continue
        shown.append(f"{name} {version}")
        spec = wanted[name].specifier
        if not spec.contains(Version(version), prereleases=True):
            wrong.append(f"{name} {version} is outside {name}{spec} (pyproject.toml)")
    absent = [name for name in wanted if name not in NEEDED and not installed(name)]
    line = "versions: " + ", ".join(shown)
    if absent:
        line += f"; not here, and not needed by the check: {', '.join(absent)}"
    return line, wrong


def installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def write_metadata(dest: Path) -> Path:
    """The dist-info an install would write beside the checkout put on the path: the built-in
    probes register through its entry points, as a plugin's do."""
    about = project()
    info = dest / f"{about['name']}-{about['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {about['name']}\nVersion: {about['version']}\n", encoding="utf-8"
    )
    groups = [
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in about["entry-points"].items()
    ]
    (info / "entry_points.txt").write_text("\n".join(groups), encoding="utf-8")
    return info


def main(argv: list[str]) -> int:
    if argv[:1] == ["missing"]:
        for wheel in missing(argv[1:]):
            print(wheel)
        return 0
    if argv == ["versions"]:
        line, wrong = versions()
        print(line if not wrong else f"versions: {'; '.join(wrong)}")
        return 1 if wrong else 0
    if argv[:1] == ["metadata"] and len(argv) == 2:
        write_metadata(Path(argv[1]))
        return 0
    print(__doc__.strip().splitlines()[2], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
