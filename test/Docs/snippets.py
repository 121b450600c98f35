"""Every code block of a doc preceded by `<!-- snippet: PATH -->` must appear
verbatim in PATH (relative to the repository root), so tutorials cannot
drift from the code that CI compiles and tests.

usage: snippets.py REPO_ROOT DOC...
"""
import os
import re
import sys

BLOCK = re.compile(r"<!-- snippet: (\S+) -->\n```[a-z]*\n(.*?)```", re.S)


def main():
    root, docs = sys.argv[1], sys.argv[2:]
    checked = bad = 0
    for doc in docs:
        text = open(doc).read()
        for path, code in BLOCK.findall(text):
            source = open(os.path.join(root, path)).read()
            checked += 1
            if code not in source:
                bad += 1
                first = code.splitlines()[0] if code else ""
                print(f"FAIL: {os.path.basename(doc)}: snippet starting '{first}' is not in {path}")
    print(f"{checked} snippets checked, {bad} differ")
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
