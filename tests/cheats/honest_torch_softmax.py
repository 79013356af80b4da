# softmax. An honest kernel written with plain torch ops (none of them forbidden).
def custom_kernel(data):
    shifted = data - data.max(dim=-1, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
