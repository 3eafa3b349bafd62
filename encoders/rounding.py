"""Old import path (before 0.2), kept for one release: the scale-and-round is part of the device
encoder, :mod:`shuffledp.encoders.encoder`."""

from shuffledp._compat import forward

__getattr__, __dir__ = forward(__name__, "shuffledp.encoders.encoder",
                                 "shuffledp.accounting.summation")
