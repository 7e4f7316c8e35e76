"""edgebed: an emulation testbed for asynchronous distributed deep learning on edge devices."""
__version__ = "0.1.0"
