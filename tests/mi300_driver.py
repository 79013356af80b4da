"""A stand-in Triton driver for a machine without a GPU: it answers with MI300X's target
(gfx942, which Triton's AMD back end compiles on the CPU), device 0 and stream 0, and builds
launchers with the class it is given. Only what Triton's launch path asks of a driver before
it launches; nothing here can launch. Used by tests/precompile_probe.py and
benchmarks/launcher_overlap.py.
"""


class Mi300Driver:
    def __init__(self, launcher_cls):
        self.launcher_cls = launcher_cls

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from kgit_harness import targets

        return targets.gpu_target("gfx942")
