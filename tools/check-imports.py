#!/usr/bin/env python3
"""Fails when a Swift file imports a module that its target does not declare.

SwiftPM's `--explicit-target-dependency-import-check=error` only checks that an imported module is reachable
through the target's dependencies, transitively: a target that declares Hummingbird may import NIOCore
unnoticed. This checks the direct declaration. A module counts as declared when it is one of the target's own
target dependencies, or one of the modules of a product the target declares (read from each dependency
package's own `swift package describe`). Modules that no package of the graph defines (Foundation, Glibc,
Synchronization, Testing, …) are the toolchain's and always allowed.

Usage: tools/check-imports.py [package directory]   (after `swift build`, so that .build/checkouts exists)
"""

import concurrent.futures
import json
import re
import subprocess
import sys
from pathlib import Path

IMPORT = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|private|fileprivate)\s+)?"
    r"import\s+(?:(?:struct|class|enum|protocol|typealias|func|let|var)\s+)?([A-Za-z_][A-Za-z0-9_]*)")


def describe(directory):
    result = subprocess.run(["swift", "package", "describe", "--type", "json"], cwd=directory, capture_output=True,
                            text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"swift package describe failed in {directory}:\n{result.stderr}")
    return json.loads(result.stdout[result.stdout.index("{"):])


def imports(path):
    """(line number, module) of each import in `path`."""
    found = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        match = IMPORT.match(line)
        if match:
            found.append((number, match.group(1)))
    return found


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    package = describe(root)
    checkouts = sorted(path for path in (root / ".build" / "checkouts").iterdir() if (path / "Package.swift").exists())
    # Every module a dependency package defines, and the modules of each of its products.
    product_modules, foreign_modules = {}, set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for described in pool.map(describe, checkouts):
            c99 = {target["name"]: target["c99name"] for target in described["targets"]}
            foreign_modules.update(c99.values())
            for product in described["products"]:
                product_modules.setdefault(product["name"], set()).update(c99[t] for t in product["targets"])
    own = {target["name"]: target["c99name"] for target in package["targets"]}
    problems = []
    for target in package["targets"]:
        allowed = {target["c99name"]} | {own[name] for name in target.get("target_dependencies") or []}
        for product in target.get("product_dependencies") or []:
            allowed |= product_modules.get(product, {product})
        for source in target["sources"]:
            path = root / target["path"] / source
            for number, module in imports(path):
                if module in allowed:
                    continue
                if module in own.values() or module in foreign_modules:
                    problems.append(f"{path.relative_to(root)}:{number}: imports {module}, which target "
                                    f"{target['name']} does not declare (add it to its dependencies in Package.swift)")
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} import(s) of undeclared modules", file=sys.stderr)
        return 1
    print(f"imports: every module imported by {len(package['targets'])} targets is declared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
