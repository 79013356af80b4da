"""A kernel whose host code never returns off the GPU (it waits for a flag no dry run sets)."""

import time


def custom_kernel(data):
    while True:
        time.sleep(1)
