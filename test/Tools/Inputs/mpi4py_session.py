"""A training program that starts MPI itself (mpi4py imported before
distopt) and runs one step of STEP.so (test/Tools/cluster.test).

    mpi4py_session.py BUILD_PYTHON_DIR STEP.so
"""
import sys

from mpi4py import MPI  # MPI starts here, before distopt can choose

sys.path.insert(0, sys.argv[1])
import distopt  # noqa: E402

step = distopt.Step(sys.argv[2])
with distopt.Session(step, comm=MPI.COMM_WORLD) as session:
    session.run()
print(f"rank {MPI.COMM_WORLD.Get_rank()}: ran")
