"""The exceptions the bindings raise."""


class DistoptError(RuntimeError):
    """A failure the host step library reported.

    status: its distopt_rt_status by name ("invalid_argument", "timeout",
    "peer_died", "world_size_mismatch", ...); str(error): the library's
    message, which names the rank and the argument or operation.
    """

    def __init__(self, message, status="invalid_argument"):
        super().__init__(message)
        self.status = status


class CompileError(DistoptError):
    """distopt-translate or distopt-compile refused the input."""

    def __init__(self, message):
        super().__init__(message, "compile_error")
