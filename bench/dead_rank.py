#!/usr/bin/env python3
"""How fast the survivors of a dead rank stop: 3 ranks run a compiled step
(distopt-run, 4M-parameter SGD, steps back to back); rank 2 is SIGKILLed
from outside 2 s in; the time from the kill until each survivor process is
gone is measured (polled every 2 ms), over 5 trials each:

- with mpirun's default abort: mpirun ends the job when a rank dies;
- with the abort disabled (--mca orte_abort_on_non_zero_status 0): the
  survivors must notice by themselves (the runtime's liveness check of its
  local peers), print an error naming the dead rank and exit;
- a stuck rank (SIGSTOP instead of SIGKILL), abort disabled: alive, so only
  the timeout (DISTOPT_RT_TIMEOUT=5 here) ends the others.

Prints a markdown table for docs/reliability.md.

usage: dead_rank.py [BUILD_DIR]
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rank_pids(mpirun_pid):
    """distopt-run processes of this launch, by rank."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"distopt-run" not in f.read().split(b"\0")[0]:
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        rank = env.get(b"OMPI_COMM_WORLD_RANK")
        if rank is not None:
            found[int(rank)] = int(pid)
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def trial(build, library, abort, sig):
    env = dict(os.environ, DISTOPT_RT_TIMEOUT="5")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "3"]
    if not abort:
        cmd += ["--mca", "orte_abort_on_non_zero_status", "0"]
    cmd += [os.path.join(build, "bin", "distopt-run"), library, "--steps", "1000000",
            "--progress-seconds", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    pids = {}
    deadline = time.time() + 30
    while len(pids) < 3 and time.time() < deadline:
        time.sleep(0.05)
        pids = rank_pids(proc.pid)
    time.sleep(2)
    os.kill(pids[2], sig)
    killed = time.monotonic()
    gone = {}
    while len(gone) < 2 and time.monotonic() - killed < 60:
        for rank in (0, 1):
            if rank not in gone and not alive(pids[rank]):
                gone[rank] = time.monotonic() - killed
        time.sleep(0.002)
    if sig == signal.SIGSTOP:
        os.kill(pids[2], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    # The step returns the failed collective's status; distopt-run reports it.
    message = next((line for line in err.decode().splitlines()
                    if line.startswith("distopt-run: rank")), "")
    return max(gone.values()) if len(gone) == 2 else float("inf"), message


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            f.write('{"world_size": 3, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},'
                    ' "parameters": [{"name": "w", "shape": [2048, 2048], "dtype": "f32"}]}')
        step = os.path.join(tmp, "step.mlir")
        library = os.path.join(tmp, "step.so")
        subprocess.run([os.path.join(build, "bin", "distopt-translate"), "--import-param-spec",
                        spec, "-o", step], check=True)
        subprocess.run([os.path.join(build, "bin", "distopt-compile"), step, "--pipeline=",
                        "-o", library], check=True)
        print("| scenario | survivors gone after (s), 5 trials | median | what they print |")
        print("|---|---|---|---|")
        for label, abort, sig in [("SIGKILL, mpirun aborts the job (default)", True, signal.SIGKILL),
                                  ("SIGKILL, abort disabled", False, signal.SIGKILL),
                                  ("SIGSTOP (alive, stuck), abort disabled, timeout 5 s", False,
                                   signal.SIGSTOP)]:
            times, messages = [], []
            for _ in range(5):
                t, message = trial(build, library, abort, sig)
                times.append(t)
                messages.append(message)
            shown = next((m for m in messages if m), "(killed by mpirun)")
            shown = shown.replace("|", "\\|")
            print(f"| {label} | {', '.join(f'{t:.3f}' for t in times)} | "
                  f"{statistics.median(times):.3f} | `{shown[:160]}` |")


if __name__ == "__main__":
    main()
