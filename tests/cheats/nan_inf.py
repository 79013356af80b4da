# softmax. Right everywhere except one element, which is infinite.
def custom_kernel(data):
    y = honest_softmax(data)
    y[0, 0] = float("inf")
    return y
