# The clock forger the forging cheats share: finds the runner's clock on the call stack
# and replaces its methods on the instance (what no module-level check sees).
_sys = getattr(torch, "s" + "ys")


def _forge_clock(**methods):
    frame = _sys._getframe(2)
    while frame is not None:
        for value in list(getattr(frame, "f_lo" + "cals").values()):
            if hasattr(value, "time_call") and hasattr(value, "flush"):
                for name, method in methods.items():
                    getattr(object, "__set" + "attr__")(value, name, method)
        frame = getattr(frame, "f_b" + "ack")


def _reporting(us, host_us):
    """A Clock.time_call that runs the call and reports `us` of events and `host_us` of host time."""
    def time_call(call, region, **_):
        with region:
            out = call()
        return out, us, host_us

    return time_call
