#!/usr/bin/env python3
"""B2 (first part): distopt_rt_all_reduce against raw MPI_Allreduce, measured
in the same run on the same buffers, at 2 and 4 ranks, f32, 8 B to 128 MiB.
--update writes the tables into docs/benchmarks.md between the B2 markers.

    bench/allreduce.py [--build build] [--update]
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    bench = os.path.join(args.build, "runtime", "bin", "distopt-rt-allreduce-bench")
    text = ""
    for ranks in (2, 4):
        out = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                              "-np", str(ranks), bench, str(1 << 27)],
                             check=True, capture_output=True, text=True).stdout
        text += f"{ranks} ranks:\n\n{out}\n"
    print(text)
    if args.update:
        update_section("B2", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
