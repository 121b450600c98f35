#!/bin/sh
# mpirun for the tests: each launch gets its own session directory. OpenMPI
# 4.1 creates a shared one under $TMPDIR, and two launches racing to create
# it fail ("mkdir ... File exists"), which lit's parallel tests provoke.
# A launch that outlives $DISTOPT_MPIRUN_TIMEOUT seconds (default 300) is
# killed: OpenMPI 4.1's mpirun has been seen waiting forever after every
# rank had exited, when one of them died by a signal (kill.test), and a test
# must fail, not hang the suite.
session=$(mktemp -d)
trap 'rm -rf "$session"' EXIT
timeout --kill-after=10 "${DISTOPT_MPIRUN_TIMEOUT:-300}" \
  mpirun --allow-run-as-root --oversubscribe --bind-to none \
  --mca orte_tmpdir_base "$session" "$@"
