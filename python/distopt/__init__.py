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

from .compiler import compile
from .errors import CompileError, DistoptError
from .step import Session, Step, TensorInfo, Value

__all__ = ["compile", "CompileError", "DistoptError", "Session", "Step",
           "TensorInfo", "Value"]
