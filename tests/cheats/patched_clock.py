# vector_add. Finds the timing clock on the call stack and makes it report 1 us a call,
# while each call really spends 30 ms; the result must show the time really spent.
_sys = getattr(torch, "s" + "ys")
_time = getattr(getattr(getattr(torch, "_log" + "ging"), "_internal"), "ti" + "me")
_ticks = [0.0]


def _fake_counter():
    _ticks[0] += 1e-6  # 1 us a reading, from the moment of patching
    return _ticks[0]


def _patch_clocks():
    frame = _sys._getframe(1)
    while frame is not None:
        for value in list(getattr(frame, "f_lo" + "cals").values()):
            if hasattr(value, "perf_counter") and hasattr(value, "time_call") and value.perf_counter is not _fake_counter:
                _ticks[:] = [_time.perf_counter()]
                getattr(object, "__set" + "attr__")(value, "perf_counter", _fake_counter)
        frame = getattr(frame, "f_b" + "ack")


def custom_kernel(data):
    a, b, out = data
    _patch_clocks()
    end = _time.perf_counter() + 0.03
    while _time.perf_counter() < end:
        pass
    return honest_add(a, b, out)
