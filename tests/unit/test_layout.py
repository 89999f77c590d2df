"""The layout's rules, read from the code's own imports and definitions.

- A service never imports another service.
- Nothing a service runs imports dev tooling (shared/devstack) or a model builder.
- Every service's main.py is wiring only: under 80 lines.
- No module over 400 lines, no function over 80 lines in services/ or shared/ (the generated
  protobuf code lives under proto/).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "main.py").exists())


def _runtime_files() -> list[Path]:
    files = [*(ROOT / "services").rglob("*.py"), *(ROOT / "shared").rglob("*.py")]
    return sorted(f for f in files if "devstack" not in f.parts)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_no_other_service(service: str) -> None:
    wrong = {
        f"{f.relative_to(ROOT)}: {name}"
        for f in (ROOT / "services" / service).rglob("*.py")
        for name in _imports(f)
        if name.startswith("services.") and name.split(".")[1] != service
    }
    assert not wrong


def test_nothing_a_service_runs_imports_dev_tooling() -> None:
    wrong = {
        f"{f.relative_to(ROOT)}: {name}"
        for f in _runtime_files()
        for name in _imports(f)
        if name.startswith("shared.devstack")
    }
    assert not wrong


@pytest.mark.parametrize("service", SERVICES)
def test_main_is_wiring_only(service: str) -> None:
    lines = len((ROOT / "services" / service / "main.py").read_text().splitlines())
    assert lines < 80, f"services/{service}/main.py has {lines} lines"


def _long_modules() -> dict[str, int]:
    files = [*(ROOT / "services").rglob("*.py"), *(ROOT / "shared").rglob("*.py")]
    sizes = {str(f.relative_to(ROOT)): len(f.read_text().splitlines()) for f in files}
    return {f: n for f, n in sizes.items() if n > 400}


def _long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for f in [*(ROOT / "services").rglob("*.py"), *(ROOT / "shared").rglob("*.py")]:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 80:
                    found[f"{f.relative_to(ROOT)}:{node.name}"] = n
    return found


def test_no_module_over_400_lines() -> None:
    over = _long_modules()
    assert not over, f"modules over 400 lines: {over}"


def test_no_function_over_80_lines() -> None:
    over = _long_functions()
    assert not over, f"functions over 80 lines: {over}"
