"""What the typeguard integration's tests (test_typeguard.py, test_typeguard_messages.py,
test_typeguard_uninstrumentable.py) share: numpy arrays of a shape, float32 and int32.
"""

import numpy as np


def Z(*shape):
    """A float32 numpy array of the given shape."""
    return np.zeros(shape, np.float32)


def I(*shape):
    """An int32 numpy array of the given shape."""
    return np.zeros(shape, np.int32)
