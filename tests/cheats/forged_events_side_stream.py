# vector_add (GPU). Both escapes at once: the work runs on a side stream (the events on the
# current stream see an empty interval), the clock found on the stack reports 0.5 us of
# events and 0.5 us of host time a call, and the kernel keeps the GPU busy ~200 us more.
# uses: _forge
_cuda = torch.cuda
_sleep = getattr(_cuda, "_sl" + "eep")
_side = getattr(_cuda, "Str" + "eam")()
_on = getattr(_cuda, "str" + "eam")


def custom_kernel(data):
    a, b, out = data
    _forge_clock(time_call=_reporting(0.5, 0.5))
    with _on(_side):
        _sleep(400_000)
        honest_add(a, b, out)
    return out
