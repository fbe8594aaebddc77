"""The layering rule of docs/architecture.md, checked on the code as it is.

Stages, lowest first; a module may import only its own stage and the stages below it:

    model                          the typed results and errors every stage exchanges
    knowledge                      the rule base
    graphdb                        the store (it stores the rule base: graphdb/rules.py)
    tracer                         recording; it writes runs into the store
    diagnose                       the diff; it re-runs programs through the tracer
    magneton.render                presentation: results as text, tables and CSV
    magneton (the CLI), tui        the two front ends, side by side: neither imports the other

Inside `diagnose/` the sub-packages are layered the same way (source → matching → fix →
cause → jobs → pipeline), and diagnose reaches the tracer only through its torch-free
contract modules (`TRACER_CONTRACT`). No import cycle is allowed inside a stage either:
a module-level cycle works only while the imports run in one order, and a function-level
import that closes a loop hides the same tangle from the reader.

Imports are read with `ast`, not by importing: every import counts, at module level or
inside a function, so a lazy import cannot hide an edge. Only imports under `if
TYPE_CHECKING:` are left out of the cycle check (they never run, so they cannot loop; a
screen naming the App it belongs to in an annotation is Textual's idiom); they still count
for the stage order.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGE_FOLDERS = {
    "model": "model",
    "knowledge": "knowledge",
    "graphdb": "graphdb",
    "tracer": "tracer",
    "diagnose": "diagnose",
    "render": "render",
    "tui": "tui",
    "magneton": "magneton",
}
# rank of each stage; equal ranks may not import each other
RANK = {
    "model": 0,
    "knowledge": 1,
    "graphdb": 2,
    "tracer": 3,
    "diagnose": 4,
    "render": 5,
    "magneton": 6,
    "tui": 6,
}
DIAGNOSE_RANK = {"source": 0, "matching": 1, "fix": 2, "cause": 3, "jobs": 4, "": 5}
TRACER_CONTRACT = {
    "magneton.tracer.capture.unfoldings",  # a tensor summary's layout (matching reads summaries)
    "magneton.tracer.timing.timeline",  # which operator each instant of a run is charged to
    "magneton.tracer.timing.alignment",  # a re-measured step aligned with its recording
    "magneton.tracer.energy.pricing",  # a re-measurement priced like its recording
    "magneton.tracer.timing.warm",  # the warm workers that re-run a recorded program
    "magneton.tracer.programs.program",  # a recorded program's config, and running one window of it
    "magneton.tracer.programs.cmdline",  # a recorded program's parser: checking a command line
    "magneton.tracer.programs.configfiles",  # the config files a program read: their keys
    "magneton.tracer.programs.envreads",  # the environment variables a program read
}
# The front ends (render, the CLI, the TUI) reach each stage below them through one door:
# the store through its package, recording and diagnosis through their `api` modules.
# Everything else of those stages is theirs to rearrange.
FRONT_ENDS = {"render", "magneton", "tui"}
DOORS = {
    "graphdb": {"magneton.graphdb"},
    "tracer": {"magneton.tracer.api"},
    "diagnose": {"magneton.diagnose.api"},
}


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name → file for every stage module (magneton/'s stage symlinks skipped)."""
    out = {}
    for stage, folder in STAGE_FOLDERS.items():
        base = root / folder
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(base)
            if any((base / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts))):
                continue  # magneton/tracer -> ../tracer and the like
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            prefix = ["magneton"] if stage == "magneton" else ["magneton", stage]
            out[".".join(prefix + parts)] = p
    return out


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def imports(mods: dict[str, Path]) -> list[Edge]:
    """Every import of one stage module by another, at module level or in a function."""
    edges = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        typed = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                # `from a import b`: b is a module or a name in a
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            for t in set(targets):
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    edges.append(Edge(name, t, node.lineno, node.lineno in typed))
    return edges


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGE_FOLDERS else "magneton"


def diagnose_part(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 else ""  # "" = diagnose/'s own modules (pipeline)


def violations(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        s, d = stage_of(e.src), stage_of(e.dst)
        where = f"{e.src}:{e.line} imports {e.dst}"
        if s != d and RANK[d] >= RANK[s]:
            out.append(f"{where} ({d} is not below {s})")
        elif s == d == "diagnose":
            ps, pd = diagnose_part(e.src), diagnose_part(e.dst)
            if ps != pd and DIAGNOSE_RANK[pd] >= DIAGNOSE_RANK[ps]:
                out.append(f"{where} (diagnose/{pd or '.'} is not below diagnose/{ps or '.'})")
        if s in FRONT_ENDS and d in DOORS and e.dst not in DOORS[d]:
            out.append(f"{where} (a front end uses {d} only through {sorted(DOORS[d])})")
        if s == "diagnose" and d == "tracer" and e.dst not in TRACER_CONTRACT:
            out.append(
                f"{where} (diagnose may use the tracer only through {sorted(TRACER_CONTRACT)})"
            )
    return out


def cycles(edges: list[Edge]) -> list[set[str]]:
    g = nx.DiGraph((e.src, e.dst) for e in edges if not e.type_only)
    return [c for c in nx.strongly_connected_components(g) if len(c) > 1]


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return imports(modules())


def test_every_import_goes_down_the_stages(edges):
    bad = violations(edges)
    assert not bad, "layering violations (docs/architecture.md, Stages):\n" + "\n".join(bad)


def test_no_import_cycle(edges):
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in found)


def test_the_scan_sees_the_stages(edges):
    """The checks read what they should: every stage has modules, lazy imports count."""
    mods = modules()
    assert {stage_of(m) for m in mods} == set(RANK)
    pairs = {(e.src, e.dst) for e in edges}
    # a function-level import of the pipeline's (pipeline.py `run_diff`)
    assert ("magneton.diagnose.pipeline", "magneton.diagnose.jobs.jobdiff") in pairs


def test_the_checks_can_fail(tmp_path):
    """A copy of the stages with one import that goes up (tracer → diagnose) and one loop
    (two knowledge modules importing each other) is caught by both checks."""
    for folder in STAGE_FOLDERS.values():
        (tmp_path / folder).mkdir()
    (tmp_path / "tracer" / "x.py").write_text(
        "def f():\n    from magneton.diagnose import pipeline\n"
    )
    (tmp_path / "diagnose" / "pipeline.py").write_text("")
    (tmp_path / "knowledge" / "a.py").write_text("from . import b\n")
    (tmp_path / "knowledge" / "b.py").write_text("from .a import x\n")
    (tmp_path / "tui" / "t.py").write_text(
        "from magneton.commands import export_patch\nfrom magneton.diagnose import pipeline\n"
    )
    (tmp_path / "magneton" / "commands").mkdir()
    (tmp_path / "magneton" / "commands" / "export_patch.py").write_text("")
    edges = imports(modules(tmp_path))
    bad = violations(edges)
    assert any(v.startswith("magneton.tracer.x:2 imports magneton.diagnose.pipeline") for v in bad)
    assert any(v.startswith("magneton.tui.t:1 imports magneton.commands.export_patch") for v in bad)
    assert any(v.startswith("magneton.tui.t:2 imports magneton.diagnose.pipeline") for v in bad)
    assert {"magneton.knowledge.a", "magneton.knowledge.b"} in cycles(edges)


ENGINE_PACKAGES = {"ladybug", "kuzu"}


def engine_imports(mods: dict[str, Path]) -> list[str]:
    """Modules other than graphdb/engine.py that import the graph engine's package."""
    out = []
    for name, path in mods.items():
        if name == "magneton.graphdb.engine":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            if roots & ENGINE_PACKAGES:
                out.append(f"{name}:{node.lineno}")
    return out


def test_only_graphdb_engine_imports_the_engine(tmp_path):
    """graphdb/engine.py is the one import site of the engine (it picks LadybugDB or, for
    `magneton migrate`, Kùzu: the two cannot share a process); the rest of graphdb/ goes
    through it. A copy with one stray import shows the check can fail."""
    assert engine_imports(modules()) == []
    for folder in STAGE_FOLDERS.values():
        (tmp_path / folder).mkdir()
    (tmp_path / "graphdb" / "codec.py").write_text("def f():\n    import ladybug\n")
    assert engine_imports(modules(tmp_path)) == ["magneton.graphdb.codec:2"]
