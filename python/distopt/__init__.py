"""distopt from Python: compile a data-parallel optimizer step, run it from a
training loop on an mpi4py communicator, checkpoint it (docs/host-library.md).

    import distopt
    step = distopt.Step(distopt.compile("spec.json", pipeline="zero-stage=2"))
    with distopt.Session(step, comm=MPI.COMM_WORLD) as session:
        ...
        session.run()

distopt.torch.DistributedOptimizer replaces DDP + torch.optim in a PyTorch
loop.
"""

import os as _os
import sys as _sys

# OpenMPI's TCP transport without its emulated RDMA, which halved the rate
# of back-to-back collectives between machines (docs/runtime.md): only
# where MPI has not started yet, and never over the environment's value.
if "mpi4py.MPI" not in _sys.modules:
    _os.environ.setdefault("OMPI_MCA_btl_tcp_flags",
                           "send,inplace,need-ack,need-csum")

from .compiler import compile  # noqa: E402
from .errors import CompileError, DistoptError  # noqa: E402
from .planner import calibrate, plan  # noqa: E402
from .step import Session, Step, TensorInfo, Value  # noqa: E402

__all__ = ["calibrate", "compile", "CompileError", "DistoptError", "plan",
           "Session", "Step", "TensorInfo", "Value"]
