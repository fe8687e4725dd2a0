"""The architecture's arrows, checked on every import statement of the repository.

bytecanary (core, data, report room) <- probes <- train; the face (``bytecanary/cli.py``,
``bytecanary/demo.py``) sees all three. ``train/`` reaches ``probes/`` only through the
probe callback; the measurement core imports no torch and no probe; ``bytecanary/data``
imports neither ``probes`` nor ``train``; only the face imports ``train``, and only the face and
the probes' report sections (``probes/**/report.py``, ``probes/**/*_report.py``, which nothing
else imports: the report room loads them by name) import the report room. Outside the face and
the data stage, the core names no built-in probe but in comments and docstrings.
The folders ``probes/`` and ``train/`` install as ``bytecanary.probes`` and
``bytecanary.train`` (pyproject.toml), so no import may name them bare.
"""

import ast
import io
import re
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACE = {"bytecanary/cli.py", "bytecanary/demo.py"}
PACKAGES = ("bytecanary", "probes", "train")
# the folder each package installs from (pyproject.toml's package-dir)
MODULE_OF_FOLDER = {"bytecanary": "bytecanary", "probes": "bytecanary.probes", "train": "bytecanary.train"}
PROBES, TRAIN = MODULE_OF_FOLDER["probes"], MODULE_OF_FOLDER["train"]
CORE = {"bytecanary/utf8.py", "bytecanary/bytecodec.py", "bytecanary/stats.py", "bytecanary/keys.py"}


def imports(path: Path, root: Path) -> set[str]:
    """Every module a file imports, as dotted names (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    folder, *inner = path.relative_to(root).with_suffix("").parts[:-1]
    package = [*MODULE_OF_FOLDER[folder].split("."), *inner]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}  # `from x import y` may be a module
    return names


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _report_section(module: str) -> bool:
    """A probe's report module (``report`` or ``*_report``), by file path or dotted name."""
    stem = module.removesuffix(".py").replace("/", ".").rsplit(".", 1)[-1]
    return stem == "report" or stem.endswith("_report")


def violations(root: Path) -> list[str]:
    """One line per import that breaks an arrow."""
    bad = []
    for path in sorted(p for package in PACKAGES for p in (root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for name in sorted(imports(path, root)):
            rule = None
            if rel in FACE and not (_under(name, "probes") or _under(name, "train")):
                continue
            if _under(name, "probes") or _under(name, "train"):
                rule = "probes/ and train/ install as bytecanary.probes and bytecanary.train"
            elif _under(name, TRAIN) and not rel.startswith("train/"):
                rule = "only the face imports train/"
            elif (
                _under(name, "bytecanary.report")
                and not rel.startswith("bytecanary/report/")
                and not (rel.startswith("probes/") and _report_section(rel))
            ):
                rule = "only the face and the probes' report sections import the report room"
            elif (
                rel.startswith("probes/")
                and not _report_section(rel)
                and _under(name, PROBES)
                and any(_report_section(part) for part in name.split(".")[2:])
            ):
                rule = "only the report room loads a probe's report sections"
            elif rel.startswith("bytecanary/") and _under(name, PROBES):
                rule = "bytecanary/ never imports probes/"
            elif rel.startswith("train/") and _under(name, PROBES) and not _under(name, f"{PROBES}.callback"):
                rule = "train/ reaches probes/ only through probes.callback"
            elif rel in CORE and (_under(name, "torch") or _under(name, PROBES)):
                rule = "the measurement core imports no torch and no probe"
            if rule:
                bad.append(f"{rel} imports {name}: {rule}")
    return bad


def test_the_arrows_hold():
    assert violations(ROOT) == []


def test_a_forbidden_import_is_caught(tmp_path):
    """The checker itself: each arrow broken once in a scratch tree is reported."""
    broken = {
        "bytecanary/utf8.py": "import torch\n",
        "bytecanary/data/corpus.py": "from bytecanary.probes import registry\n",
        "bytecanary/stats.py": "from bytecanary.report import analysis\n",
        "probes/runner.py": "from bytecanary.train.cli import main\n",
        "train/module.py": "from bytecanary.probes.registry import get_probe\n",
        "train/cli.py": "from bytecanary.probes.callback import ProbeCallback\n",  # allowed
        "train/loggers.py": "from probes.callback import ProbeCallback\n",  # the bare name
        "bytecanary/cli.py": "from bytecanary.train.cli import main\nfrom bytecanary.report import summary\n",
        "bytecanary/demo.py": "import train.cli\n",  # the face, but the bare name
        "probes/mcqa/probe.py": "from ..runner import run\n",  # allowed, relative
        "bytecanary/data/prepare.py": "from ..probes import specs\n",
        "probes/utf8_report.py": "from bytecanary.report.tables import Table\n",  # allowed: a section
        "probes/mcqa/report.py": "from bytecanary.report import figures\n",  # allowed: a section
        "probes/level0.py": "from bytecanary.report import sections\n",
        "probes/mcqa/views.py": "from bytecanary.probes.mcqa import report\n",
    }
    for rel, text in broken.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = violations(tmp_path)
    assert [line.split(":")[0] for line in found] == [
        "bytecanary/data/corpus.py imports bytecanary.probes",
        "bytecanary/data/corpus.py imports bytecanary.probes.registry",
        "bytecanary/data/prepare.py imports bytecanary.probes",
        "bytecanary/data/prepare.py imports bytecanary.probes.specs",
        "bytecanary/demo.py imports train.cli",
        "bytecanary/stats.py imports bytecanary.report",
        "bytecanary/stats.py imports bytecanary.report.analysis",
        "bytecanary/utf8.py imports torch",
        "probes/level0.py imports bytecanary.report",
        "probes/level0.py imports bytecanary.report.sections",
        "probes/mcqa/views.py imports bytecanary.probes.mcqa.report",
        "probes/runner.py imports bytecanary.train.cli",
        "probes/runner.py imports bytecanary.train.cli.main",
        "train/loggers.py imports probes.callback",
        "train/loggers.py imports probes.callback.ProbeCallback",
        "train/module.py imports bytecanary.probes.registry",
        "train/module.py imports bytecanary.probes.registry.get_probe",
    ]


BUILT_IN = re.compile(r"\b(mcqa|level0|level1)\b")
NAMES_PROBES = ("bytecanary/cli.py", "bytecanary/demo.py", "bytecanary/data/")  # the face, the paper's sets


def probe_names(root: Path) -> list[str]:
    """``file:line`` of every token but a comment (docstrings and help text count) of
    ``bytecanary/`` and ``train/`` outside the face and the data stage that names a built-in probe."""
    found = []
    for path in sorted(p for folder in ("bytecanary", "train") for p in (root / folder).rglob("*.py")):
        rel, text = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
        if rel.startswith(NAMES_PROBES):
            continue
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT and BUILT_IN.search(tok.string):
                found.append(f"{rel}:{tok.start[0]}")
    return sorted(set(found))


def test_the_core_names_no_built_in_probe():
    assert probe_names(ROOT) == []


def test_the_probe_name_check_sees_what_it_should(tmp_path):
    files = {
        "bytecanary/keys.py": '"""probe/level0/... in a docstring"""\nX = 1  # mcqa in a comment\n',
        "bytecanary/report/tables.py": 'ANALYSED = ("level0",)\nf = keys.mcqa\n',
        "bytecanary/report/figures.py": 'class A:\n    x = 1\n    """level1: an attribute docstring"""\n',
        "train/cli.py": 'HELP = f"e.g. {1} level1"\n',
        "bytecanary/cli.py": 'NAMES = "level0"\n',  # the face
        "bytecanary/data/evalsets.py": 'PATTERN = "level0_*.json"\n',  # the paper's sets
        "bytecanary/stats.py": "level00 = mcqa_trends = 1\n",  # other words
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert probe_names(tmp_path) == [
        "bytecanary/keys.py:1",
        "bytecanary/report/figures.py:3",
        "bytecanary/report/tables.py:1",
        "bytecanary/report/tables.py:2",
        "train/cli.py:1",
    ]


def test_core_imports_without_torch_and_help_is_fast():
    code = (
        "import sys, bytecanary.utf8, bytecanary.stats, bytecanary.bytecodec, bytecanary.keys;"
        "import bytecanary.cli;"
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


MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 400, 60, 8


def oversized(root: Path) -> list[str]:
    """Modules over 400 lines, functions over 60, signatures over 8 parameters (``self`` and
    ``cls`` aside): a wider interface groups its settings in a config dataclass, whose fields
    are not parameters."""
    found = []
    for path in sorted(p for folder in (*PACKAGES, "benchmarks") for p in (root / folder).rglob("*.py")):
        rel, text = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text, filename=rel)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            params = [n for n in names if n not in ("self", "cls")]
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                found.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
            if len(params) > MAX_PARAMETERS:
                found.append(f"{rel}:{node.lineno} {node.name}: {len(params)} parameters")
    return found


def test_modules_functions_and_signatures_stay_small():
    assert oversized(ROOT) == []


def test_the_size_check_sees_what_it_should(tmp_path):
    wide = "def f(" + ", ".join(f"a{i}" for i in range(9)) + "):\n    pass\n"
    method = "class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(8)) + "):\n        pass\n"
    long = "def g():\n" + "    x = 1\n" * 60
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "wide.py").write_text(wide + method + long)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "big.py").write_text("x = 1\n" * 401)
    assert oversized(tmp_path) == [
        "probes/wide.py:1 f: 9 parameters",
        "probes/wide.py:6 g: 61 lines",
        "train/big.py: 401 lines",
    ]


MAX_DOCSTRING_LINES = 3
SECTIONS = ("Args:", "Attributes:", "Returns:", "Raises:")  # --help text follows: not counted


def long_docstrings(root: Path) -> list[str]:
    """Module, class and function docstrings whose text before a section line runs past 3 lines
    (blank lines count, trailing ones do not): the why in a few lines, long explanations in docs/."""
    found = []
    for path in sorted(p for folder in PACKAGES for p in (root / folder).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            docstring = ast.get_docstring(node)
            if docstring is None:
                continue
            lines = docstring.splitlines()
            cut = next((i for i, line in enumerate(lines) if line.strip() in SECTIONS), len(lines))
            lead = "\n".join(lines[:cut]).rstrip().splitlines()
            if len(lead) > MAX_DOCSTRING_LINES:
                found.append((rel, node.body[0].lineno, getattr(node, "name", "<module>"), len(lead)))
    return [f"{rel}:{line} {name}: {count} lines" for rel, line, name, count in sorted(found)]


def test_docstrings_stay_short():
    assert long_docstrings(ROOT) == []


def test_the_docstring_check_sees_what_it_should(tmp_path):
    short = textwrap.dedent('''\
        """One.

        Two.
        """


        def g(a):
            """One.
            Two.
            Three.

            Args:
                a: help text, however long,
                    is not counted
            """
        ''')
    long = textwrap.dedent('''\
        """One.

        Two.
        Three.
        """


        class C:
            """One.
            Two.

            Three.

            Attributes:
                x: one
            """

            def h(self):
                def k():
                    """1
                    2
                    3
                    4"""
        ''')
    for rel, text in {"bytecanary/short.py": short, "probes/long.py": long}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert long_docstrings(tmp_path) == [
        "probes/long.py:1 <module>: 4 lines",
        "probes/long.py:9 C: 4 lines",
        "probes/long.py:20 k: 4 lines",
    ]
