"""Every code block of README.md and docs/*.md that a reader would run or
copy is checked (test/Docs/doc-blocks.test), so a doc cannot drift from the
code:

- ```sh blocks run, one doc at a time and in order, in a scratch directory
  where build/, examples/ and the other top-level directories of the
  repository are visible; each must exit 0. `mpirun` runs as root and with
  more ranks than cores there (OMPI_ALLOW_RUN_AS_ROOT, oversubscription
  allowed through the environment, as docs/getting-started.md explains).
- ```mlir blocks are parsed and verified by distopt-opt: whole modules as
  they are; a fragment of a function body (`<!-- doc-test: in func(ARGS)
  -->` before it) inside `func.func @snippet(ARGS)`, with any
  `distopt.process_group` and `distopt.mesh` lines moved to the module.
- `<!-- doc-test: prelude TEXT -->` adds module-level TEXT (a process
  group) before an MLIR block.
- `<!-- snippet: PATH -->` blocks are checked by snippets.py (verbatim in
  a file CI compiles or tests).
- `<!-- doc-test: not run: REASON -->` skips a block; the reason is
  required (a GPU, 30 minutes, a recursive `scripts/test`).

Other languages (json, c, cpp, cmake, python, plain) are excerpts of
files that tests build and are not checked here.

usage: doc_blocks.py REPO_ROOT DISTOPT_OPT SCRATCH [DOC...]
"""
import glob
import os
import re
import subprocess
import sys

BLOCK = re.compile(r"((?:<!--[^\n]*-->\n)*)```([a-z]*)\n(.*?)```", re.S)
MARK = re.compile(r"<!-- (doc-test|snippet): ?(.*?) -->")


def markers(text):
    out = {}
    for kind, value in MARK.findall(text):
        if kind == "snippet":
            out["snippet"] = value
            continue
        word, _, rest = value.partition(" ")
        if value.startswith("not run:"):
            out["skip"] = value[len("not run:"):].strip()
        elif word == "in":
            out["in"] = rest.strip()
        elif word == "prelude":
            out.setdefault("prelude", []).append(rest.strip())
        else:
            out["unknown"] = value
    return out


def check_mlir(opt, code, marks):
    prelude = "\n".join(marks.get("prelude", []))
    if "in" in marks:
        module_level = ("distopt.process_group", "distopt.mesh")
        body = [l for l in code.splitlines()
                if not l.lstrip().startswith(module_level)]
        groups = [l for l in code.splitlines()
                  if l.lstrip().startswith(module_level)]
        signature = marks["in"]
        if not signature.startswith("func("):
            return "doc-test: in needs func(ARGS)"
        args = signature[len("func("):-1]
        text = (prelude + "\n" + "\n".join(groups) +
                f"\nfunc.func @snippet({args}) {{\n" + "\n".join(body) +
                "\n  return\n}\n")
    else:
        text = prelude + "\n" + code
    out = subprocess.run([opt, "-o", os.devnull], input=text,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return out.stderr.strip().splitlines()[0] if out.stderr else "failed"
    return None


def main():
    root, opt, scratch = sys.argv[1:4]
    docs = sys.argv[4:] or ([os.path.join(root, "README.md")] +
                            sorted(glob.glob(os.path.join(root, "docs",
                                                          "*.md"))))
    # OpenMPI's session directory of its own (as test/mpirun.sh gives each
    # launch): launches racing to create the shared one under $TMPDIR fail.
    session = os.path.join(scratch, "ompi-session")
    os.makedirs(session, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_orte_tmpdir_base=session,
               PATH=os.path.join(root, "build", "bin") + os.pathsep +
               os.environ["PATH"])
    counts = {"run": 0, "parsed": 0, "snippet": 0, "skipped": 0}
    failures = []
    for doc in docs:
        name = os.path.relpath(doc, root)
        text = open(doc).read()
        work = os.path.join(scratch, name.replace("/", "_"))
        os.makedirs(work, exist_ok=True)
        for entry in os.listdir(root):
            if not entry.startswith(".") and not os.path.exists(
                    os.path.join(work, entry)):
                os.symlink(os.path.join(root, entry),
                           os.path.join(work, entry))
        for match in BLOCK.finditer(text):
            comments, lang, code = match.groups()
            line = text[:match.start(2)].count("\n") + 1
            where = f"{name}:{line}"
            marks = markers(comments)
            if "unknown" in marks:
                failures.append(f"{where}: unknown marker '{marks['unknown']}'")
                continue
            if "skip" in marks:
                if not marks["skip"]:
                    failures.append(f"{where}: 'not run' without a reason")
                counts["skipped"] += 1
                continue
            if "snippet" in marks:
                counts["snippet"] += 1
                continue
            if lang == "mlir":
                error = check_mlir(opt, code, marks)
                counts["parsed"] += 1
                if error:
                    failures.append(f"{where}: {error}")
            elif lang == "sh":
                counts["run"] += 1
                out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                                      code], cwd=work, env=env,
                                     capture_output=True, text=True,
                                     timeout=600)
                if out.returncode != 0:
                    tail = (out.stderr or out.stdout).strip().splitlines()
                    failures.append(f"{where}: exit {out.returncode}: " +
                                    (tail[-1] if tail else ""))
    for failure in failures:
        print("FAIL:", failure)
    print(f"{counts['run']} shell blocks run, {counts['parsed']} MLIR blocks "
          f"verified, {counts['snippet']} snippets, {counts['skipped']} "
          f"marked not run; {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
