"""Shared by the benchmarks: writes a result into docs/benchmarks.md."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def update_section(name, text):
    """Replaces what lies between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
    in docs/benchmarks.md with `text`."""
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(path) as f:
        doc = f.read()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    doc = doc[:doc.index(begin) + len(begin)] + "\n" + text + doc[doc.index(end):]
    with open(path, "w") as f:
        f.write(doc)
