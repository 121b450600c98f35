#!/bin/sh
# mpirun for the tests: each launch gets its own session directory. OpenMPI
# 4.1 creates a shared one under $TMPDIR, and two launches racing to create
# it fail ("mkdir ... File exists"), which lit's parallel tests provoke.
session=$(mktemp -d)
trap 'rm -rf "$session"' EXIT
mpirun --allow-run-as-root --oversubscribe --bind-to none \
  --mca orte_tmpdir_base "$session" "$@"
