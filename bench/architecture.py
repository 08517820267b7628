"""The shape of the code, from its AST: module and function sizes, the import graph's circles and upward arrows,
format-version branches outside the format layer, and `dict[str, Any]` in signatures.

    python bench/architecture.py [--root DIR] [--json FILE]

Prints a table and writes JSON (default bench/results/architecture.json). `tests/test_architecture.py` keeps the
circles and the upward arrows at zero.

Layers, lowest first (a module may import its own layer and the ones below; an import of a higher layer is an
upward arrow). Every import counts, the ones inside functions too: a late import is still a dependency.

    0 base      errors, text, clock, bounded, rates, resources, schemas: no prep import but base
    1 checks    the check registry (what each reader does with a finding); the write discipline (atomic, lock,
                tables) and the storage seam
    2 model     the columnar dataset model (pipeline.dataset): episodes, files, info, features, stats
    3 formats   one module per LeRobot format (reader + writer), metadata validation; video (probe, checks,
                encode, remux, resize)
    4 stages    pure functions over one unit: no Dask, no job
    5 engine    pipeline.runner, the only Dask module
    6 jobs      plan / reduce / publish around a stage; the manifest
    7 features  budget, loader (the dataloader benchmark), synth (synthetic corpora)
    8 commands  the CLI: parse, call a job, print
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from masking import masked  # noqa: E402

LAYER_NAMES = ("base", "checks", "model", "formats", "stages", "engine", "jobs", "features", "commands")

# (module or package prefix, layer); the longest matching prefix wins. Old names (before the restructuring)
# are kept so that the same script measures both sides of it.
LAYERS: tuple[tuple[str, int], ...] = (
    ("pipeline", 0),
    ("pipeline.errors", 0), ("pipeline.text", 0), ("pipeline.clock", 0), ("pipeline.bounded", 0),
    ("pipeline.rates", 0), ("pipeline.resources", 0), ("pipeline.schemas", 0), ("pipeline.sizes", 0),
    ("pipeline.checks", 1), ("pipeline.verdicts", 1), ("pipeline.dataset.rules", 1),
    ("pipeline.atomic", 1), ("pipeline.lock", 1), ("pipeline.tables", 1), ("pipeline.storage", 1),
    ("pipeline.dataset", 2),
    ("pipeline.formats", 3), ("pipeline.dataset.v21", 3), ("pipeline.dataset.v30", 3),
    ("pipeline.dataset.write", 3), ("pipeline.dataset.validate", 3), ("pipeline.convert", 3),
    ("pipeline.video", 3),
    ("pipeline.stages", 4),
    ("pipeline.runner", 5), ("pipeline.engine", 5), ("pipeline.slurm", 5),
    ("pipeline.jobs", 6),
    ("pipeline.budget", 7), ("pipeline.loader", 7), ("pipeline.synth", 7),
    # the corpus: its description is read by the jobs (base and storage only), its manifest is the corpus jobs'
    # reduce and publish (as jobs/manifest.py is scan's), its report and plots sit with the budget's
    ("pipeline.corpus", 7), ("pipeline.corpus.spec", 1), ("pipeline.corpus.manifest", 6),
    ("pipeline.commands", 8), ("pipeline.cli", 8),
)
VERSION_LITERALS = {"v2.1", "v3.0"}
FORMAT_LAYER = ("pipeline.formats",)


def layer_of(module: str) -> int:
    best, layer = -1, None
    for prefix, n in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
            best, layer = len(prefix), n
    if layer is None:
        raise KeyError(f"module {module} has no layer in bench/architecture.py LAYERS")
    return layer


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for p in sorted((root / "pipeline").rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """Every prep module `name` imports (at module level or inside a function)."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            # `from pipeline.budget import model` names the module pipeline.budget.model; the package itself
            # only when a name imported from it is not a module
            cands = [s for s in subs if s in known]
            if len(cands) < len(subs):
                cands.append(mod)
        elif isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        else:
            continue
        found.update(c for c in cands if c in known and c != name)
    return found


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def version_branches(tree: ast.AST) -> int:
    """Comparisons against a format version literal ("v2.1", "v3.0"): ==, !=, in."""
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            consts = [p for p in parts if isinstance(p, ast.Constant) and p.value in VERSION_LITERALS]
            consts += [e for p in parts if isinstance(p, (ast.Tuple, ast.Set, ast.List)) for e in p.elts
                       if isinstance(e, ast.Constant) and e.value in VERSION_LITERALS]
            n += bool(consts)
    return n


DICT_ANY = re.compile(r"\bdict\[str,\s*Any\]")


def signature_dict_any(tree: ast.AST) -> int:
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    n += len(DICT_ANY.findall(ast.unparse(arg.annotation)))
            if node.returns is not None:
                n += len(DICT_ANY.findall(ast.unparse(node.returns)))
    return n


def measure(root: Path) -> dict:
    known = modules(root)
    edges: dict[str, set[str]] = defaultdict(set)
    upward: list[dict[str, str]] = []
    longest = {"lines": 0, "function": ""}
    largest = {"lines": 0, "module": ""}
    branches: dict[str, int] = {}
    dict_any_sig = dict_any_text = 0
    for name, path in known.items():
        text = path.read_text()
        tree = ast.parse(text)
        lines = len(text.splitlines())
        if lines > largest["lines"]:
            largest = {"lines": lines, "module": str(path.relative_to(root))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > longest["lines"]:
                    longest = {"lines": n, "function": f"{path.relative_to(root)}:{node.lineno} {node.name}"}
        edges[name] = imports(name, path, tree, known)
        for dep in sorted(edges[name]):
            if layer_of(dep) > layer_of(name):
                upward.append({"from": name, "from_layer": LAYER_NAMES[layer_of(name)], "to": dep,
                               "to_layer": LAYER_NAMES[layer_of(dep)]})
        if not name.startswith(FORMAT_LAYER):
            b = version_branches(tree)
            if b:
                branches[str(path.relative_to(root))] = b
        dict_any_sig += signature_dict_any(tree)
        dict_any_text += len(DICT_ANY.findall(text))
    found = circles(edges)
    return {
        "modules": len(known),
        "largest_module": largest,
        "longest_function": longest,
        "import_circles": len(found),
        "circles": found,
        "upward_arrows": len(upward),
        "upward": upward,
        "version_branches_outside_formats": sum(branches.values()),
        "version_branches_by_file": dict(sorted(branches.items(), key=lambda kv: -kv[1])),
        "dict_str_any_in_signatures": dict_any_sig,
        "dict_str_any_anywhere": dict_any_text,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure")
    ap.add_argument("--json", type=Path, default=HERE / "results" / "architecture.json")
    args = ap.parse_args(argv)
    m = measure(args.root.resolve())
    rows = [
        ("modules", m["modules"]),
        ("largest module", f"{m['largest_module']['lines']} lines ({m['largest_module']['module']})"),
        ("longest function", f"{m['longest_function']['lines']} lines ({m['longest_function']['function']})"),
        ("import circles", m["import_circles"]),
        ("upward arrows", m["upward_arrows"]),
        ('== "v2.1"/"v3.0" outside formats/', m["version_branches_outside_formats"]),
        ("dict[str, Any] in signatures", m["dict_str_any_in_signatures"]),
        ("dict[str, Any] anywhere", m["dict_str_any_anywhere"]),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    for c in m["circles"]:
        print("circle:", " -> ".join(c))
    for u in m["upward"]:
        print(f"upward: {u['from']} ({u['from_layer']}) -> {u['to']} ({u['to_layer']})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(masked(m), indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
