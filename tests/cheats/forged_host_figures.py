# vector_add (GPU). Forges every figure the runner reports: 0.5 us of events and a huge host
# time a timed call, and a host clock that jumps a second a reading, so the back-to-back
# batch reports huge host times too; each call really keeps the GPU busy ~200 us more than
# the honest kernel. The host figures may explain the judge's clock, but never shrink it.
# uses: _forge
_sleep = getattr(torch.cuda, "_sl" + "eep")
_ticks = [1e9]  # above any monotonic reading, so every host figure is huge and positive


def _jumping_counter():
    _ticks[0] += 1.0
    return _ticks[0]


def custom_kernel(data):
    a, b, out = data
    _forge_clock(time_call=_reporting(0.5, 1e6), perf_counter=_jumping_counter)
    _sleep(400_000)
    return honest_add(a, b, out)
