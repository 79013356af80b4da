from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    x, scale, out = data
    out.copy_(x)
    out.mul_(scale.unsqueeze(1))
    return out
